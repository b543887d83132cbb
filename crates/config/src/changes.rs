//! What a reload changes of the policies, by name, for its log line: an
//! operator who edits a file should read what took effect, not a hash.

use crate::document::Config;

/// The policies a new config adds, removes and changes against the one
/// running, each list in the new (or, for removed ones, the old) file's
/// order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PolicyChanges {
    /// In the new config only.
    pub added: Vec<String>,
    /// In the running config only.
    pub removed: Vec<String>,
    /// In both, written differently (any field of the entry).
    pub changed: Vec<String>,
}

impl PolicyChanges {
    /// `next` against `running`. A policy is changed when its entry is
    /// written differently; `server.shadow_mode` and the other sections
    /// are not policies, so a change there changes none.
    pub fn between(running: &Config, next: &Config) -> Self {
        let entries = |config: &Config| -> Vec<(String, String)> {
            config
                .policies
                .iter()
                .map(|p| p.policy.name().to_owned())
                .zip(config.policy_digests.iter().cloned())
                .collect()
        };
        let (was, now) = (entries(running), entries(next));
        let find = |list: &[(String, String)], name: &str| {
            list.iter().find(|(n, _)| n == name).map(|(_, d)| d.clone())
        };
        let mut changes = Self::default();
        for (name, digest) in &now {
            match find(&was, name) {
                None => changes.added.push(name.clone()),
                Some(before) if &before != digest => changes.changed.push(name.clone()),
                Some(_) => {}
            }
        }
        changes.removed = was
            .iter()
            .filter(|(name, _)| find(&now, name).is_none())
            .map(|(name, _)| name.clone())
            .collect();
        changes
    }

    /// Whether no policy was added, removed or changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// `policies added: a, b; removed: c; changed: d` (the lists that are not
/// empty), or `no policy changed`.
impl std::fmt::Display for PolicyChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_empty() {
            return f.write_str("no policy changed");
        }
        f.write_str("policies ")?;
        let lists = [
            ("added", &self.added),
            ("removed", &self.removed),
            ("changed", &self.changed),
        ];
        let mut first = true;
        for (what, names) in lists.into_iter().filter(|(_, n)| !n.is_empty()) {
            if !first {
                f.write_str("; ")?;
            }
            first = false;
            write!(f, "{what}: {}", names.join(", "))?;
        }
        Ok(())
    }
}
