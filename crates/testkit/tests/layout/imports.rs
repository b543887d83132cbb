//! What each file of a crate takes from the crate's other files. A file
//! imports with every `crate::`, `super::` and `self::` path (in a `use`,
//! each item of a `use` group, or a path in code) and with each `use` of one
//! of its own child modules by name. A path is followed through the
//! modules it names and through the `use`s of the modules it passes
//! (`lib.rs`'s re-exports, a private `use` a child reaches through
//! `super::`), down to the file of the module that holds the name: so a
//! name re-exported by `lib.rs` counts as its own module's.

use std::collections::{BTreeMap, BTreeSet};

use crate::lexer::{Kind, Token};

/// A module's path from its crate root: `[]` for `lib.rs`, `["redis",
/// "link"]` for `redis/link.rs`.
pub type ModPath = Vec<String>;

/// One path of a file that reaches into the crate, made absolute (from the
/// crate root), with its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    pub path: ModPath,
    pub line: usize,
}

/// What a file's tokens say about its imports.
#[derive(Debug, Default)]
pub struct FileImports {
    /// Each name a top-level `use` brings into the module, with the
    /// absolute path it stands for.
    pub names: BTreeMap<String, ModPath>,
    /// Every path into the crate, in order.
    pub imports: Vec<Import>,
}

/// The module of a file inside `src`: `lib.rs` and `main.rs` are the root,
/// `a.rs` and `a/mod.rs` are `a`, `a/b.rs` is `a::b`.
pub fn module_of(inside: &str) -> ModPath {
    let stem = inside.strip_suffix(".rs").unwrap_or(inside);
    let mut path: ModPath = stem.split('/').map(str::to_owned).collect();
    if matches!(
        path.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        path.pop();
    }
    path
}

/// The imports of the file of `module`, whose own child modules are
/// `children`.
pub fn scan(tokens: &[Token], module: &[String], children: &BTreeSet<String>) -> FileImports {
    let mut out = FileImports::default();
    let mut braces = 0usize;
    // The brace depths inside the inline `mod`s open here.
    let mut inline_mods: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let token = &tokens[i];
        let after_path = i > 0 && tokens[i - 1].is_punct("::");
        if token.is_punct("{") {
            braces += 1;
            if i >= 2 && tokens[i - 2].is_ident("mod") && tokens[i - 1].kind == Kind::Ident {
                inline_mods.push(braces);
            }
        } else if token.is_punct("}") {
            if inline_mods.last() == Some(&braces) {
                inline_mods.pop();
            }
            braces = braces.saturating_sub(1);
        } else if token.is_ident("use") && !after_path {
            let mut trees = Vec::new();
            let end = use_tree(tokens, i + 1, Vec::new(), &mut trees);
            let inline = inline_mods.len();
            for tree in trees {
                let Some(path) = absolute(&tree.path, module, inline, children) else {
                    continue;
                };
                if let (Some(name), 0) = (&tree.name, inline) {
                    out.names.insert(name.clone(), path.clone());
                }
                out.imports.push(Import {
                    path,
                    line: tree.line,
                });
            }
            i = end.max(i + 1);
            continue;
        } else if !after_path
            && ["crate", "super", "self"].iter().any(|r| token.is_ident(r))
            && tokens.get(i + 1).is_some_and(|t| t.is_punct("::"))
        {
            let raw = segments(tokens, i);
            if let Some(path) = absolute(&raw, module, inline_mods.len(), children) {
                out.imports.push(Import {
                    path,
                    line: token.line,
                });
            }
            i += 2 * raw.len() - 1;
            continue;
        }
        i += 1;
    }
    out
}

/// One path of a `use` tree, as written.
#[derive(Debug)]
struct UseTree {
    path: Vec<String>,
    /// The name it brings in (its alias, or its last segment); `None` for
    /// a glob or `as _`.
    name: Option<String>,
    line: usize,
}

