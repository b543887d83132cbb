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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use tollgate_core::Identity;

/// Candidates a lease keeps at once, however large its table: the list is
/// scanned when a new one finds it full.
pub const MAX_CHALLENGERS: usize = 64;

/// Units asked for since the last renewal, and how many of them may be
/// another identity's (inherited on taking its place).
#[derive(Debug, Clone, Copy)]
struct Count {
    units: u64,
    error: u64,
}

/// One lease's candidates.
#[derive(Default)]
pub(super) struct Challengers {
    counts: Mutex<HashMap<Identity, Count>>,
    /// How many there are, read without the lock on every request.
    len: AtomicUsize,
}

impl Challengers {
    /// Counts `cost` for `identity` if it is a candidate.
    pub(super) fn count(&self, identity: &Identity, cost: u64) {
        if self.len.load(Ordering::Relaxed) == 0 || cost == 0 {
            return;
        }
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(identity) {
            count.units = count.units.saturating_add(cost);
        }
    }

    /// `identity`, turned away by its floor asking `cost` while the table
    /// is full, becomes a candidate (one already is: [`Challengers::count`]
    /// counted the cost as it was asked).
    pub(super) fn enter(&self, identity: &Identity, cost: u64) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if counts.contains_key(identity) {
            return;
        }
        if counts.len() >= MAX_CHALLENGERS {
            let least = counts
                .iter()
                .min_by(|a, b| a.1.units.cmp(&b.1.units).then_with(|| a.0.cmp(b.0)))
                .map(|(id, count)| (id.clone(), *count));
            if let Some((id, count)) = least {
                counts.remove(&id);
                counts.insert(
                    identity.clone(),
                    Count {
                        units: count.units.saturating_add(cost),
                        error: count.units,
                    },
                );
            }
            return;
        }
        counts.insert(
            identity.clone(),
            Count {
                units: cost,
                error: 0,
            },
        );
        self.len.store(counts.len(), Ordering::Relaxed);
    }

    /// Every candidate and its sure demand since the last renewal, the
    /// most demanding first (ties in identity order); the list starts
    /// afresh.
    pub(super) fn take(&self) -> Vec<(Identity, u64)> {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        self.len.store(0, Ordering::Relaxed);
        let mut sure: Vec<(Identity, u64)> = counts
            .drain()
            .map(|(id, c)| (id, c.units.saturating_sub(c.error)))
            .collect();
        sure.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        sure
    }
}
