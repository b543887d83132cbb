//! Which of a crate's top-level modules each file names, and the cycles
//! those names make. A file names module `m` with `crate::m` (in a `use` or
//! a path expression), with each item of a `crate::{m, n::X}` group, or
//! with `super::m` when its `super`s climb to the crate root.

use std::collections::{BTreeMap, BTreeSet};

use crate::lexer::{Kind, Token};

/// The most cycles listed; past it the graph is a tangle, and its strongly
/// connected components say more than its cycles.
pub const MAX_CYCLES: usize = 64;

/// Every name a file's paths take from the crate root, with its line.
/// `depth` is how deep the file's module is: 1 for `src/a.rs` and
/// `src/a/mod.rs`, 2 for `src/a/b.rs`; each inline `mod` adds one.
pub fn root_names(tokens: &[Token], depth: usize) -> Vec<(String, usize)> {
    let mut names = Vec::new();
    let mut braces = 0usize;
    // The brace depths inside the inline `mod`s open here.
    let mut inline_mods: Vec<usize> = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let at = |k: usize| tokens.get(k);
        if token.is_punct("{") {
            braces += 1;
            let is_mod =
                i >= 2 && tokens[i - 2].is_ident("mod") && tokens[i - 1].kind == Kind::Ident;
            if is_mod {
                inline_mods.push(braces);
            }
        } else if token.is_punct("}") {
            if inline_mods.last() == Some(&braces) {
                inline_mods.pop();
            }
            braces = braces.saturating_sub(1);
        }
        // Only a path's first segment: `a::crate` or `a::super` are not.
        if i > 0 && tokens[i - 1].is_punct("::") {
            continue;
        }
        let after_root = if token.is_ident("crate") && at(i + 1).is_some_and(|t| t.is_punct("::")) {
            Some(i + 2)
        } else if token.is_ident("super") {
            let mut k = i;
            let mut climbs = 0;
            while at(k).is_some_and(|t| t.is_ident("super"))
                && at(k + 1).is_some_and(|t| t.is_punct("::"))
            {
                climbs += 1;
                k += 2;
            }
            (climbs > 0 && climbs == depth + inline_mods.len()).then_some(k)
        } else {
            None
        };
        if let Some(k) = after_root {
            names.extend(first_segments(tokens, k));
        }
    }
    names
}

/// The first segment of the path at `at`, or of each item of the group
/// `{…}` there.
fn first_segments(tokens: &[Token], at: usize) -> Vec<(String, usize)> {
    let Some(first) = tokens.get(at) else {
        return Vec::new();
    };
    if first.kind == Kind::Ident {
        return vec![(first.text.clone(), first.line)];
    }
    if !first.is_punct("{") {
        return Vec::new();
    }
    let mut names = Vec::new();
    let mut depth = 0usize;
    let mut item_start = true;
    for token in &tokens[at..] {
        if token.is_punct("{") {
            depth += 1;
            item_start = depth == 1;
            continue;
        }
        if token.is_punct("}") {
            depth -= 1;
            if depth == 0 {
                break;
            }
        } else if depth == 1 && token.is_punct(",") {
            item_start = true;
            continue;
        } else if item_start && token.kind == Kind::Ident && token.text != "self" {
            names.push((token.text.clone(), token.line));
        }
        item_start = false;
    }
    names
}

/// Where an edge was seen first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub file: String,
    pub line: usize,
}

/// `from → to → where`, in name order.
pub type Graph = BTreeMap<String, BTreeMap<String, Seen>>;

/// The graph's strongly connected components of more than one module, each
/// sorted, in name order (Tarjan's algorithm).
pub fn tangles(graph: &Graph) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flat_map(|e| e.keys()) {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut tarjan = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !tarjan.index.contains_key(v.as_str()) {
            tarjan.visit(v);
        }
    }
    tarjan.found.sort();
    tarjan.found
}

/// Every elementary cycle inside `component`, each starting at its
/// smallest module, sorted; at most [`MAX_CYCLES`].
pub fn cycles(graph: &Graph, component: &[String]) -> Vec<Vec<String>> {
    fn walk(
        graph: &Graph,
        inside: &BTreeSet<&str>,
        path: &mut Vec<String>,
        found: &mut Vec<Vec<String>>,
    ) {
        let start = path[0].clone();
        let last = path[path.len() - 1].clone();
        for next in graph.get(&last).into_iter().flat_map(|e| e.keys()) {
            if found.len() >= MAX_CYCLES {
                return;
            }
            if *next == start {
                found.push(path.clone());
            } else if *next > start && inside.contains(next.as_str()) && !path.contains(next) {
                path.push(next.clone());
                walk(graph, inside, path, found);
                path.pop();
            }
        }
    }
    let inside: BTreeSet<&str> = component.iter().map(String::as_str).collect();
    let mut found = Vec::new();
    for start in component {
        walk(graph, &inside, &mut vec![start.clone()], &mut found);
    }
    found.sort();
    found
}

/// `a -> b -> a`.
pub fn cycle_text(cycle: &[String]) -> String {
    let mut text = cycle.join(" -> ");
    text.push_str(" -> ");
    text.push_str(&cycle[0]);
    text
}

#[cfg(test)]
mod tests;
