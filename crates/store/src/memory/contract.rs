//! The memory store's side of the store contract (crate::contract): each
//! operation is the store's own, answered at once; a full store's
//! decisions go by the checks' failure modes.

use std::future::{Future, ready};

use smallvec::smallvec;

use tollgate_core::{Decision, Identity, PermitId, Policy, Released, Taken};

use super::MemoryStore;
use super::eviction::Now;
use crate::check::Check;
use crate::contract::{Admin, Blocks, Decide, Ledger, Store, StoreStats};
use crate::error::StoreError;
use crate::fallback::{self, Decisions, GuardedCheck, GuardedDecisions};
use crate::lease::{LeaseAsk, LeaseGrant};
use crate::request_id::{Replay, RequestId, Retried, Retry};

impl Store for MemoryStore {
    fn decide(
        &self,
        check: Check<'_>,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        ready(self.decide_now(check))
    }

    fn decide_all(
        &self,
        checks: &[Check<'_>],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        ready(self.decide_all_now(checks))
    }

    fn decide_once(
        &self,
        checks: &[Check<'_>],
        retry: Retry<'_>,
    ) -> impl Future<Output = Result<Retried, StoreError>> + Send {
        ready(self.decide_once_now(checks, retry))
    }

    fn release(
        &self,
        policy: &Policy,
        identity: &Identity,
        permit: PermitId,
    ) -> impl Future<Output = Result<Released, StoreError>> + Send {
        ready(Ok(MemoryStore::release(self, policy, identity, permit)))
    }
}

impl MemoryStore {
    /// [`Decide::decide`], now: the memory store needs no I/O, so a
    /// caller that cannot await (a tower layer's `call`) decides here, by
    /// the same path the contract's future takes.
    pub fn decide_guarded(
        &self,
        checks: &[GuardedCheck<'_>],
        retry: Option<Retry<'_>>,
    ) -> GuardedDecisions {
        let result = match retry {
            None => self.decide_fresh(checks, || self.now()),
            Some(retry) => self
                .decide_once_now(&plain(checks), retry)
                .map(|r| (Decisions::from_vec(r.decisions), r.replay)),
        };
        self.answered(checks, retry, result)
    }

    /// [`MemoryStore::decide_guarded`] without a request id, at `now_ms`
    /// (the wall time) and `monotonic_ms`, which the caller read from
    /// this store's own clock ([`MemoryStore::keeps_time_by`]) to date
    /// and time its request: the same decisions as reading it here, one
    /// read of the clock fewer.
    pub fn decide_guarded_at(
        &self,
        checks: &[GuardedCheck<'_>],
        now_ms: u64,
        monotonic_ms: u64,
    ) -> GuardedDecisions {
        let result = self.decide_fresh(checks, || self.at(now_ms, monotonic_ms));
        self.answered(checks, None, result)
    }

    /// `checks` decided all or nothing, without a request id, at the
    /// time `now` reads; one check with no list of its own.
    fn decide_fresh(
        &self,
        checks: &[GuardedCheck<'_>],
        now: impl FnOnce() -> Now,
    ) -> Result<(Decisions, Replay), StoreError> {
        match checks {
            [one] => self
                .decide_at(one.check, now)
                .map(|d| (smallvec![d], Replay::Fresh)),
            _ => self
                .decide_all_at(&plain(checks), now)
                .map(|d| (Decisions::from_vec(d), Replay::Fresh)),
        }
    }

    /// The store's `result` for `checks`, or when it was full, the
    /// failure modes' answer.
    fn answered(
        &self,
        checks: &[GuardedCheck<'_>],
        retry: Option<Retry<'_>>,
        result: Result<(Decisions, Replay), StoreError>,
    ) -> GuardedDecisions {
        match result {
            // Full (memory/full.rs): the failure modes answer, and a
            // `local` policy's identities without room share one budget.
            Err(error) => GuardedDecisions {
                error: Some(error),
                ..fallback::by_failure_mode(checks, retry, |local, retry| {
                    self.decide_local(local, retry, false)
                })
            },
            ok => fallback::shared(ok),
        }
    }
}

/// The checks themselves, without their failure modes.
fn plain<'a>(checks: &[GuardedCheck<'a>]) -> Vec<Check<'a>> {
    checks.iter().map(|g| g.check).collect()
}

impl Decide for MemoryStore {
    async fn decide(
        &self,
        checks: &[GuardedCheck<'_>],
        retry: Option<Retry<'_>>,
    ) -> GuardedDecisions {
        self.decide_guarded(checks, retry)
    }

    async fn release(
        &self,
        policy: &Policy,
        identity: &Identity,
        permit: PermitId,
    ) -> Result<Released, StoreError> {
        Ok(MemoryStore::release(self, policy, identity, permit))
    }
}

impl Blocks for MemoryStore {
    async fn take(&self, check: Check<'_>) -> Result<(Decision, Taken), StoreError> {
        MemoryStore::take(self, check)
    }

    async fn give_back(&self, check: Check<'_>, taken: Taken) -> Result<u64, StoreError> {
        Ok(MemoryStore::give_back(self, check, taken))
    }

    fn trusted(&self) -> bool {
        true
    }
}

impl Ledger for MemoryStore {
    async fn lease(&self, _ask: &LeaseAsk<'_>) -> Result<Vec<LeaseGrant>, StoreError> {
        Err(StoreError::Config(
            "a lease ledger lives in a Redis store, not a memory one".into(),
        ))
    }
}

impl Admin for MemoryStore {
    async fn forget(&self, policy: &Policy, identity: &Identity) -> Result<bool, StoreError> {
        Ok(MemoryStore::forget(self, policy, identity))
    }

    async fn forget_request_id(
        &self,
        policy: &Policy,
        identity: &Identity,
        id: &RequestId,
    ) -> Result<(), StoreError> {
        MemoryStore::forget_request_id(self, policy, identity, id);
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            keys: self.key_count() as u64,
            evictions: self.evictions(),
            ..StoreStats::default()
        }
    }

    fn sweep(&self) {
        MemoryStore::sweep(self);
    }
}
