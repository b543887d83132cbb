//! The cycles of an import graph (modules or files, by name): its tangles
//! (strongly connected components) and the elementary cycles in each.

use std::collections::{BTreeMap, BTreeSet};

/// The most cycles listed; past it the graph is a tangle, and its strongly
/// connected components say more than its cycles.
pub const MAX_CYCLES: usize = 64;

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
