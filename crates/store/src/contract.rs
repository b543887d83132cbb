//! The store contract: everything a limiter asks of a store, as five
//! small traits, in one place.
//!
//! - [`Store`]: a store's own decisions (one check, all-or-nothing, once
//!   under a request id), on its own clock; a failure is the caller's.
//! - [`Decide`]: a request's decisions that never fail: a store that
//!   cannot decide answers by the checks' failure modes; and releases of
//!   permits, which can.
//! - [`Blocks`]: take a block of units, give back what was not spent.
//! - [`Ledger`]: the lease ledger of `leased` policies.
//! - [`Admin`]: forget, ping, stats, sweep.
//!
//! A store that can fail (Redis) implements [`Store`], [`Blocks`],
//! [`Ledger`] and [`Admin`]; [`crate::Guarded`] puts any such store behind
//! a breaker and the failure modes, and is the [`Decide`] (with the other
//! three) the limiter drives. The memory store implements all five itself:
//! it fails only when full, and then its [`Decide`] answers by the failure
//! modes. A new store needs only [`Store`] to be guarded (tollgate-tower's
//! remote tollgate implements no more); it serves blocks, leases and
//! upkeep only as far as it implements the other three. Each store's
//! impls sit beside the store.

use std::future::Future;

use tollgate_core::{Decision, Identity, PermitId, Policy, Released, Taken};

use crate::check::Check;
use crate::error::StoreError;
use crate::fallback::{GuardedCheck, GuardedDecisions};
use crate::lease::{LeaseAsk, LeaseGrant};
#[cfg(feature = "redis")]
use crate::request_id::Replay;
use crate::request_id::{RequestId, Retried, Retry};

