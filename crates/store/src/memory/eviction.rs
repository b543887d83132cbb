//! What a full shard gives up for a new key. Forgetting a state hands its
//! identity back whatever it had spent, so a store that forgets whatever
//! expires soonest lets anyone with fresh identities reset any limit (an
//! exhausted 10-minute login log goes before hour-long exports). The order:
//!
//! 1. states at rest (back to full or empty) and expired request ids:
//!    forgetting them is exact;
//! 2. a request id (a forgotten id costs a retry a second charge);
//! 3. a state that is not limiting, the least consumed first (then the
//!    nearest to rest);
//!
//! and never a limiting state: when only those remain the shard is full
//! and the new key is not stored (its decision falls to its policy's
//! failure mode). The work is bounded: one pass over the shard (at most
//! `max_keys / shards` states) sweeps what is at rest and lists the next
//! few candidates ([`MemoryStore::victims_a_pass`]: one for every
//! [`SLOTS_A_VICTIM`] slots, at least 16), spent by the next calls; a pass
//! is made at least once that many calls (so a state come to rest since
//! is preferred again soon), and a call makes at most two. That is about
//! [`SLOTS_A_VICTIM`] slots looked at a call, however large the shard. A
//! shard a pass found holding only limiting states is not passed over
//! again until the first of them stops limiting, or [`FULL_RECHECK_MS`]
//! at most (a reload may have raised a limit): a flood of new identities
//! against a full store costs a lookup each, not a pass each.

use std::collections::BinaryHeap;
use std::sync::atomic::Ordering;

use tollgate_core::{Decision, Limits, State};

use super::{MemoryStore, Slot, Table};

/// A decision's two times (crates/core/src/clock.rs). The wall time dates
/// decisions and request ids; whether a state rests or still limits is
/// judged on both clocks, and it must hold on both: the monotonic clock
/// (the state's wall-clock span to rest, laid on it at its decision), so a
/// wall clock stepped an hour forward never makes a limiting state look at
/// rest, and the wall clock, so a state is never forgotten while the wall,
/// stepped back, has not reached its rest (forgetting stays unobservable).
/// The wall time is kept as its lead over the monotonic time, in two bytes
/// a slot, clamped to ±32 s: a state decided while the wall was behind by
/// more is judged later than needed, one decided while the wall was ahead
/// by more at most 32 s after its monotonic rest (a full reset of real
/// time has passed by then).
#[derive(Debug, Clone, Copy)]
pub(super) struct Now {
    pub(super) wall: u64,
    pub(super) mono: u64,
    /// The wall's lead over the monotonic time beyond the store's base.
    pub(super) lead: i64,
}

impl Now {
    /// The wall time minus the monotonic time, less `base`.
    /// Saturated to i64 (in i64 arithmetic where both times fit it, as
    /// they do for 292 million years after 1970).
    pub(super) fn lead(wall: u64, mono: u64, base: i64) -> i64 {
        if let (Ok(wall), Ok(mono)) = (i64::try_from(wall), i64::try_from(mono)) {
            return (wall - mono).saturating_sub(base);
        }
        let raw = i128::from(wall) - i128::from(mono) - i128::from(base);
        i64::try_from(raw).unwrap_or(if raw < 0 { i64::MIN } else { i64::MAX })
    }

    /// `clock`'s lead now, less `base`.
    pub(super) fn lead_of(clock: &dyn tollgate_core::Clock, base: i64) -> i64 {
        Self::lead(clock.now_ms(), clock.monotonic_ms(), base)
    }

    /// The wall time `wall_ms` (no earlier than now) on the monotonic clock.
    fn mono_of(self, wall_ms: u64) -> u64 {
        self.mono.saturating_add(wall_ms.saturating_sub(self.wall))
    }

    /// The lead a slot keeps: clamped to two bytes, toward judging later
    /// when the wall fell behind (a larger lead kept than it was).
    fn kept_lead(self) -> i16 {
        i16::try_from(self.lead).unwrap_or(if self.lead < 0 { i16::MIN } else { i16::MAX })
    }

    /// The monotonic time a slot marked with `lead` is judged at: now, or
    /// as much earlier as the wall has fallen behind since its decision.
    fn judged_at(self, lead: i16) -> u64 {
        let behind = i64::from(lead).saturating_sub(self.lead).max(0);
        self.mono.saturating_sub(behind.unsigned_abs())
    }
}

