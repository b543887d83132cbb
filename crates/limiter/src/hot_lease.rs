//! Local leases for hot keys (docs/config.md, `hot_lease`): an identity
//! deciding above a policy's threshold on this instance takes a block of
//! its budget from the store in one decision (cost = the block) and admits
//! from it locally until the block or its term runs out.
//!
//! Why the limit still holds exactly: a block's units are consumed from the
//! shared state *before* any of them is spent, so whatever the instances do
//! with their blocks, the store never admitted more than the limit. What a
//! block costs instead is the other direction: a request can be rejected
//! while other instances hold unspent units. Units left when a block ends
//! (its term, its window, or a cost it cannot cover) are set aside here and
//! given back to the key's state by the limiter's upkeep, exactly as far as
//! the state can take them (`Limits::give_back`: a window's count while it
//! counts, a bucket what could not have refilled since); the rest is lost
//! and counted. Both are stated by `explain`.
//!
//! Over the limit, a refused block is remembered until the store's own
//! wait for it has passed: asking again sooner cannot succeed (other
//! instances only consume meanwhile, or give back what they held), so the
//! identity is rejected here until then and the store is asked once per
//! wait, not once per decision. The price: a rejection while the store
//! holds less than that block, plus what was given back since.
//!
//! Pure: time comes in as arguments; the maps and the set-aside list are
//! bounded.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus_client::metrics::counter::Counter;
use tollgate_core::{Decision, Identity, Taken};

/// A policy's `hot_lease` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotLeaseRule {
    /// Decisions a second on this instance above which an identity is hot.
    pub above: u64,
    /// How long a block may be spent.
    pub term_ms: u64,
    /// The largest block: a share of the limit, so no instance takes the
    /// whole budget in one call.
    pub max_block: u64,
    /// A window algorithm: a block is never spent past the window it was
    /// taken from (a bucket's block only within its term).
    pub windowed: bool,
}

impl HotLeaseRule {
    /// The block for an identity deciding `rate` a second: what it spends in
    /// a term, at least 2 (a block of 1 saves no call), at most the cap.
    pub fn block(&self, rate: u64) -> u64 {
        let per_term = rate.saturating_mul(self.term_ms).div_ceil(1_000);
        per_term.clamp(2, self.max_block.max(2))
    }
}

/// Identities a policy may hold blocks for on one instance; past it, no
/// new block is taken (decisions go to the store as usual).
pub const MAX_BLOCKS: usize = 1024;

/// Units of ended blocks waiting to be given back, at most; past it an
/// ended block's units are lost (counted).
pub const MAX_UNSPENT: usize = MAX_BLOCKS;

/// The shortest wait after a refused block: a store that keeps a block
/// just out of reach (another instance spending as it refills) is asked
/// at most once per this, not once per decision. The smallest `term`.
pub const REFUSED_FLOOR_MS: u64 = 10;

/// Units of an ended block, to give back to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unspent {
    /// Whose block it was.
    pub identity: Identity,
    /// Units never spent.
    pub units: u64,
    /// Where the store consumed them.
    pub taken: Taken,
}

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
    /// When it was taken and when its term ends, on this instance's
    /// monotonic clock: a wall clock stepped back cannot stretch a term.
    taken_at_ms: u64,
    until_ms: u64,
    /// The store's decision when the block was taken: its reset carries
    /// over, its `remaining` counts down with the block.
    decision: Decision,
    /// Where the store consumed it, for the give-back (none while taking).
    taken: Option<Taken>,
}

/// A block the store refused: until `until_us` (this instance's
/// monotonic clock) it cannot be had, so a request of cost up to `block`
/// is rejected here without asking.
#[derive(Debug, Clone, Copy)]
struct Refusal {
    block: u64,
    /// When the store's answer arrived; its reset counts down from here.
    answered_us: u64,
    /// The answer's time plus the store's wait for the block (at least
    /// [`REFUSED_FLOOR_MS`]).
    until_us: u64,
    decision: Decision,
}

/// One policy's blocks on this instance.
#[derive(Debug)]
pub struct HotLeases {
    /// The policy's `hot_lease` settings.
    pub rule: HotLeaseRule,
    blocks: Mutex<HashMap<Identity, Block, foldhash::fast::RandomState>>,
    /// Each identity's decisions per second here: the second being counted
    /// (its start, its count) and the whole one before.
    rates: Mutex<HashMap<Identity, Rate, foldhash::fast::RandomState>>,
    /// Identities whose last block the store refused, and until when.
    refusals: Mutex<HashMap<Identity, Refusal, foldhash::fast::RandomState>>,
    /// Ended blocks' units, waiting for the upkeep to give them back.
    unspent: Mutex<Vec<Unspent>>,
    /// Units neither spent nor given back (`tollgate_hot_lease_lost_units`).
    lost: Counter,
    /// Units given back (`tollgate_hot_lease_returned_units`).
    returned: Counter,
}

