//! Hot identities: per policy, the identities rejected most in the last
//! whole window, for `/metrics`. Bounded twice over: each policy keeps at
//! most `HOT_IDENTITIES` candidates (the Space-Saving algorithm, so any
//! identity behind more than 1/`HOT_IDENTITIES` of a window's rejections is
//! among them), and policies not seen for two windows are dropped.
//!
//! Only rejections are recorded: they are what an operator looks for, and
//! the admitted path stays free of the lock.

use std::collections::HashMap;
use std::sync::Mutex;

use tollgate_core::Identity;

/// Candidates kept per policy.
pub const HOT_IDENTITIES: usize = 10;
/// The window counts are reported over.
pub const HOT_WINDOW_MS: u64 = 60_000;
/// Longest identity shown in a label; longer ones are cut and marked.
const MAX_LABEL_BYTES: usize = 128;

/// The Space-Saving summary of one window: at most `capacity` identities
/// with counts that never under-count (an identity that replaced another
/// inherits its count).
#[derive(Debug, Default)]
struct Summary {
    entries: Vec<(Identity, u64)>,
}

impl Summary {
    fn record(&mut self, identity: &Identity, capacity: usize) {
        if let Some(entry) = self.entries.iter_mut().find(|(i, _)| i == identity) {
            entry.1 += 1;
        } else if self.entries.len() < capacity {
            self.entries.push((identity.clone(), 1));
        } else if let Some(least) = self.entries.iter_mut().min_by_key(|(_, n)| *n) {
            *least = (identity.clone(), least.1 + 1);
        }
    }

    /// Highest count first; equal counts in identity order, so the output
    /// is deterministic.
    fn ranked(&self) -> Vec<(String, u64)> {
        let mut ranked: Vec<&(Identity, u64)> = self.entries.iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ranked
            .into_iter()
            .map(|(identity, n)| (label(identity), *n))
            .collect()
    }
}

fn label(identity: &Identity) -> String {
    let mut text = identity.to_string();
    if text.len() > MAX_LABEL_BYTES {
        let mut cut = MAX_LABEL_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

#[derive(Debug)]
struct PolicyWindows {
    /// Start of the window being counted.
    started_ms: u64,
    counting: Summary,
    /// The last whole window, as reported.
    reported: Vec<(String, u64)>,
}

impl PolicyWindows {
    fn new(now_ms: u64) -> Self {
        Self {
            started_ms: now_ms - now_ms % HOT_WINDOW_MS,
            counting: Summary::default(),
            reported: Vec::new(),
        }
    }

    /// Moves to the window holding `now_ms`; the one it leaves is reported
    /// if it was the one just before.
    fn roll(&mut self, now_ms: u64) {
        if now_ms < self.started_ms + HOT_WINDOW_MS {
            return;
        }
        let next = now_ms - now_ms % HOT_WINDOW_MS;
        let finished = std::mem::take(&mut self.counting);
        self.reported = if next == self.started_ms + HOT_WINDOW_MS {
            finished.ranked()
        } else {
            Vec::new()
        };
        self.started_ms = next;
    }
}

/// Rejections by policy and identity, in windows of [`HOT_WINDOW_MS`].
#[derive(Debug, Default)]
pub struct HotIdentities {
    policies: Mutex<HashMap<String, PolicyWindows>>,
}

impl HotIdentities {
    /// Counts one rejection of `identity` by `policy` at `now_ms`.
    pub fn record(&self, policy: &str, identity: &Identity, now_ms: u64) {
        let Ok(mut policies) = self.policies.lock() else {
            return;
        };
        if !policies.contains_key(policy) {
            policies.insert(policy.to_owned(), PolicyWindows::new(now_ms));
        }
        if let Some(windows) = policies.get_mut(policy) {
            windows.roll(now_ms);
            windows.counting.record(identity, HOT_IDENTITIES);
        }
    }

    /// The last whole window's hot identities at `now_ms`: (policy,
    /// identity, rejections), by policy name then rank.
    pub fn report(&self, now_ms: u64) -> Vec<(String, String, u64)> {
        let Ok(mut policies) = self.policies.lock() else {
            return Vec::new();
        };
        policies.retain(|_, windows| {
            windows.roll(now_ms);
            !windows.reported.is_empty() || !windows.counting.entries.is_empty()
        });
        let mut names: Vec<&String> = policies.keys().collect();
        names.sort();
        names
            .into_iter()
            .flat_map(|name| {
                policies[name]
                    .reported
                    .iter()
                    .map(move |(identity, n)| (name.clone(), identity.clone(), *n))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(v: &str) -> Identity {
        Identity::value(v)
    }

    #[test]
    fn a_window_is_reported_once_it_is_whole_and_forgotten_after_a_quiet_one() {
        let hot = HotIdentities::default();
        for _ in 0..3 {
            hot.record("login", &id("mallory"), 60_500);
        }
        hot.record("login", &id("alice"), 61_000);
        assert_eq!(hot.report(119_999), vec![], "the window is not whole yet");
        let expected = vec![
            ("login".to_owned(), "mallory".to_owned(), 3),
            ("login".to_owned(), "alice".to_owned(), 1),
        ];
        assert_eq!(hot.report(120_000), expected);
        assert_eq!(hot.report(179_999), expected);
        assert_eq!(
            hot.report(180_000),
            vec![],
            "a quiet window reports nothing"
        );
    }

    #[test]
    fn an_identity_behind_most_rejections_is_kept_past_the_bound() {
        let hot = HotIdentities::default();
        for i in 0..100 {
            hot.record("api", &id(&format!("scan-{i}")), 0);
            hot.record("api", &id("flood"), 0);
        }
        let report = hot.report(HOT_WINDOW_MS);
        assert_eq!(report.len(), HOT_IDENTITIES);
        assert_eq!(report[0].1, "flood");
        assert!(report[0].2 >= 100, "never under-counted: {report:?}");
    }

    #[test]
    fn long_identities_are_cut_in_their_labels() {
        let hot = HotIdentities::default();
        hot.record("api", &id(&"é".repeat(100)), 0);
        let report = hot.report(HOT_WINDOW_MS);
        assert_eq!(report[0].1, format!("{}…", "é".repeat(64)));
    }
}
