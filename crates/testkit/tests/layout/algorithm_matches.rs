//! The `match`es that name every algorithm: the places a new algorithm
//! must touch, which docs/design.md's checklist ("Where a change goes", an
//! algorithm) lists. A `match` counts when its arms' patterns name every
//! variant of `Limits`, or every variant of `Algorithm` (a match with a
//! `_` arm that names them all counts too: the algorithm still has to be
//! placed there). Patterns are read from tokens, so a `Limits::` inside an
//! arm's body, a string or a comment is never taken for one.

use std::collections::BTreeSet;

use crate::lexer::{Kind, Token};

/// The enums whose variants are the algorithms, in crates/core/src/policy.rs.
pub const ENUMS: [&str; 2] = ["Limits", "Algorithm"];

/// The variants of `enum {name}` in `tokens`, in order; empty when the
/// enum is not there.
pub fn variants(tokens: &[Token], name: &str) -> Vec<String> {
    let Some(at) = tokens
        .windows(2)
        .position(|w| w[0].is_ident("enum") && w[1].is_ident(name))
    else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut depth = 0usize;
    let mut previous: Option<&Token> = None;
    for token in tokens.iter().skip(at + 2) {
        if opens(token) {
            depth += 1;
        } else if closes(token) {
            depth = depth.saturating_sub(1);
            if depth == 0 {
                break;
            }
        } else if depth == 1
            && token.kind == Kind::Ident
            && previous.is_some_and(|p| p.is_punct("{") || p.is_punct(",") || p.is_punct("]"))
        {
            found.push(token.text.clone());
        }
        previous = Some(token);
    }
    found
}

/// A `match` whose arms name every variant of one of the enums.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// The line of its `match`.
    pub line: usize,
    /// The enum whose every variant it names.
    pub names: &'static str,
}

/// The `match`es of a tokenized file that name every variant of one of
/// `enums` (each with its variants), in order.
pub fn sites(tokens: &[Token], enums: &[(&'static str, Vec<String>)]) -> Vec<Site> {
    let mut found = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        if !token.is_ident("match") {
            continue;
        }
        let Some(body) = arms_body(tokens, i + 1) else {
            continue;
        };
        let patterns = patterns(&tokens[body.clone()]);
        for (name, all) in enums {
            let named = named_variants(&patterns, name);
            if !all.is_empty() && all.iter().all(|v| named.contains(v)) {
                found.push(Site {
                    line: token.line,
                    names: name,
                });
                break;
            }
        }
    }
    found
}

/// The tokens between the braces of the arms of a `match` whose scrutinee
/// starts at `from`.
fn arms_body(tokens: &[Token], from: usize) -> Option<std::ops::Range<usize>> {
    let mut depth = 0usize;
    let mut open = None;
    for (k, token) in tokens.iter().enumerate().skip(from) {
        if depth == 0 && token.is_punct("{") {
            open = Some(k);
            break;
        }
        if token.is_punct(";") && depth == 0 {
            return None;
        }
        if opens(token) {
            depth += 1;
        } else if closes(token) {
            depth = depth.checked_sub(1)?;
        }
    }
    let open = open?;
    let mut depth = 0usize;
    for (k, token) in tokens.iter().enumerate().skip(open) {
        if opens(token) {
            depth += 1;
        } else if closes(token) {
            depth -= 1;
            if depth == 0 {
                return Some(open + 1..k);
            }
        }
    }
    None
}

/// The arms' patterns (with their guards) of a match's body: what stands
/// before each `=>` at the body's own depth, back to the comma or the
/// block that ended the arm before.
fn patterns(body: &[Token]) -> Vec<&[Token]> {
    let mut found = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    let mut in_arm_body = false;
    for (k, token) in body.iter().enumerate() {
        if opens(token) {
            depth += 1;
        } else if closes(token) {
            depth = depth.saturating_sub(1);
            // A block-like arm body (`{ … }`, `if … { … } else { … }`)
            // needs no comma after it: the next pattern may start here.
            if depth == 0 && in_arm_body && token.is_punct("}") {
                start = k + 1;
            }
        } else if depth == 0 && token.is_punct("=>") {
            found.push(&body[start..k]);
            in_arm_body = true;
        } else if depth == 0 && token.is_punct(",") && in_arm_body {
            start = k + 1;
            in_arm_body = false;
        }
    }
    found
}

/// The variants of `name` that `patterns` spell `name::Variant` (or
/// `Self::Variant`, inside the enum's own impl).
fn named_variants(patterns: &[&[Token]], name: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for pattern in patterns {
        for w in pattern.windows(3) {
            if (w[0].is_ident(name) || w[0].is_ident("Self"))
                && w[1].is_punct("::")
                && w[2].kind == Kind::Ident
            {
                named.insert(w[2].text.clone());
            }
        }
    }
    named
}

fn opens(token: &Token) -> bool {
    token.is_punct("{") || token.is_punct("(") || token.is_punct("[")
}

fn closes(token: &Token) -> bool {
    token.is_punct("}") || token.is_punct(")") || token.is_punct("]")
}

/// The files the checklist for a new algorithm lists as its `match`es:
/// in the "An algorithm" item of `design` (docs/design.md), each sub-item
/// that opens with a path in backticks, `` - `crates/…/file.rs`: … ``.
pub fn checklist(design: &str) -> Result<BTreeSet<String>, String> {
    let mut lines = design
        .lines()
        .skip_while(|l| !l.starts_with("- **An algorithm**"));
    if lines.next().is_none() {
        return Err("no item starting `- **An algorithm**`".to_owned());
    }
    let mut listed = BTreeSet::new();
    for line in lines.take_while(|l| !l.starts_with("- ") && !l.starts_with('#')) {
        let Some(rest) = line.trim_start().strip_prefix("- `") else {
            continue;
        };
        let Some((path, _)) = rest.split_once('`') else {
            continue;
        };
        if !listed.insert(path.to_owned()) {
            return Err(format!("{path} is listed twice"));
        }
    }
    if listed.is_empty() {
        return Err("the item lists no file as `` - `crates/…/file.rs`: … ``".to_owned());
    }
    Ok(listed)
}

#[cfg(test)]
mod tests;
