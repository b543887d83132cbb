//! Hot identities: per policy, the identities behind the most decisions and
//! the most rejections in the last whole window, for `GET /v1/hot` and
//! `/metrics`. Found by traffic, not by rejection alone: a hot key that stays
//! under its limit still shows.
//!
//! Bounded whatever the traffic: each policy keeps [`STRIPES`] Space-Saving
//! summaries of [`PER_STRIPE`] candidates each for decisions and for
//! rejections (an identity always lands in the same stripe, by hash), so
//! any identity behind more than 1/[`PER_STRIPE`] of its stripe's traffic is
//! among them and counts are never under-counted; policies not seen for two
//! windows are dropped. The hot path takes one stripe's lock (stripes keep
//! workers apart) and scans its few entries: a few tens of nanoseconds
//! (`cargo bench -p tollgate --bench hot`).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use tollgate_core::Identity;

/// Candidates reported per policy, on `/metrics` and `GET /v1/hot`.
pub const HOT_IDENTITIES: usize = 10;
/// The window counts are reported over.
pub const HOT_WINDOW_MS: u64 = 60_000;
/// Stripes per policy: decisions on different workers rarely meet.
pub const STRIPES: usize = 8;
/// Candidates per stripe and per count (decisions, rejections).
pub const PER_STRIPE: usize = 4;

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

    fn counts(&self) -> Counts {
        self.entries.clone()
    }
}

/// (identity, count) pairs. The identity itself, not a label of it: a
/// reader names it (`Identity::label`, a keyed hash of its encoding), and
/// two identities are never one series.
type Counts = Vec<(Identity, u64)>;

/// One stripe's window being counted and the last whole one.
#[derive(Debug)]
struct Stripe {
    /// Start of the window being counted.
    started_ms: u64,
    decisions: Summary,
    rejections: Summary,
    /// The last whole window: (decisions, rejections) by identity.
    reported: (Counts, Counts),
}

impl Stripe {
    fn new(now_ms: u64) -> Self {
        Self {
            started_ms: now_ms - now_ms % HOT_WINDOW_MS,
            decisions: Summary::default(),
            rejections: Summary::default(),
            reported: (Vec::new(), Vec::new()),
        }
    }

    /// Moves to the window holding `now_ms`; the one it leaves is reported
    /// if it was the one just before.
    /// A clock set back (tests) starts over at its window.
    fn roll(&mut self, now_ms: u64) {
        if (self.started_ms..self.started_ms + HOT_WINDOW_MS).contains(&now_ms) {
            return;
        }
        let next = now_ms - now_ms % HOT_WINDOW_MS;
        let decisions = std::mem::take(&mut self.decisions);
        let rejections = std::mem::take(&mut self.rejections);
        self.reported = if next == self.started_ms + HOT_WINDOW_MS {
            (decisions.counts(), rejections.counts())
        } else {
            (Vec::new(), Vec::new())
        };
        self.started_ms = next;
    }

    fn idle(&self) -> bool {
        self.reported.0.is_empty() && self.decisions.entries.is_empty()
    }
}

/// One policy's summaries.
#[derive(Debug)]
pub struct PolicyHot {
    stripes: Vec<Mutex<Stripe>>,
    hasher: foldhash::fast::FixedState,
}

impl PolicyHot {
    fn new(now_ms: u64) -> Self {
        Self {
            stripes: (0..STRIPES)
                .map(|_| Mutex::new(Stripe::new(now_ms)))
                .collect(),
            hasher: foldhash::fast::FixedState::default(),
        }
    }

    /// Counts one decision about `identity` at `now_ms`, and one rejection
    /// when it was not `allowed`.
    pub fn record(&self, identity: &Identity, allowed: bool, now_ms: u64) {
        let stripe = self.hasher.hash_one(identity) as usize % STRIPES;
        let Ok(mut stripe) = self.stripes[stripe].lock() else {
            return;
        };
        stripe.roll(now_ms);
        stripe.decisions.record(identity, PER_STRIPE);
        if !allowed {
            stripe.rejections.record(identity, PER_STRIPE);
        }
    }

    /// The last whole window's top identities by decisions and by
    /// rejections (highest first, ties by label), and the window so far.
    fn report(&self, now_ms: u64) -> HotReport {
        let (mut decisions, mut rejections) = (Vec::new(), Vec::new());
        let (mut current_decisions, mut current_rejections) = (Vec::new(), Vec::new());
        for stripe in &self.stripes {
            if let Ok(mut stripe) = stripe.lock() {
                stripe.roll(now_ms);
                decisions.extend(stripe.reported.0.iter().cloned());
                rejections.extend(stripe.reported.1.iter().cloned());
                current_decisions.extend(stripe.decisions.counts());
                current_rejections.extend(stripe.rejections.counts());
            }
        }
        HotReport {
            decisions: top(decisions),
            rejections: top(rejections),
            current_decisions: top(current_decisions),
            current_rejections: top(current_rejections),
        }
    }

    fn idle(&self, now_ms: u64) -> bool {
        self.stripes.iter().all(|s| {
            s.lock().map_or(true, |mut s| {
                s.roll(now_ms);
                s.idle()
            })
        })
    }
}

fn top(mut ranked: Counts) -> Counts {
    ranked.sort_by_cached_key(|(identity, n)| (std::cmp::Reverse(*n), identity.label()));
    ranked.truncate(HOT_IDENTITIES);
    ranked
}

