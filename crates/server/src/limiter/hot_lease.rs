//! Local leases for hot keys (docs/config.md, `hot_lease`): an identity
//! deciding above a policy's threshold on this instance takes a block of
//! its budget from the store in one decision (cost = the block) and admits
//! from it locally until the block or its term runs out.
//!
//! Why the limit still holds exactly: a block's units are consumed from the
//! shared state *before* any of them is spent, so whatever the instances do
//! with their blocks, the store never admitted more than the limit. What a
//! block costs instead is the other direction: units left in a block when
//! its term ends are not given back (the key's state moved on; a return
//! could land in another window or past a full bucket), so they are lost —
//! at most one block per instance per term — and a request can be rejected
//! while other instances hold unspent units. Both are stated by `explain`.
//!
//! Pure: time comes in as arguments; the map is bounded.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus_client::metrics::counter::Counter;
use tollgate_core::{Decision, Identity};

use crate::config::HotLeaseRule;

/// Identities a policy may hold blocks for on one instance; past it, no
/// new block is taken (decisions go to the store as usual).
pub const MAX_BLOCKS: usize = 1024;

/// One identity's decisions in whole seconds.
#[derive(Debug, Clone, Copy)]
struct Rate {
    second_ms: u64,
    count: u64,
    before: u64,
}

/// What is left of one identity's block; `taking` while one request of
/// this instance takes it (the others decide on the store meanwhile, so a
/// burst takes one block, not one each).
#[derive(Debug, Clone)]
struct Block {
    taking: bool,
    left: u64,
    taken_at_ms: u64,
    until_ms: u64,
    /// The store's decision when the block was taken: its reset carries
    /// over, its `remaining` counts down with the block.
    taken: Decision,
}

/// One policy's blocks on this instance.
#[derive(Debug)]
pub struct HotLeases {
    pub rule: HotLeaseRule,
    blocks: Mutex<HashMap<Identity, Block, foldhash::fast::RandomState>>,
    /// Each identity's decisions per second here: the second being counted
    /// (its start, its count) and the whole one before.
    rates: Mutex<HashMap<Identity, Rate, foldhash::fast::RandomState>>,
    /// Units dropped unspent with their block (`tollgate_hot_lease_lost_units`).
    lost: Counter,
}

impl HotLeases {
    pub fn new(rule: HotLeaseRule, lost: Counter) -> Self {
        Self {
            rule,
            blocks: Mutex::new(HashMap::default()),
            rates: Mutex::new(HashMap::default()),
            lost,
        }
    }

    /// Admits `cost` from `identity`'s live block, if it holds that much:
    /// the decision says what is left of the block (a lower bound of what
    /// the store has: conservative). `None`: decide on the store.
    pub fn spend(&self, identity: &Identity, cost: u64, now_ms: u64) -> Option<Decision> {
        let mut blocks = self.blocks.lock().ok()?;
        let block = blocks.get_mut(identity)?;
        if block.taking {
            return None;
        }
        if now_ms >= block.until_ms || block.left < cost {
            // Run out: what is left is lost (see the module's note).
            self.lost.inc_by(block.left);
            blocks.remove(identity);
            return None;
        }
        block.left -= cost;
        let elapsed = now_ms.saturating_sub(block.taken_at_ms);
        Some(Decision {
            allowed: true,
            remaining: block.taken.remaining.saturating_add(signed(block.left)),
            retry_after_ms: Some(0),
            reset_after_ms: block.taken.reset_after_ms.saturating_sub(elapsed),
            ..block.taken
        })
    }

