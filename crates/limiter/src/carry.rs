//! A reload that changes a policy's `shards` keeps what each identity spent
//! (docs/config.md, Shards: a change of `shards`). The new layout's keys
//! start afresh, so for the policy's rest (its time to forget a use) after
//! the change every check is also decided, in the same all-or-nothing store
//! call and at the same cost, on the layout it replaced: nothing is
//! admitted that the old layout would refuse, so an exhausted identity
//! stays exhausted, and by the end of the rest the new keys have seen every
//! admission the policy still remembers, so dropping the old layout then
//! hands nobody a burst.
//!
//! The rest is counted on the monotonic clock from the first decision
//! after the reload (a plan is built with no clock; starting later only
//! reads the old layout longer). A reload during the rest carries the old
//! layouts still read, too (one per shard count, so bounded).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tollgate_core::{Decision, Identity, Policy};

use crate::limiter::Decided;
use crate::plan::{Check, Plan};

/// A shard layout a reload replaced, read until its states are forgotten.
#[derive(Debug)]
pub struct Carried {
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
    /// `previous`'s own layout.
    fn of(previous: &Plan) -> Self {
        let policies = if previous.shards().is_empty() {
            vec![previous.policy().clone()]
        } else {
            previous.shards().to_vec()
        };
        Self {
            policies,
            rest_ms: previous.policy().limits().rest_ms(),
            until_ms: AtomicU64::new(0),
            cursor: AtomicU64::new(0),
            ended: AtomicBool::new(false),
        }
    }

    /// Its shard count (1: unsharded).
    fn count(&self) -> usize {
        self.policies.len()
    }

    /// Whether it is still read at `now_ms` (the first call starts its rest).
    fn live(&self, now_ms: u64) -> bool {
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

    /// The key of this layout a check of `identity` spends on, `spill`
    /// shards after its turn: its policy and identity.
    fn key(&self, identity: &Identity, turn: u64, spill: usize) -> Option<(&Policy, Identity)> {
        if let [one] = self.policies.as_slice() {
            return Some((one, identity.clone()));
        }
        let n = self.policies.len() as u64;
        let index = (turn.wrapping_add(spill as u64) % n) as usize;
        let shard = u16::try_from(index).ok()?;
        Some((self.policies.get(index)?, identity.shard(shard)))
    }
}

/// The layouts `plan` carries after replacing `previous`: `previous`'s own
/// when its shard count differs, and those `previous` still carried (but
/// those a decision found over), one per shard count, never `plan`'s own
/// (its keys are the new ones). None
/// when the store or the algorithm changed (the old states are not read
/// there: a store of its own, or states taken as absent).
pub(crate) fn carried_over(plan: &Plan, previous: &Plan) -> Vec<Arc<Carried>> {
    if previous.store() != plan.store()
        || previous.policy().algorithm() != plan.policy().algorithm()
    {
        return Vec::new();
    }
    let own = plan.shards().len().max(1);
    let mut carried: Vec<Arc<Carried>> = Vec::new();
    if previous.shards().len().max(1) != own {
        carried.push(Arc::new(Carried::of(previous)));
    }
    for old in previous.carried() {
        let ended = old.ended.load(Ordering::Relaxed);
        if !ended && old.count() != own && carried.iter().all(|c| c.count() != old.count()) {
            carried.push(Arc::clone(old));
        }
    }
    carried
}

/// One old-layout key a request also spends on: the check it belongs to,
/// and the key's policy and identity.
pub(crate) struct CarriedKey<'p> {
    pub(crate) owner: usize,
    pub(crate) policy: &'p Policy,
    pub(crate) identity: Identity,
}

/// The old-layout keys `checks` also spend on now (`spill` shards after
/// each layout's turn); empty when no plan carries a live layout.
pub(crate) fn keys<'p>(checks: &[Check<'p>], spill: usize, now_ms: u64) -> Vec<CarriedKey<'p>> {
    let mut keys = Vec::new();
    for (owner, check) in checks.iter().enumerate() {
        for layout in check.plan.carried() {
            if !layout.live(now_ms) {
                continue;
            }
            // A spill tries the next shard of the same turn.
            let turn = if spill == 0 {
                layout.cursor.fetch_add(1, Ordering::Relaxed)
            } else {
                layout.cursor.load(Ordering::Relaxed).wrapping_sub(1)
            };
            if let Some((policy, identity)) = layout.key(check.identity, turn, spill) {
                keys.push(CarriedKey {
                    owner,
                    policy,
                    identity,
                });
            }
        }
    }
    keys
}

/// Folds the decisions of the carried keys (after the checks' own, in
/// `keys`' order) into their checks' decisions: admitted only if every
/// layout admitted, the least remaining, the longest waits; the limit is
/// the check's own.
pub(crate) fn fold(decided: &mut Decided, checks: usize, keys: &[CarriedKey<'_>]) {
    if decided.decisions.len() != checks + keys.len() {
        decided.decisions.truncate(checks);
        return;
    }
    let carried = decided.decisions.split_off(checks);
    for (key, old) in keys.iter().zip(carried) {
        if let Some(own) = decided.decisions.get_mut(key.owner) {
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
    }
}