/// A pass over a shard lists one eviction candidate for this many slots.
pub(super) const SLOTS_A_VICTIM: usize = 128;

/// How long a shard found full of limiting states is taken to be full
/// without another pass, at most.
const FULL_RECHECK_MS: u64 = 1_000;

/// The fewest eviction candidates a pass lists.
const MIN_VICTIMS: usize = 16;

/// How many keys' request ids a full shard looks at to forget the oldest.
const ID_SAMPLE: usize = 16;

/// What eviction must know of a stored state, stamped at its last
/// decision: left alone a state only recovers, so the marks say what it
/// is at any later time without its policy at hand. Both times are on the
/// monotonic clock ([`Now`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Marks {
    /// From then on the state is back to full or empty: at rest.
    pub(super) expires_at_ms: u64,
    /// Until then a request of cost 1 would be rejected: limiting.
    admits_one_from_ms: u64,
    /// The share of its limit spent at that decision, of `u8::MAX`.
    consumed: u8,
    /// The wall clock's lead at that decision ([`Now`]).
    lead_ms: i16,
}

/// A state's standing at some time, in the order eviction takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    /// Full or empty: the same as no state, so forgetting it is exact.
    AtRest,
    /// Holds some consumption, but a request of cost 1 would be admitted.
    Open,
    /// A request of cost 1 would be rejected ("remaining 0"): forgetting
    /// it would admit what the limit refuses.
    Limiting,
}

impl Marks {
    /// The marks of `state` as `decision` at `now` left it.
    /// `cost`: the decision's own, when it was decided alone on `state`
    /// (a batch's decisions may say what an earlier check's consumption,
    /// since undone, left).
    pub(super) fn of(
        limits: &Limits,
        state: &State,
        at: Now,
        decision: &Decision,
        cost: Option<u64>,
    ) -> Self {
        let now = at.wall;
        // The decision's waits count from the key's own clock, when later
        // (read once: `State::expires_at_ms` reads it the same way).
        let from = state.clock_ms().map_or(now, |clock| clock.max(now));
        // Cheap on the hot path: a state with a unit left is not limiting,
        // and a rejected unit says itself when it would be admitted; only
        // a state spent to 0 otherwise is asked (a second decision).
        let admits_one_from_ms = if decision.remaining >= 1 {
            now
        } else if cost == Some(1) && !decision.allowed {
            decision
                .retry_after_ms
                .map_or(u64::MAX, |wait| from.saturating_add(wait))
        } else {
            limits.admits_one_from_ms(state, now)
        };
        let limit = decision.limit.max(1);
        // A negative `remaining` (gcra after a step back) leaves nothing.
        let spent = limit - u64::try_from(decision.remaining).unwrap_or(0).min(limit);
        // At most u8::MAX, as `spent ≤ limit`; u128 only for vast limits.
        let consumed = match spent.checked_mul(u64::from(u8::MAX)) {
            Some(scaled) => scaled / limit,
            None => (u128::from(spent) * u128::from(u8::MAX) / u128::from(limit)) as u64,
        };
        Self {
            expires_at_ms: at.mono_of(from.saturating_add(decision.reset_after_ms)),
            admits_one_from_ms: at.mono_of(admits_one_from_ms),
            consumed: u8::try_from(consumed).unwrap_or(u8::MAX),
            lead_ms: at.kept_lead(),
        }
    }
}

impl Marks {
    /// The same marks with the expiry the slot keeps (no earlier than needed).
    pub(super) fn expiring_at(self, expires_at_ms: u64) -> Self {
        Self {
            expires_at_ms: expires_at_ms.max(self.expires_at_ms),
            ..self
        }
    }
}

impl Slot {
    /// Keeps `marks` in the slot's flat fields. A state stops limiting no
    /// later than it comes to rest (every limit admits one unit); kept as
    /// an offset of at most `u32::MAX` ms (49 days) before rest, so a
    /// longer one reads as limiting a little longer than it is, never less.
    pub(super) fn mark(&mut self, marks: Marks) {
        self.expires_at_ms = marks.expires_at_ms;
        self.open_before_rest_ms =
            u32::try_from(marks.expires_at_ms.saturating_sub(marks.admits_one_from_ms))
                .unwrap_or(u32::MAX);
        self.consumed = marks.consumed;
        self.lead_ms = marks.lead_ms;
    }

    /// The slot with `marks` kept.
    pub(super) fn marked(mut self, marks: Marks) -> Self {
        self.mark(marks);
        self
    }

