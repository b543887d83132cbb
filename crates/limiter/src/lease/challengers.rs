//! Identities that want more than their floor while a lease's table is
//! full, and their demand since the last renewal: the candidates for a
//! slot (docs/config.md, Leased shares: who holds a slot).
//!
//! Bounded at [`MAX_CHALLENGERS`] by the Space-Saving rule: a new
//! identity finding the list full takes the place of the least demanding
//! one, inheriting its count as a possible overcount (its `error`). Only
//! the count less that error is sure demand, and only sure demand is
//! compared with a holder's: a stream of fresh junk names can neither push
//! out an identity whose demand stands above theirs nor borrow demand to
//! win a slot.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock};

use tollgate_core::Identity;

/// Candidates a lease keeps at once, however large its table: the list is
/// scanned when a new one finds it full.
pub const MAX_CHALLENGERS: usize = 64;

/// Units asked for since the last renewal, and how many of them may be
/// another identity's (inherited on taking its place).
#[derive(Debug)]
struct Count {
    /// Counted under the read lock, as requests come.
    units: AtomicU64,
    error: u64,
}

/// One lease's candidates.
#[derive(Default)]
pub(super) struct Challengers {
    counts: RwLock<HashMap<Identity, Count>>,
    /// How many there are, read without the lock on every request.
    len: AtomicUsize,
}

impl Challengers {
    /// Counts `cost` for `identity` if it is a candidate.
    pub(super) fn count(&self, identity: &Identity, cost: u64) {
        if self.len.load(Ordering::Relaxed) == 0 || cost == 0 {
            return;
        }
        let counts = self.counts.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get(identity) {
            count.units.fetch_add(cost, Ordering::Relaxed);
        }
    }

    /// `identity`, turned away by its floor asking `cost` while the table
    /// is full, becomes a candidate (one already is: [`Challengers::count`]
    /// counted the cost as it was asked).
    pub(super) fn enter(&self, identity: &Identity, cost: u64) {
        let known = self
            .counts
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(identity);
        if known {
            return;
        }
        let mut counts = self.counts.write().unwrap_or_else(PoisonError::into_inner);
        if counts.contains_key(identity) {
            return;
        }
        let mut entering = Count {
            units: AtomicU64::new(cost),
            error: 0,
        };
        if counts.len() >= MAX_CHALLENGERS {
            let least = counts
                .iter()
                .map(|(id, count)| (id, count.units.load(Ordering::Relaxed)))
                .min_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(b.0)))
                .map(|(id, units)| (id.clone(), units));
            let Some((id, units)) = least else { return };
            counts.remove(&id);
            entering = Count {
                units: AtomicU64::new(units.saturating_add(cost)),
                error: units,
            };
        }
        counts.insert(identity.clone(), entering);
        self.len.store(counts.len(), Ordering::Relaxed);
    }

    /// Every candidate and its sure demand since the last renewal, the
    /// most demanding first (ties in identity order); the list starts
    /// afresh.
    pub(super) fn take(&self) -> Vec<(Identity, u64)> {
        let mut counts = self.counts.write().unwrap_or_else(PoisonError::into_inner);
        self.len.store(0, Ordering::Relaxed);
        let mut sure: Vec<(Identity, u64)> = counts
            .drain()
            .map(|(id, c)| (id, c.units.into_inner().saturating_sub(c.error)))
            .collect();
        sure.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        sure
    }
}
