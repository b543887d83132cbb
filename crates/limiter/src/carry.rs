//! A reload that changes a policy's `shards` keeps what each identity spent
//! (docs/config.md, Shards: a change of `shards`). The new layout's keys
//! start afresh, so for the policy's rest (its time to forget a use) after
//! the change every check is also decided, in the same all-or-nothing store
//! call and at the same cost, on the layout it replaced: nothing is
//! admitted that the old layout would refuse, so an exhausted identity
//! stays exhausted. By the end of the rest the new keys of a window
//! algorithm have seen every admission it still counts, so dropping the old
//! layout is exact; a bucket's new keys started full, so they may hold up
//! to the limit less what the old bucket held at the reload more than it,
//! for an identity that spent through the whole rest (the stated bound).
//!
//! The rest is counted on the monotonic clock from the first decision
//! after the reload (a plan is built with no clock; starting later only
//! reads the old layout longer). A reload during the rest carries the old
//! layouts still read, too (one per shard count, so bounded).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tollgate_core::{Decision, Identity, Policy};
use tollgate_store::Decisions;

/// A shard layout a reload replaced, read until its states are forgotten.
#[derive(Debug)]
pub(crate) struct Carried {
    /// Its policies: one (unsharded, on the identity's own key) or one a
    /// shard (on the identity's shard keys).
    policies: Vec<Policy>,
    /// The policy's time to forget a use.
    rest_ms: u64,
    /// When it stops being read, on the monotonic clock (0: not started).
    until_ms: AtomicU64,
    /// Its own round robin over its shards.
    cursor: AtomicU64,
    /// A decision found its rest over: a later reload drops it.
    ended: AtomicBool,
}

impl Carried {
    /// A replaced layout: its `policies` (one: unsharded; else one a
    /// shard) and the policy's time to forget a use.
    pub(crate) fn new(policies: Vec<Policy>, rest_ms: u64) -> Self {
        Self {
            policies,
            rest_ms,
            until_ms: AtomicU64::new(0),
            cursor: AtomicU64::new(0),
            ended: AtomicBool::new(false),
        }
    }

    /// Its shard count (1: unsharded).
    pub(crate) fn count(&self) -> usize {
        self.policies.len()
    }

    /// Whether a decision found its rest over.
    pub(crate) fn ended(&self) -> bool {
        self.ended.load(Ordering::Relaxed)
    }

    /// Whether it is still read at `now_ms` (the first call starts its rest).
    pub(crate) fn live(&self, now_ms: u64) -> bool {
        let until = self.until_ms.load(Ordering::Relaxed);
        if until != 0 {
            let live = now_ms < until;
            if !live {
                self.ended.store(true, Ordering::Relaxed);
            }
            return live;
        }
        let start = now_ms.saturating_add(self.rest_ms).max(1);
        let _ = self
            .until_ms
            .compare_exchange(0, start, Ordering::Relaxed, Ordering::Relaxed);
        true
    }

    /// The key of this layout a check of `identity` spends on: its policy
    /// and identity. A new check takes the next turn of the layout's own
    /// round robin; a spill (`spill` > 0) tries the shard `spill` after
    /// the last turn.
    pub(crate) fn key(&self, identity: &Identity, spill: usize) -> Option<(&Policy, Identity)> {
        if let [one] = self.policies.as_slice() {
            return Some((one, identity.clone()));
        }
        let turn = if spill == 0 {
            self.cursor.fetch_add(1, Ordering::Relaxed)
        } else {
            self.cursor.load(Ordering::Relaxed).wrapping_sub(1)
        };
        let n = self.policies.len() as u64;
        let index = (turn.wrapping_add(spill as u64) % n) as usize;
        let shard = u16::try_from(index).ok()?;
        Some((self.policies.get(index)?, identity.shard(shard)))
    }
}

impl Carried {
    /// Every key of this layout for `identity` (an operator's reset
    /// forgets them all).
    pub(crate) fn every_key(&self, identity: &Identity) -> Vec<(&Policy, Identity)> {
        if let [one] = self.policies.as_slice() {
            return vec![(one, identity.clone())];
        }
        self.policies
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((p, identity.shard(u16::try_from(i).ok()?))))
            .collect()
    }
}

/// One old-layout key a request also spends on: the check it belongs to,
/// and the key's policy and identity.
pub(crate) struct CarriedKey<'p> {
    pub(crate) owner: usize,
    pub(crate) policy: &'p Policy,
    pub(crate) identity: Identity,
}

/// Folds the decisions of the carried keys (after the checks' own, in
/// `keys`' order) into their checks' decisions: admitted only if every
/// layout admitted, the least remaining, the longest waits; the limit is
/// the check's own.
pub(crate) fn fold(decisions: &mut Decisions, checks: usize, keys: &[CarriedKey<'_>]) {
    if decisions.len() != checks + keys.len() {
        decisions.truncate(checks);
        return;
    }
    let carried: Vec<Decision> = decisions.drain(checks..).collect();
    for (key, old) in keys.iter().zip(carried) {
        if let Some(own) = decisions.get_mut(key.owner) {
            *own = both(own, &old);
        }
    }
}

/// One check's verdict on two layouts.
fn both(own: &Decision, old: &Decision) -> Decision {
    let allowed = own.allowed && old.allowed;
    Decision {
        allowed,
        limit: own.limit,
        remaining: own.remaining.min(old.remaining),
        retry_after_ms: if allowed {
            Some(0)
        } else {
            // The same request is admitted once both would admit it.
            match (own.retry_after_ms, old.retry_after_ms) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            }
        },
        reset_after_ms: own.reset_after_ms.max(old.reset_after_ms),
        permit: None,
    }
}