impl HotLeases {
    /// No blocks yet; `lost` and `returned` count the units of ended
    /// blocks that did not and did go back.
    pub fn new(rule: HotLeaseRule, lost: Counter, returned: Counter) -> Self {
        Self {
            rule,
            blocks: Mutex::new(HashMap::default()),
            rates: Mutex::new(HashMap::default()),
            refusals: Mutex::new(HashMap::default()),
            unspent: Mutex::new(Vec::new()),
            lost,
            returned,
        }
    }

    /// Sets an ended block's units aside to be given back (lost when the
    /// list is full or the block has no receipt).
    fn set_aside(&self, identity: &Identity, block: &Block) {
        if block.left == 0 {
            return;
        }
        let kept = block.taken.is_some_and(|taken| {
            self.unspent.lock().is_ok_and(|mut unspent| {
                let room = unspent.len() < MAX_UNSPENT;
                if room {
                    unspent.push(Unspent {
                        identity: identity.clone(),
                        units: block.left,
                        taken,
                    });
                }
                room
            })
        });
        if !kept {
            self.lost.inc_by(block.left);
        }
    }

    /// Ends the blocks whose term has run out at `now_ms` and hands over
    /// every ended block's units, to give back. A block being taken stays.
    pub fn take_unspent(&self, now_ms: u64) -> Vec<Unspent> {
        if let Ok(mut blocks) = self.blocks.lock() {
            blocks.retain(|identity, block| {
                let live = block.taking || now_ms < block.until_ms;
                if !live {
                    self.set_aside(identity, block);
                }
                live
            });
        }
        self.unspent
            .lock()
            .map(|mut unspent| std::mem::take(&mut *unspent))
            .unwrap_or_default()
    }

    /// Ends every block now (the instance is stopping) and hands over
    /// their units, to give back.
    pub fn take_all_unspent(&self) -> Vec<Unspent> {
        self.take_unspent(u64::MAX)
    }

    /// Counts what a give-back of `units` came to: `given` went back to
    /// the store, the rest is lost.
    pub fn given_back(&self, units: u64, given: u64) {
        self.returned.inc_by(given);
        self.lost.inc_by(units.saturating_sub(given));
    }

