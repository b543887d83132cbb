//! Naming permits: an admitted concurrency acquire holds a permit whose id
//! the store mints before it decides (the core's transition takes it as an
//! input). Under a request id the name is the request's own — the id, the
//! whole request's digest and the check's place in the call — so a retry
//! names, and is answered with, the same permit on any instance; without
//! one it is fresh: a per-process random seed over a counter.

use std::sync::atomic::{AtomicU64, Ordering};

use std::hash::BuildHasher;

use tollgate_core::{Decision, PermitId};

use crate::check::Check;
use crate::request_id::Retry;

/// Mints fresh permit ids for one store.
pub(crate) struct Minter {
    seed: foldhash::quality::RandomState,
    next: AtomicU64,
}

impl Default for Minter {
    fn default() -> Self {
        Self {
            seed: foldhash::quality::RandomState::default(),
            next: AtomicU64::new(0),
        }
    }
}

impl Minter {
    /// A fresh id, unlike every other this store mints (a bijective mix of
    /// a counter would be enough; a seeded hash also keeps them unguessable
    /// across processes).
    pub(crate) fn fresh(&self) -> PermitId {
        PermitId(
            self.seed
                .hash_one(self.next.fetch_add(1, Ordering::Relaxed)),
        )
    }

    /// The fresh permit each of `checks` would hold: empty (nothing
    /// allocated) when none holds permits.
    pub(crate) fn name(&self, checks: &[Check<'_>]) -> Vec<PermitId> {
        if !checks.iter().any(holds_permit) {
            return Vec::new();
        }
        checks.iter().map(|c| self.one(c)).collect()
    }

    /// The permit one check alone would hold (no request id).
    pub(crate) fn one(&self, check: &Check<'_>) -> PermitId {
        if holds_permit(check) {
            self.fresh()
        } else {
            PermitId::UNNAMED
        }
    }
}

/// Whether `check` would take a permit when admitted.
pub(crate) fn holds_permit(check: &Check<'_>) -> bool {
    check.cost > 0 && check.policy.limits().holds_permits()
}

/// The permit each of `checks` would hold under `retry`: the request's
/// own names; empty (nothing allocated) when none holds permits.
pub(crate) fn name_all(checks: &[Check<'_>], retry: &Retry<'_>) -> Vec<PermitId> {
    if !checks.iter().any(holds_permit) {
        return Vec::new();
    }
    (0..checks.len())
        .map(|i| {
            if holds_permit(&checks[i]) {
                of_request(retry, i)
            } else {
                PermitId::UNNAMED
            }
        })
        .collect()
}

/// The permit of check `index` of the request `retry` names.
pub(crate) fn of_request(retry: &Retry<'_>, index: usize) -> PermitId {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"tollgate permit v1\0");
    hasher.update(&(retry.id.as_str().len() as u64).to_le_bytes());
    hasher.update(retry.id.as_str().as_bytes());
    hasher.update(retry.request.as_bytes());
    hasher.update(&(index as u64).to_le_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&hasher.finalize().as_bytes()[..8]);
    PermitId(u64::from_le_bytes(first))
}

/// The permit at `index` of `permits` (none named: [`PermitId::UNNAMED`]).
pub(crate) fn at(permits: &[PermitId], index: usize) -> PermitId {
    permits.get(index).copied().unwrap_or(PermitId::UNNAMED)
}

/// A replay's decisions name the permits the first attempt held: the
/// retry is answered with the same permit, and takes none.
pub(crate) fn name_replayed(checks: &[Check<'_>], retry: &Retry<'_>, decisions: &mut [Decision]) {
    for (i, (check, decision)) in checks.iter().zip(decisions).enumerate() {
        if holds_permit(check) {
            decision.permit = Some(of_request(retry, i));
        }
    }
}
