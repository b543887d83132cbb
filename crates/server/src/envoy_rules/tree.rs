//! The descriptor tree and its matching, as envoyproxy/ratelimit matches:
//! per level, an exact `key`+`value` first, then the level's wildcard values
//! in file order, then the bare `key`; a limit applies only when it sits at
//! the request descriptor's last entry. Built once per load, then only read.

use std::collections::HashMap;
use std::path::PathBuf;

use super::Rule;

/// Nesting deeper than this is refused (Envoy sends a few entries at most).
pub const MAX_DEPTH: usize = 32;

#[derive(Debug, Default)]
pub(super) struct Node {
    /// Children by key, then how their value matches.
    pub(super) children: HashMap<String, KeyChildren>,
    pub(super) rule: Option<usize>,
    /// For a wildcard node with `share_threshold: true`: every matching value
    /// shares one bucket, keyed by this pattern.
    pub(super) shared_pattern: Option<String>,
}

#[derive(Debug, Default)]
pub(super) struct KeyChildren {
    pub(super) exact: HashMap<String, usize>,
    /// Values containing `*`, in file order, split on `*`.
    pub(super) wildcards: Vec<(Vec<String>, usize)>,
    pub(super) any: Option<usize>,
}

/// Every loaded domain's descriptor tree. Immutable; replaced on reload.
#[derive(Debug, Default)]
pub struct EnvoyRules {
    pub(super) nodes: Vec<Node>,
    pub(super) domains: HashMap<String, usize>,
    /// Every rule, indexed by [`Matched::rule`].
    pub rules: Vec<Rule>,
    /// The files read, in order (directories expanded).
    pub files: Vec<PathBuf>,
    /// A hash of every file's content, to tell when a reload changes them.
    pub content_hash: String,
}

/// A descriptor's match: the rule, and the values its identity is made of
/// (a `share_threshold` wildcard's pattern in place of the request's value).
#[derive(Debug)]
pub struct Matched<'a> {
    /// The matched rule's index in [`EnvoyRules::rules`].
    pub rule: usize,
    /// Each entry's `share_threshold` pattern, by position; empty when no
    /// entry has one (the common case, which allocates nothing).
    pub shared: Vec<Option<&'a str>>,
}

impl EnvoyRules {
    /// Whether no domain was loaded.
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// Whether a file defines `domain`.
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// Every loaded domain, in no particular order.
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(String::as_str)
    }

    /// The rule for one descriptor's entries, most specific first, as
    /// envoyproxy/ratelimit matches it.
    pub fn find<'a, 'e>(
        &'a self,
        domain: &str,
        entries: impl ExactSizeIterator<Item = (&'e str, &'e str)>,
    ) -> Option<Matched<'a>> {
        let mut node = *self.domains.get(domain)?;
        let mut shared = Vec::new();
        let depth = entries.len();
        for (i, (key, value)) in entries.enumerate() {
            let children = self.nodes[node].children.get(key)?;
            let next = children
                .exact
                .get(value)
                .copied()
                .or_else(|| {
                    children
                        .wildcards
                        .iter()
                        .find(|(parts, _)| wildcard_match(parts, value))
                        .map(|(_, n)| *n)
                })
                .or(children.any)?;
            if let Some(pattern) = self.nodes[next].shared_pattern.as_deref() {
                shared.resize(i, None);
                shared.push(Some(pattern));
            }
            if i + 1 == depth {
                return self.nodes[next].rule.map(|rule| Matched { rule, shared });
            }
            if self.nodes[next].children.is_empty() {
                return None;
            }
            node = next;
        }
        None
    }

    pub(super) fn new_node(&mut self) -> usize {
        self.nodes.push(Node::default());
        self.nodes.len() - 1
    }
}

/// `*` matches any run of characters (zero or more); the other parts must
/// appear in order, the first as a prefix and the last as a suffix.
fn wildcard_match(parts: &[String], value: &str) -> bool {
    let [first, middle @ .., last] = parts else {
        return parts.first().is_some_and(|p| p == value);
    };
    if value.len() < parts.iter().map(String::len).sum::<usize>() {
        return false;
    }
    let Some(rest) = value.strip_prefix(first.as_str()) else {
        return false;
    };
    let Some(mut rest) = rest.strip_suffix(last.as_str()) else {
        return false;
    };
    for part in middle {
        match rest.find(part.as_str()) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(p: &str) -> Vec<String> {
        p.split('*').map(str::to_owned).collect()
    }

    #[test]
    fn wildcards_match_as_envoyproxy_ratelimit_documents() {
        assert!(wildcard_match(&parts("value*"), "value1"));
        assert!(wildcard_match(&parts("value*"), "value"));
        assert!(!wildcard_match(&parts("value*"), "valu"));
        assert!(wildcard_match(&parts("/api/*/action"), "/api/123/action"));
        assert!(!wildcard_match(&parts("/api/*/action"), "/api/123/other"));
        assert!(wildcard_match(
            &parts("/api/*/resource/*/action"),
            "/api/v1/resource/123/action"
        ));
        assert!(!wildcard_match(&parts("ab*ba"), "aba"));
        assert!(wildcard_match(&parts("plain"), "plain"));
    }
}