    /// What `identity`'s live block has not spent yet (0 without one):
    /// taken from the store, still this instance's to admit, so a look at
    /// the store's state alone would under-report what remains by it.
    pub fn unspent(&self, identity: &Identity, now_ms: u64) -> u64 {
        let Ok(blocks) = self.blocks.lock() else {
            return 0;
        };
        match blocks.get(identity) {
            Some(block) if !block.taking && now_ms < block.until_ms => block.left,
            _ => 0,
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
            // Run out: what is left goes back (see the module's note).
            if let Some(block) = blocks.remove(identity) {
                self.set_aside(identity, &block);
            }
            return None;
        }
        block.left -= cost;
        let elapsed = now_ms.saturating_sub(block.taken_at_ms);
        Some(Decision {
            allowed: true,
            remaining: block.decision.remaining.saturating_add(signed(block.left)),
            retry_after_ms: Some(0),
            reset_after_ms: block.decision.reset_after_ms.saturating_sub(elapsed),
            ..block.decision
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
            self.set_aside(identity, block);
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
                decision: Decision {
                    allowed: false,
                    limit: 0,
                    remaining: 0,
                    retry_after_ms: None,
                    reset_after_ms: 0,
                    permit: None,
                },
                taken: None,
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
    /// of `cost`, whose decision the store gave as `decision`, consuming
    /// them where `taken` says; returns the request's own decision.
    pub fn keep(
        &self,
        identity: &Identity,
        block: u64,
        cost: u64,
        (decision, taken): (&Decision, Taken),
        now_ms: u64,
    ) -> Decision {
        let left = block.saturating_sub(cost);
        // Spent within its term; a window's block never past the window it
        // was taken from (its reset, for an admitted decision).
        let term_ms = if self.rule.windowed {
            self.rule.term_ms.min(decision.reset_after_ms)
        } else {
            self.rule.term_ms
        };
        let until_ms = now_ms.saturating_add(term_ms);
        if let Ok(mut refusals) = self.refusals.lock() {
            refusals.remove(identity);
        }
        if let Ok(mut blocks) = self.blocks.lock() {
            if blocks.len() >= MAX_BLOCKS {
                blocks.retain(|identity, b| {
                    let live = now_ms < b.until_ms;
                    if !live {
                        self.set_aside(identity, b);
                    }
                    live
                });
            }
            let block = Block {
                taking: false,
                left,
                taken_at_ms: now_ms,
                until_ms,
                decision: *decision,
                taken: Some(taken),
            };
            if blocks.len() < MAX_BLOCKS || blocks.contains_key(identity) {
                if let Some(replaced) = blocks.insert(identity.clone(), block) {
                    self.set_aside(identity, &replaced);
                }
            } else {
                self.set_aside(identity, &block);
            }
        }
        Decision {
            remaining: decision.remaining.saturating_add(signed(left)),
            ..*decision
        }
    }

    /// Remembers that the store refused `identity` a block of `block`
    /// units with `decision`, which arrived at `answered_us` (monotonic):
    /// no block that size can be had before the store's wait has passed
    /// (other instances only consume meanwhile, or give back). Returns the
    /// answer for the request that asked ([`HotLeases::refused`]), or
    /// `None` when it is not remembered: a block that can never be had
    /// (no wait), or the map is full of live refusals.
    pub fn refuse(
        &self,
        identity: &Identity,
        block: u64,
        decision: &Decision,
        answered_us: u64,
    ) -> Option<Decision> {
        let wait_ms = decision.retry_after_ms.filter(|_| !decision.allowed)?;
        let until_us =
            answered_us.saturating_add(wait_ms.max(REFUSED_FLOOR_MS).saturating_mul(1_000));
        let refusal = Refusal {
            block,
            answered_us,
            until_us,
            decision: *decision,
        };
        let mut refusals = self.refusals.lock().ok()?;
        if refusals.len() >= MAX_BLOCKS && !refusals.contains_key(identity) {
            refusals.retain(|_, r| answered_us < r.until_us);
            if refusals.len() >= MAX_BLOCKS {
                return None;
            }
        }
        refusals.insert(identity.clone(), refusal);
        Some(refusal.answer(answered_us))
    }

    /// The local rejection of `cost` for `identity` at `now_us`
    /// (monotonic) while a refused block of at least `cost` cannot be had;
    /// `None`: ask the store (no refusal, it has lapsed, or `cost` is above
    /// the block refused).
    pub fn refused(&self, identity: &Identity, cost: u64, now_us: u64) -> Option<Decision> {
        let mut refusals = self.refusals.lock().ok()?;
        let refusal = *refusals.get(identity)?;
        if now_us >= refusal.until_us {
            refusals.remove(identity);
            return None;
        }
        (cost <= refusal.block).then(|| refusal.answer(now_us))
    }

    /// Forgets `identity`'s refused block (an operator reset it).
    pub fn forget_refusal(&self, identity: &Identity) {
        if let Ok(mut refusals) = self.refusals.lock() {
            refusals.remove(identity);
        }
    }

    /// Ends `identity`'s live block now and hands over its unspent units,
    /// to give back: a refund or a reset changes the state they were
    /// taken from, and a block kept past it would spend units that state
    /// no longer counts as taken. A block being taken stays.
    pub fn end(&self, identity: &Identity) -> Option<Unspent> {
        let mut blocks = self.blocks.lock().ok()?;
        if blocks.get(identity).is_none_or(|b| b.taking) {
            return None;
        }
        let block = blocks.remove(identity)?;
        match block.taken {
            Some(taken) if block.left > 0 => Some(Unspent {
                identity: identity.clone(),
                units: block.left,
                taken,
            }),
            _ => {
                self.lost.inc_by(block.left);
                None
            }
        }
    }

    /// Refusals remembered now (for tests and the bound).
    pub fn refusals_held(&self) -> usize {
        self.refusals.lock().map_or(0, |r| r.len())
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

impl Drop for HotLeases {
    /// A reload that changed the policy drops its blocks: what they and
    /// the set-aside list held is lost, and counted.
    fn drop(&mut self) {
        for unspent in self.take_all_unspent() {
            self.lost.inc_by(unspent.units);
        }
    }
}

impl Refusal {
    /// A rejection at `now_us`: nothing here until the wait has passed
    /// (`remaining` 0), told as the whole wait left, never early — at
    /// its end the block's worth is there if nothing else was spent; the
    /// store's reset counts down from its answer.
    fn answer(&self, now_us: u64) -> Decision {
        let waited_ms = now_us.saturating_sub(self.answered_us) / 1_000;
        let wait_ms = self.until_us.saturating_sub(now_us).div_ceil(1_000).max(1);
        Decision {
            allowed: false,
            remaining: 0,
            retry_after_ms: Some(wait_ms),
            reset_after_ms: self.decision.reset_after_ms.saturating_sub(waited_ms),
            ..self.decision
        }
    }
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