    /// Whether the caller should take a block for `identity` now: no other
    /// request of this instance is taking one (marked until [`keep`] or
    /// [`abandon`]). Bounded like the blocks.
    ///
    /// [`keep`]: HotLeases::keep
    /// [`abandon`]: HotLeases::abandon
    pub fn begin_taking(&self, identity: &Identity, now_ms: u64) -> bool {
        let Ok(mut blocks) = self.blocks.lock() else {
            return false;
        };
        if let Some(block) = blocks.get(identity) {
            // A stuck marker (its taker's call never came back) lapses
            // after a term.
            if block.taking && now_ms < block.until_ms {
                return false;
            }
            self.lost.inc_by(block.left);
        } else if blocks.len() >= MAX_BLOCKS {
            return false;
        }
        blocks.insert(
            identity.clone(),
            Block {
                taking: true,
                left: 0,
                taken_at_ms: now_ms,
                until_ms: now_ms.saturating_add(self.rule.term_ms),
                taken: Decision {
                    allowed: false,
                    limit: 0,
                    remaining: 0,
                    retry_after_ms: None,
                    reset_after_ms: 0,
                },
            },
        );
        true
    }

    /// The block could not be taken: let another request try.
    pub fn abandon(&self, identity: &Identity) {
        if let Ok(mut blocks) = self.blocks.lock()
            && blocks.get(identity).is_some_and(|b| b.taking)
        {
            blocks.remove(identity);
        }
    }

    /// Keeps a block of `block` units just taken at `now_ms` for a request
    /// of `cost`, whose decision the store gave as `taken`; returns the
    /// request's own decision.
    pub fn keep(
        &self,
        identity: &Identity,
        block: u64,
        cost: u64,
        taken: &Decision,
        now_ms: u64,
    ) -> Decision {
        let left = block.saturating_sub(cost);
        // Spent within its term; a window's block never past the window it
        // was taken from (its reset, for an admitted decision).
        let term_ms = if self.rule.windowed {
            self.rule.term_ms.min(taken.reset_after_ms)
        } else {
            self.rule.term_ms
        };
        let until_ms = now_ms.saturating_add(term_ms);
        if let Ok(mut blocks) = self.blocks.lock() {
            if blocks.len() >= MAX_BLOCKS {
                let lost = &self.lost;
                blocks.retain(|_, b| {
                    let live = now_ms < b.until_ms;
                    if !live {
                        lost.inc_by(b.left);
                    }
                    live
                });
            }
            let kept = blocks.len() < MAX_BLOCKS || blocks.contains_key(identity);
            let replaced = kept
                .then(|| {
                    blocks.insert(
                        identity.clone(),
                        Block {
                            taking: false,
                            left,
                            taken_at_ms: now_ms,
                            until_ms,
                            taken: *taken,
                        },
                    )
                })
                .flatten();
            let dropped = replaced.map_or(0, |b| b.left) + if kept { 0 } else { left };
            self.lost.inc_by(dropped);
        }
        Decision {
            remaining: taken.remaining.saturating_add(signed(left)),
            ..*taken
        }
    }

    /// Counts a decision about `identity` at `now_ms` and returns its rate
    /// a second here: the last whole second's count, or this second's so
    /// far when higher. Bounded: past [`MAX_BLOCKS`] × 4 identities, the
    /// idle ones are forgotten, and if none is, a new one is not tracked.
    pub fn observe(&self, identity: &Identity, now_ms: u64) -> u64 {
        let Ok(mut rates) = self.rates.lock() else {
            return 0;
        };
        let second_ms = now_ms - now_ms % 1_000;
        if !rates.contains_key(identity) && rates.len() >= MAX_BLOCKS * 4 {
            rates.retain(|_, r| r.second_ms + 1_000 >= second_ms);
            if rates.len() >= MAX_BLOCKS * 4 {
                return 0;
            }
        }
        let rate = rates.entry(identity.clone()).or_insert(Rate {
            second_ms,
            count: 0,
            before: 0,
        });
        if rate.second_ms != second_ms {
            rate.before = if rate.second_ms + 1_000 == second_ms {
                rate.count
            } else {
                0
            };
            rate.second_ms = second_ms;
            rate.count = 0;
        }
        rate.count += 1;
        rate.before.max(rate.count)
    }

    /// Blocks held now (for tests and the bound).
    pub fn held(&self) -> usize {
        self.blocks.lock().map_or(0, |b| b.len())
    }
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