    /// When the state stops limiting.
    fn open_from_ms(&self) -> u64 {
        self.expires_at_ms
            .saturating_sub(u64::from(self.open_before_rest_ms))
    }

    /// The state's standing at `at`, judged on both clocks ([`Now`]).
    pub(super) fn class(&self, at: Now) -> Class {
        let now = at.judged_at(self.lead_ms);
        if self.expires_at_ms <= now {
            Class::AtRest
        } else if self.open_from_ms() <= now {
            Class::Open
        } else {
            Class::Limiting
        }
    }
}

impl MemoryStore {
    /// How many eviction candidates a pass over a shard lists.
    pub(super) fn victims_a_pass(&self) -> usize {
        (self.max_per_shard / SLOTS_A_VICTIM).max(MIN_VICTIMS)
    }

    /// Frees one unit of a full shard in the order of the module notes,
    /// never one of `keep` (the keys of the decision being written);
    /// `false` when only limiting states (and `keep`) remain.
    pub(super) fn make_room(&self, table: &mut Table, at: Now, keep: &[u64]) -> bool {
        let now = at.mono;
        let list = self.victims_a_pass();
        let known_full = table.victims.is_empty() && now < table.full_until_ms;
        let mut scanned = known_full;
        table.since_sweep += 1;
        if !known_full && (table.victims.is_empty() || table.since_sweep >= list) {
            scanned = true;
            if sweep_table(table, at, keep, list) > 0 {
                return true;
            }
        }
        if forget_an_id(table) {
            return true;
        }
        loop {
            while let Some(hash) = table.victims.pop() {
                if keep.contains(&hash) {
                    continue;
                }
                let Ok(entry) = table.slots.find_entry(hash, |s| s.hash == hash) else {
                    continue;
                };
                // Listed at the last pass; it may have been spent since.
                match entry.get().class(at) {
                    Class::Limiting => continue,
                    Class::AtRest => {}
                    Class::Open => {
                        self.evictions.fetch_add(1, Ordering::Relaxed);
                    }
                }
                entry.remove();
                return true;
            }
            if scanned {
                return false;
            }
            scanned = true;
            if sweep_table(table, at, keep, list) > 0 {
                return true;
            }
        }
    }
}

/// Removes states at rest and expired request ids (but `keep`), and lists
/// the `list` open states to evict next, the least consumed last (so
/// popped first); returns how many it removed. States are judged on the
/// monotonic clock, request ids on the wall clock that dates them.
pub(super) fn sweep_table(table: &mut Table, at: Now, keep: &[u64], list: usize) -> usize {
    let now = at.mono;
    let before = table.held();
    // A max-heap of the least consumed seen so far, never above `list`.
    let mut least = BinaryHeap::with_capacity(list + 1);
    let mut next_open = now.saturating_add(FULL_RECHECK_MS);
    table.slots.retain(|s| {
        let kept = keep.contains(&s.hash);
        next_open = next_open.min(s.open_from_ms());
        match s.class(at) {
            Class::AtRest => kept,
            Class::Open => {
                if !kept {
                    least.push((s.consumed, s.expires_at_ms, s.hash));
                    if least.len() > list {
                        least.pop();
                    }
                }
                true
            }
            Class::Limiting => true,
        }
    });
    table.since_sweep = 0;
    table.victims.clear();
    table
        .victims
        .extend(least.into_sorted_vec().into_iter().rev().map(|(_, _, h)| h));
    let mut dropped = 0;
    table.records.retain(|r| {
        dropped += r.drop_expired(at.wall);
        !r.ids.is_empty()
    });
    table.ids -= dropped;
    let removed = before - table.held();
    table.full_until_ms = if removed == 0 && table.victims.is_empty() {
        next_open
    } else {
        0
    };
    removed
}

/// Forgets the oldest request id of a sample of keys; whether there was one.
fn forget_an_id(table: &mut Table) -> bool {
    let oldest = table
        .records
        .iter()
        .take(ID_SAMPLE)
        .min_by_key(|r| r.ids.front().map_or(0, |id| id.until_ms))
        .map(|r| r.hash);
    let Some(Ok(mut entry)) = oldest.map(|hash| table.records.find_entry(hash, |r| r.hash == hash))
    else {
        return false;
    };
    entry.get_mut().ids.pop_front();
    if entry.get().ids.is_empty() {
        entry.remove();
    }
    table.ids -= 1;
    true
}
