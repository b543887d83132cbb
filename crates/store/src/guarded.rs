//! A store that can fail, behind a circuit breaker and the policies'
//! failure modes (crate::fallback): [`Guarded`] wraps any store of the
//! contract ([`Store`] for its decisions, with its [`Blocks`], [`Ledger`]
//! and [`Admin`]) and is itself the [`Decide`] a limiter drives. When the
//! store errs, or the open circuit skips it, each check is decided by its
//! failure mode, a `local` one on an in-process memory store.

use std::sync::Arc;

use smallvec::smallvec;
use tollgate_core::{Clock, Decision, Identity, PermitId, Policy, Released, Taken};

use crate::breaker::{Admission, BreakerConfig, CircuitBreaker, CircuitState};
use crate::check::Check;
use crate::contract::{Admin, Blocks, Decide, Ledger, Store, StoreStats};
use crate::error::StoreError;
use crate::fallback::{Decisions, GuardedCheck, GuardedDecisions, by_failure_mode};
use crate::lease::{LeaseAsk, LeaseGrant};
use crate::memory::{MemoryStore, MemoryStoreConfig};
use crate::request_id::{Replay, RequestId, Retry};

/// A shared store behind a circuit breaker with per-policy fallbacks.
pub struct Guarded<S> {
    shared: S,
    local: MemoryStore,
    breaker: CircuitBreaker,
    clock: Arc<dyn Clock>,
}

impl<S: Store> Guarded<S> {
    /// `clock` times the breaker (on its monotonic clock) and the local
    /// budgets (on its wall clock); `local_keys` bounds
    /// the local fallback's memory.
    pub fn new(
        shared: S,
        breaker: BreakerConfig,
        clock: Arc<dyn Clock>,
        local_keys: usize,
    ) -> Self {
        Self {
            shared,
            local: MemoryStore::new(
                Arc::clone(&clock),
                MemoryStoreConfig {
                    max_keys: local_keys,
                    ..MemoryStoreConfig::default()
                },
            ),
            breaker: CircuitBreaker::new(breaker),
            clock,
        }
    }

    /// The wrapped store, for what the guard does not cover (readiness, stats).
    pub fn shared(&self) -> &S {
        &self.shared
    }

    /// The breaker's state, for the circuit gauge and readiness.
    pub fn circuit(&self) -> CircuitState {
        self.breaker.state()
    }

    /// Keys held by the local fallback, for its memory gauge.
    pub fn local_keys(&self) -> usize {
        self.local.key_count()
    }

    /// Forgets the local fallback's state of `policy` for `identity`.
    pub fn forget_local(&self, policy: &Policy, identity: &Identity) -> bool {
        self.local.forget(policy, identity)
    }

    /// Forgets request id `id` recorded by the local fallback with
    /// `policy`'s state of `identity`.
    pub fn forget_local_request_id(&self, policy: &Policy, identity: &Identity, id: &RequestId) {
        self.local.forget_request_id(policy, identity, id);
    }

    /// Expires idle local-fallback keys.
    pub fn sweep(&self) {
        self.local.sweep();
    }