/// Somewhere decisions are made atomically, on the store's own clock.
pub trait Store: Send + Sync + 'static {
    /// Decides one check, consuming its cost when admitted.
    fn decide(&self, check: Check<'_>)
    -> impl Future<Output = Result<Decision, StoreError>> + Send;

    /// Decides every check all-or-nothing: when any is rejected nothing is
    /// consumed, and each decision says what that check alone would get
    /// (a check that fails only because an earlier check of the batch took
    /// from the same key reports that failure). The batch is admitted iff
    /// every decision is. Decisions come back in the order of `checks`.
    fn decide_all(
        &self,
        checks: &[Check<'_>],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send;

    /// A decision this store gives without asking its server: a rejection
    /// it was answered that still stands (Redis's rejected-until cache).
    /// The guard asks it before a call its breaker admits and records the
    /// answer as neither a success nor a failure, so a store that is down
    /// is never taken for up because its cache answered.
    fn known(&self, check: Check<'_>) -> Option<Decision> {
        let _ = check;
        None
    }

    /// Decides every check all-or-nothing, as [`Store::decide_all`], under a
    /// request id: when `retry.id` is recorded beside the first check's
    /// state for the same request (`retry.request`) and inside its window,
    /// nothing is consumed and the call answers admitted again
    /// ([`crate::Replay::Replayed`]); recorded for any other request it is
    /// refused ([`crate::Replay::Mismatch`]).
    /// Otherwise the checks are decided and, when all admit, the id is
    /// recorded in the same atomic step (crate::request_id).
    fn decide_once(
        &self,
        checks: &[Check<'_>],
        retry: Retry<'_>,
    ) -> impl Future<Output = Result<Retried, StoreError>> + Send;

    /// Frees `permit` of `policy`'s state for `identity` (a concurrency
    /// policy's) if it is held now, on the store's clock: what it found.
    fn release(
        &self,
        policy: &Policy,
        identity: &Identity,
        permit: PermitId,
    ) -> impl Future<Output = Result<Released, StoreError>> + Send;
}

/// A request's checks decided by `store` itself, as a [`Decide`] asks:
/// one alone, more all-or-nothing, under the request id when there is one.
/// A failure is the caller's (its failure modes answer). The memory store
/// decides the same way at once (`MemoryStore::decide_guarded`).
#[cfg(feature = "redis")]
pub(crate) async fn decide_checks<S: Store>(
    store: &S,
    checks: &[GuardedCheck<'_>],
    retry: Option<Retry<'_>>,
) -> Result<(Vec<Decision>, Replay), StoreError> {
    if let ([one], None) = (checks, retry) {
        return store
            .decide(one.check)
            .await
            .map(|d| (vec![d], Replay::Fresh));
    }
    let plain: Vec<Check<'_>> = checks.iter().map(|g| g.check).collect();
    match retry {
        None => store.decide_all(&plain).await.map(|d| (d, Replay::Fresh)),
        Some(retry) => store
            .decide_once(&plain, retry)
            .await
            .map(|r| (r.decisions, r.replay)),
    }
}

/// Deciding: every store decides a request's checks all-or-nothing, under
/// their failure modes where it can fail, and under a request id when one
/// is given (the first check's policy keeps it).
pub trait Decide: Send + Sync {
    /// Decides `checks`; never fails: a store that cannot decide answers
    /// by the checks' failure modes and says why in the result.
    fn decide(
        &self,
        checks: &[GuardedCheck<'_>],
        retry: Option<Retry<'_>>,
    ) -> impl Future<Output = GuardedDecisions> + Send;

    /// Frees a held permit ([`Store::release`]); a guarded store also
    /// frees one its `local` failure mode handed out. A store that cannot
    /// be asked fails: no failure mode invents a release.
    fn release(
        &self,
        policy: &Policy,
        identity: &Identity,
        permit: PermitId,
    ) -> impl Future<Output = Result<Released, StoreError>> + Send;
}

/// Blocks of units taken at once (hot leases), spent locally, and what was
/// not spent given back.
pub trait Blocks: Send + Sync {
    /// Decides `check` and says where its units came from, so the unspent
    /// ones can go back. A failure is the caller's to handle.
    fn take(
        &self,
        check: Check<'_>,
    ) -> impl Future<Output = Result<(Decision, Taken), StoreError>> + Send;

    /// Gives back up to `check.cost` units of a [`Blocks::take`] that were
    /// never spent; how many went back.
    fn give_back(
        &self,
        check: Check<'_>,
        taken: Taken,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Whether blocks are worth asking for now (a guarded store's circuit
    /// is closed): a block is not worth a timeout.
    fn trusted(&self) -> bool;
}

/// The ledger of `leased` policies' shares (crates/store/lua/lease.lua).
pub trait Ledger: Send + Sync {
    /// One renewal: this instance's demand for each identity in, a grant
    /// for each out (in the same order).
    fn lease(
        &self,
        ask: &LeaseAsk<'_>,
    ) -> impl Future<Output = Result<Vec<LeaseGrant>, StoreError>> + Send;
}

/// What a store holds and does, for the gauges: all counts since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Keys held in this process (the memory store's, or a guarded store's
    /// local fallback's).
    pub keys: u64,
    /// Keys evicted to stay within the bound.
    pub evictions: u64,
    /// The circuit's state as a gauge (0 closed, 1 open, 2 half-open:
    /// [`crate::CircuitState::as_gauge`]).
    pub circuit: i64,
    /// Decisions answered from the rejected-until cache, without a call.
    pub answered_locally: u64,
    /// Script calls sent, for every purpose.
    pub script_calls: u64,
}

/// An operator's and an upkeep's view of a store.
pub trait Admin: Send + Sync {
    /// Forgets `policy`'s state for `identity` (a guarded store's local
    /// fallback's too): whether the store held one.
    fn forget(
        &self,
        policy: &Policy,
        identity: &Identity,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Forgets request id `id` recorded with `policy`'s state of
    /// `identity` (a guarded store's local fallback's too), so a retry
    /// under it is decided, and charged, afresh: a refund of the work it
    /// admitted.
    fn forget_request_id(
        &self,
        policy: &Policy,
        identity: &Identity,
        id: &RequestId,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// A bounded round trip: whether the store answers now.
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// What the store holds and did, for the gauges.
    fn stats(&self) -> StoreStats;

    /// Expires idle keys held in this process (Redis expires its own).
    fn sweep(&self);
}