/// One policy's hot identities in the last whole window.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HotReport {
    /// (identity, decisions), most first.
    pub decisions: Vec<(Identity, u64)>,
    /// (identity, rejections), most first.
    pub rejections: Vec<(Identity, u64)>,
    /// The same for the window being counted, so far.
    pub current_decisions: Vec<(Identity, u64)>,
    /// The same of rejections.
    pub current_rejections: Vec<(Identity, u64)>,
}

/// Every policy's summaries, in windows of [`HOT_WINDOW_MS`].
#[derive(Debug, Default)]
pub struct HotIdentities {
    policies: Mutex<HashMap<String, Arc<PolicyHot>>>,
}

impl HotIdentities {
    /// `policy`'s summaries (made on first use; a config load resolves it
    /// once per policy, so a decision never looks it up).
    pub fn policy(&self, policy: &str, now_ms: u64) -> Arc<PolicyHot> {
        let Ok(mut policies) = self.policies.lock() else {
            return Arc::new(PolicyHot::new(now_ms));
        };
        Arc::clone(
            policies
                .entry(policy.to_owned())
                .or_insert_with(|| Arc::new(PolicyHot::new(now_ms))),
        )
    }

    /// Counts one decision by `policy` (for tests and callers without a
    /// resolved [`PolicyHot`]).
    pub fn record(&self, policy: &str, identity: &Identity, allowed: bool, now_ms: u64) {
        self.policy(policy, now_ms)
            .record(identity, allowed, now_ms);
    }

    /// The last whole window's hot identities at `now_ms`, by policy name.
    /// Policies idle for two windows and no longer configured are dropped
    /// (a configured one is made again on the next load's lookup).
    pub fn report(&self, now_ms: u64) -> Vec<(String, HotReport)> {
        let Ok(mut policies) = self.policies.lock() else {
            return Vec::new();
        };
        policies.retain(|_, hot| Arc::strong_count(hot) > 1 || !hot.idle(now_ms));
        let mut names: Vec<&String> = policies.keys().collect();
        names.sort();
        names
            .into_iter()
            .map(|name| (name.clone(), policies[name].report(now_ms)))
            .filter(|(_, r)| !r.decisions.is_empty() || !r.current_decisions.is_empty())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(v: &str) -> Identity {
        Identity::value(v)
    }

    fn names(list: &[(Identity, u64)]) -> Vec<(String, u64)> {
        list.iter().map(|(i, n)| (i.label(), *n)).collect()
    }

    fn named(list: &[(&str, u64)]) -> Vec<(String, u64)> {
        list.iter().map(|(i, n)| ((*i).to_owned(), *n)).collect()
    }

    #[test]
    fn a_window_is_reported_once_it_is_whole_and_forgotten_after_a_quiet_one() {
        let hot = HotIdentities::default();
        for _ in 0..3 {
            hot.record("login", &id("mallory"), false, 60_500);
        }
        hot.record("login", &id("mallory"), true, 60_600);
        hot.record("login", &id("alice"), true, 61_000);
        hot.record("login", &id("alice"), false, 61_000);
        let so_far = hot.report(119_999);
        assert!(
            so_far[0].1.decisions.is_empty(),
            "the window is not whole yet"
        );
        assert_eq!(
            names(&so_far[0].1.current_decisions),
            named(&[("mallory", 4), ("alice", 2)]),
            "but it is counted so far"
        );
        let report = hot.report(120_000);
        assert_eq!(report.len(), 1);
        assert_eq!(report[0].0, "login");
        assert_eq!(
            names(&report[0].1.decisions),
            named(&[("mallory", 4), ("alice", 2)])
        );
        assert_eq!(
            names(&report[0].1.rejections),
            named(&[("mallory", 3), ("alice", 1)])
        );
        assert_eq!(hot.report(179_999), report);
        assert_eq!(
            hot.report(180_000),
            vec![],
            "a quiet window reports nothing"
        );
    }

    #[test]
    fn a_hot_key_under_its_limit_shows_by_decisions() {
        let hot = HotIdentities::default();
        for i in 0..200 {
            hot.record("api", &id(&format!("scan-{i}")), true, 0);
            hot.record("api", &id("busy-tenant"), true, 0);
        }
        let report = hot.report(HOT_WINDOW_MS);
        let decisions = &report[0].1.decisions;
        assert_eq!(decisions.len(), HOT_IDENTITIES);
        assert_eq!(decisions[0].0, id("busy-tenant"));
        assert!(decisions[0].1 >= 200, "never under-counted: {decisions:?}");
        assert!(report[0].1.rejections.is_empty());
    }

    #[test]
    fn memory_is_bounded_whatever_the_traffic() {
        let hot = HotIdentities::default();
        let policy = hot.policy("api", 0);
        for i in 0..10_000 {
            policy.record(&id(&format!("k{i}")), i % 2 == 0, 0);
        }
        for stripe in &policy.stripes {
            let stripe = stripe.lock().expect("stripe");
            assert!(stripe.decisions.entries.len() <= PER_STRIPE);
            assert!(stripe.rejections.entries.len() <= PER_STRIPE);
        }
    }

    #[test]
    fn identities_sharing_a_long_prefix_are_counted_apart() {
        let hot = HotIdentities::default();
        let long = "é".repeat(100);
        hot.record("api", &id(&format!("{long}a")), true, 0);
        hot.record("api", &id(&format!("{long}b")), true, 0);
        let report = hot.report(HOT_WINDOW_MS);
        let mut decided = report[0].1.decisions.clone();
        decided.sort();
        assert_eq!(
            decided,
            [(id(&format!("{long}a")), 1), (id(&format!("{long}b")), 1)]
        );
    }
}