    /// Decides every check all-or-nothing: on the shared store when it
    /// answers, else by each check's declared failure mode. With `retry`,
    /// under a request id ([`Store::decide_once`]).
    pub async fn decide_all(
        &self,
        checks: &[GuardedCheck<'_>],
        retry: Option<Retry<'_>>,
    ) -> GuardedDecisions {
        // The breaker's durations run on the monotonic clock: a wall clock
        // stepped back does not hold the circuit open the longer.
        let admission = self.breaker.admit(self.clock.monotonic_ms());
        let mut error = None;
        let mut store_us = None;
        if admission != Admission::Skip {
            // A rejection that still stands is answered without a call, and
            // tells the breaker nothing: the store may be down meanwhile.
            if let ([one], None) = (checks, retry)
                && let Some(decision) = self.shared.known(one.check)
            {
                self.breaker.unused(admission);
                return GuardedDecisions::shared(smallvec![decision], Replay::Fresh);
            }
            let started = self.clock.monotonic_us();
            let result = match (checks, retry) {
                ([one], None) => self
                    .shared
                    .decide(one.check)
                    .await
                    .map(|d| (smallvec![d], Replay::Fresh)),
                // Inline: a store whose futures are deep boxes them where
                // they leave it (Redis does); the memory store's are ready.
                (_, None) => {
                    let plain: Vec<Check<'_>> = checks.iter().map(|g| g.check).collect();
                    self.shared
                        .decide_all(&plain)
                        .await
                        .map(|d| (Decisions::from_vec(d), Replay::Fresh))
                }
                (_, Some(retry)) => {
                    let plain: Vec<Check<'_>> = checks.iter().map(|g| g.check).collect();
                    self.shared
                        .decide_once(&plain, retry)
                        .await
                        .map(|r| (Decisions::from_vec(r.decisions), r.replay))
                }
            };
            let ended = self.clock.monotonic_us();
            store_us = Some(ended.saturating_sub(started));
            self.breaker
                .record(admission, result.is_ok(), ended / 1_000);
            match result {
                Ok((decisions, replay)) => {
                    return GuardedDecisions::shared(decisions, replay).timed(store_us);
                }
                Err(e) => error = Some(e),
            }
        }
        self.fallback(checks, retry)
            .with_error(error)
            .timed(store_us)
    }

    fn fallback(&self, checks: &[GuardedCheck<'_>], retry: Option<Retry<'_>>) -> GuardedDecisions {
        by_failure_mode(checks, retry, |local, retry| {
            self.local.decide_local(local, retry, true)
        })
    }
}

impl<S: Store> Decide for Guarded<S> {
    async fn decide(
        &self,
        checks: &[GuardedCheck<'_>],
        retry: Option<Retry<'_>>,
    ) -> GuardedDecisions {
        self.decide_all(checks, retry).await
    }

    /// The shared store frees the permit; so does the local fallback, when
    /// its `local` failure mode handed it out while the store was down. A
    /// store that fails, or that the open circuit skips, fails the release
    /// unless the local fallback freed it: the permit's lease bounds it.
    async fn release(
        &self,
        policy: &Policy,
        identity: &Identity,
        permit: PermitId,
    ) -> Result<Released, StoreError> {
        let local = self.local.release(policy, identity, permit);
        let admission = self.breaker.admit(self.clock.monotonic_ms());
        let shared = if admission == Admission::Skip {
            Err(StoreError::Unavailable(
                "the circuit is open: the store is not asked until it recovers".into(),
            ))
        } else {
            let result = self.shared.release(policy, identity, permit).await;
            self.breaker
                .record(admission, result.is_ok(), self.clock.monotonic_ms());
            result
        };
        match (shared, local) {
            (_, Released::Freed) => Ok(Released::Freed),
            (shared, _) => shared,
        }
    }
}

impl<S: Store + Blocks> Blocks for Guarded<S> {
    async fn take(&self, check: Check<'_>) -> Result<(Decision, Taken), StoreError> {
        Blocks::take(&self.shared, check).await
    }

    async fn give_back(&self, check: Check<'_>, taken: Taken) -> Result<u64, StoreError> {
        Blocks::give_back(&self.shared, check, taken).await
    }

    fn trusted(&self) -> bool {
        self.circuit() == CircuitState::Closed
    }
}

impl<S: Store + Ledger> Ledger for Guarded<S> {
    async fn lease(&self, ask: &LeaseAsk<'_>) -> Result<Vec<LeaseGrant>, StoreError> {
        Ledger::lease(&self.shared, ask).await
    }
}

impl<S: Store + Admin> Admin for Guarded<S> {
    async fn forget(&self, policy: &Policy, identity: &Identity) -> Result<bool, StoreError> {
        let local = self.forget_local(policy, identity);
        Ok(Admin::forget(&self.shared, policy, identity).await? || local)
    }

    async fn forget_request_id(
        &self,
        policy: &Policy,
        identity: &Identity,
        id: &RequestId,
    ) -> Result<(), StoreError> {
        self.forget_local_request_id(policy, identity, id);
        Admin::forget_request_id(&self.shared, policy, identity, id).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Admin::ping(&self.shared).await
    }

    fn stats(&self) -> StoreStats {
        // The shared store's keys are its own to count (Redis's); what
        // this process holds is the local fallback's.
        let shared = Admin::stats(&self.shared);
        StoreStats {
            keys: self.local_keys() as u64,
            evictions: 0,
            circuit: self.circuit().as_gauge(),
            answered_locally: shared.answered_locally,
            script_calls: shared.script_calls,
        }
    }

    fn sweep(&self) {
        Guarded::sweep(self);
    }
}