/// Reads the `use` tree at `at` under `prefix` into `out`; where it ends.
fn use_tree(tokens: &[Token], mut at: usize, prefix: Vec<String>, out: &mut Vec<UseTree>) -> usize {
    let mut path = prefix;
    let line = tokens.get(at).map_or(0, |t| t.line);
    if tokens.get(at).is_some_and(|t| t.is_punct("::")) {
        at += 1;
    }
    while let Some(token) = tokens.get(at) {
        if token.is_punct("*") {
            out.push(UseTree {
                path,
                name: None,
                line,
            });
            return at + 1;
        }
        if token.is_punct("{") {
            at += 1;
            while let Some(t) = tokens.get(at) {
                if t.is_punct("}") {
                    return at + 1;
                }
                if t.is_punct(",") {
                    at += 1;
                    continue;
                }
                let end = use_tree(tokens, at, path.clone(), out);
                if end == at {
                    return at;
                }
                at = end;
            }
            return at;
        }
        if token.kind != Kind::Ident {
            return at;
        }
        path.push(token.text.clone());
        at += 1;
        if tokens.get(at).is_some_and(|t| t.is_punct("::")) {
            at += 1;
            continue;
        }
        if path.len() > 1 && path.last().is_some_and(|s| s == "self") {
            path.pop();
        }
        let mut name = path.last().cloned();
        if tokens.get(at).is_some_and(|t| t.is_ident("as")) {
            name = tokens
                .get(at + 1)
                .filter(|t| t.kind == Kind::Ident)
                .map(|t| t.text.clone());
            at += 2;
        }
        out.push(UseTree { path, name, line });
        return at;
    }
    at
}

/// The segments of the path starting at `at`: `a::b::C` up to the first
/// token that is not `:: ident`.
fn segments(tokens: &[Token], at: usize) -> Vec<String> {
    let mut out = vec![tokens[at].text.clone()];
    let mut k = at + 1;
    while tokens.get(k).is_some_and(|t| t.is_punct("::"))
        && let Some(next) = tokens.get(k + 1).filter(|t| t.kind == Kind::Ident)
    {
        out.push(next.text.clone());
        k += 2;
    }
    out
}

/// `raw`, written in `module` inside `inline` inline `mod`s, from the crate
/// root; `None` when it leaves the crate or stays in the file.
fn absolute(
    raw: &[String],
    module: &[String],
    inline: usize,
    children: &BTreeSet<String>,
) -> Option<ModPath> {
    let first = raw.first()?;
    match first.as_str() {
        "crate" => Some(raw[1..].to_vec()),
        "super" => {
            let climbs = raw.iter().take_while(|s| *s == "super").count();
            let up = climbs.checked_sub(inline).filter(|&up| up > 0)?;
            let base = module.len().checked_sub(up)?;
            let mut path = module[..base].to_vec();
            path.extend_from_slice(&raw[climbs..]);
            Some(path)
        }
        "self" if inline == 0 => {
            let mut path = module.to_vec();
            path.extend_from_slice(&raw[1..]);
            Some(path)
        }
        name if inline == 0 && children.contains(name) => {
            let mut path = module.to_vec();
            path.extend_from_slice(raw);
            Some(path)
        }
        _ => None,
    }
}

/// A crate's files by module, with what each imports.
pub struct Crate {
    pub files: BTreeMap<ModPath, FileImports>,
}

/// How many `use`s a path may pass through before it is taken to end
/// where it is (a re-export of a re-export of …).
const MAX_HOPS: usize = 16;

impl Crate {
    /// The module that holds what `path` names: the deepest module it
    /// passes, or where a `use` of that module sends it.
    pub fn resolve(&self, path: &[String]) -> ModPath {
        self.resolve_within(path, MAX_HOPS)
    }

    fn resolve_within(&self, path: &[String], hops: usize) -> ModPath {
        let mut module: ModPath = Vec::new();
        for (i, segment) in path.iter().enumerate() {
            let mut child = module.clone();
            child.push(segment.clone());
            if self.files.contains_key(&child) {
                module = child;
                continue;
            }
            let target = self.files.get(&module).and_then(|f| f.names.get(segment));
            if let (Some(target), true) = (target, hops > 0) {
                let mut next = target.clone();
                next.extend_from_slice(&path[i + 1..]);
                if next.as_slice() != path {
                    return self.resolve_within(&next, hops - 1);
                }
            }
            break;
        }
        module
    }
}

#[cfg(test)]
mod tests;
