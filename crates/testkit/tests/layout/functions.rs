//! Every `fn` with a body in a file, with its length: free functions,
//! methods, trait defaults and nested functions alike. A function is named
//! by what encloses it (`Limiter::decide`, `tests::a_case`, `outer::inner`)
//! so that two `new`s of one file stay apart; a name that still repeats
//! gets `[2]`, `[3]`… in order.

use std::collections::HashMap;

use crate::lexer::{Kind, Token};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// Enclosing impl types, traits, modules and functions, then its own
    /// name, joined by `::`.
    pub name: String,
    /// The line of its `fn`.
    pub line: usize,
    /// From the line of its `fn` to the line of its closing brace, both
    /// counted.
    pub lines: usize,
}

/// A block that names what is inside it.
struct Scope {
    name: String,
    /// The brace depth inside the block.
    depth: usize,
    /// The line of the `fn` when the block is a function's body.
    fn_line: Option<usize>,
}

/// The functions of a tokenized file, in the order they start.
pub fn functions(tokens: &[Token]) -> Vec<Function> {
    let openers = block_openers(tokens);
    let mut scopes: Vec<Scope> = Vec::new();
    let mut found: Vec<(usize, Function)> = Vec::new();
    let mut depth = 0usize;
    for (i, token) in tokens.iter().enumerate() {
        if token.is_punct("{") {
            depth += 1;
            if let Some((name, fn_line)) = openers.get(&i) {
                scopes.push(Scope {
                    name: name.clone(),
                    depth,
                    fn_line: *fn_line,
                });
            }
        } else if token.is_punct("}") {
            if let Some(scope) = scopes.pop_if(|s| s.depth == depth)
                && let Some(line) = scope.fn_line
            {
                let name = scopes
                    .iter()
                    .map(|s| s.name.as_str())
                    .chain([scope.name.as_str()])
                    .collect::<Vec<_>>()
                    .join("::");
                let lines = token.line - line + 1;
                found.push((line, Function { name, line, lines }));
            }
            depth = depth.saturating_sub(1);
        }
    }
    // Closing order puts inner functions first; report by start.
    found.sort_by_key(|(line, _)| *line);
    number_repeats(found.into_iter().map(|(_, f)| f).collect())
}

/// `[2]`, `[3]`… after the second, third… use of one name.
fn number_repeats(mut functions: Vec<Function>) -> Vec<Function> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for f in &mut functions {
        let n = seen.entry(f.name.clone()).or_insert(0);
        *n += 1;
        if *n > 1 {
            f.name = format!("{}[{n}]", f.name);
        }
    }
    functions
}

/// The index of each `{` that opens a function's body, an `impl`, a
/// `trait` or an inline `mod`, with the name it gives what is inside and,
/// for a function, the line of its `fn`.
fn block_openers(tokens: &[Token]) -> HashMap<usize, (String, Option<usize>)> {
    let mut openers = HashMap::new();
    for (i, token) in tokens.iter().enumerate() {
        if token.kind != Kind::Ident {
            continue;
        }
        let next = tokens.get(i + 1);
        let named = next.filter(|t| t.kind == Kind::Ident);
        let opener = match token.text.as_str() {
            // `fn(u8) -> u8` is a type, not an item.
            "fn" => named.map(|name| (name.text.clone(), Some(token.line))),
            "mod" | "trait" => named.map(|name| (name.text.clone(), None)),
            // `-> impl Trait`, `x: impl Trait`: a type, not an item.
            "impl" if at_item_start(tokens, i) => Some((impl_type(tokens, i + 1), None)),
            _ => None,
        };
        if let Some((name, fn_line)) = opener
            && let Some(brace) = body_brace(tokens, i + 1)
        {
            openers.entry(brace).or_insert((name, fn_line));
        }
    }
    openers
}

/// Whether the token at `i` can begin an item (after a block, a `;`, an
/// attribute or a qualifier such as `unsafe`).
fn at_item_start(tokens: &[Token], i: usize) -> bool {
    match i.checked_sub(1).map(|p| &tokens[p]) {
        None => true,
        Some(prev) => {
            ["{", "}", ";", "]"].iter().any(|p| prev.is_punct(p))
                || ["unsafe", "default"].iter().any(|w| prev.is_ident(w))
        }
    }
}

/// The `{` that opens the body of the item whose header starts at `from`,
/// or `None` when a `;` ends it first (a declaration without a body).
/// Braces inside parentheses, brackets or generics belong to the header.
fn body_brace(tokens: &[Token], from: usize) -> Option<usize> {
    let mut nesting = 0usize;
    for (i, token) in tokens.iter().enumerate().skip(from) {
        if token.kind != Kind::Punct {
            continue;
        }
        match token.text.as_str() {
            "(" | "[" | "<" => nesting += 1,
            ")" | "]" | ">" => nesting = nesting.saturating_sub(1),
            "{" if nesting == 0 => return Some(i),
            ";" if nesting == 0 => return None,
            _ => {}
        }
    }
    None
}

/// The last path segment of the type an `impl` header (from just after
/// `impl`) is for: `Limiter` in `impl<S> fmt::Debug for Limiter<S>`.
fn impl_type(tokens: &[Token], from: usize) -> String {
    let mut i = from;
    if tokens.get(i).is_some_and(|t| t.is_punct("<")) {
        i = past_generics(tokens, i);
    }
    let mut header = Vec::new();
    let mut angles = 0usize;
    for token in &tokens[i.min(tokens.len())..] {
        if token.is_punct("{") || token.is_ident("where") || token.is_punct(";") {
            break;
        }
        if token.is_punct("<") {
            angles += 1;
        } else if token.is_punct(">") {
            angles = angles.saturating_sub(1);
        } else if angles == 0 && token.is_ident("for") {
            header.clear();
            continue;
        }
        header.push(token);
    }
    let mut name = None;
    for token in header {
        match token.kind {
            Kind::Ident if token.text == "dyn" || token.text == "mut" => {}
            Kind::Ident => name = Some(token.text.clone()),
            Kind::Punct if token.is_punct("::") || token.is_punct("&") => {}
            Kind::Lifetime => {}
            _ => break,
        }
    }
    name.unwrap_or_else(|| "impl".to_owned())
}

/// The index just past the `<…>` opening at `open`.
fn past_generics(tokens: &[Token], open: usize) -> usize {
    let mut angles = 0usize;
    for (i, token) in tokens.iter().enumerate().skip(open) {
        if token.is_punct("<") {
            angles += 1;
        } else if token.is_punct(">") {
            angles -= 1;
            if angles == 0 {
                return i + 1;
            }
        }
    }
    tokens.len()
}

#[cfg(test)]
mod tests;
