//! Everything a limiter asks of a store, as four small traits: deciding
//! (one check, all-or-nothing, once under a request id), blocks (take a
//! block of units, give back what was not spent), the lease ledger, and
//! administration (forget, ping, stats, sweep).
//!
//! Each store implements each operation once: the memory store, a Redis
//! store behind its breaker and failure modes ([`Guarded`]), and a Redis
//! store deciding on a given clock instead of its own `TIME` ([`AtClock`],
//! for replay). A new store (a remote tollgate, say) implements these four
//! traits and the limiter drives it unchanged.

use std::future::Future;
use std::sync::Arc;

use tollgate_core::{Clock, Decision, Identity, Policy, Taken};

use crate::fallback;
use crate::{
    Check, CircuitState, Guarded, GuardedCheck, GuardedDecisions, LeaseAsk, LeaseGrant,
    MemoryStore, RedisStore, Replay, RequestId, Retry, StoreError,
};

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
    /// The circuit's state as a gauge (0 closed, 1 half-open, 2 open).
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

/// A Redis store deciding at `clock`'s time instead of its own `TIME`:
/// replay, whose events carry their own times. Unguarded: a replay stops
/// at a store error rather than inventing decisions.
pub struct AtClock {
    store: RedisStore,
    clock: Arc<dyn Clock>,
}

impl AtClock {
    /// `store` deciding at `clock`'s time.
    pub fn new(store: RedisStore, clock: Arc<dyn Clock>) -> Self {
        Self { store, clock }
    }
}

/// Decisions made by the store itself, with what the request id made of
/// the call.
fn shared(result: Result<(Vec<Decision>, Replay), StoreError>) -> GuardedDecisions {
    match result {
        Ok((decisions, replay)) => GuardedDecisions::shared(decisions, replay),
        Err(e) => GuardedDecisions::unanswered(e),
    }
}

impl Decide for MemoryStore {
    async fn decide(
        &self,
        checks: &[GuardedCheck<'_>],
        retry: Option<Retry<'_>>,
    ) -> GuardedDecisions {
        let result = match (checks, retry) {
            ([one], None) => self.decide_now(one.check).map(|d| (vec![d], Replay::Fresh)),
            (_, None) => {
                let plain: Vec<_> = checks.iter().map(|g| g.check).collect();
                self.decide_all_now(&plain).map(|d| (d, Replay::Fresh))
            }
            (_, Some(retry)) => {
                let plain: Vec<_> = checks.iter().map(|g| g.check).collect();
                self.decide_once_now(&plain, retry)
                    .map(|r| (r.decisions, r.replay))
            }
        };
        match result {
            // Full (memory/full.rs): the failure modes answer, and a
            // `local` policy's identities without room share one budget.
            Err(error) => fallback::by_failure_mode(checks, retry, |local, retry| {
                self.decide_local(local, retry, false)
            })
            .with_error(Some(error)),
            ok => shared(ok),
        }
    }
}

impl Decide for Guarded<RedisStore> {
    async fn decide(
        &self,
        checks: &[GuardedCheck<'_>],
        retry: Option<Retry<'_>>,
    ) -> GuardedDecisions {
        self.decide_all(checks, retry).await
    }
}

impl Decide for AtClock {
    async fn decide(
        &self,
        checks: &[GuardedCheck<'_>],
        retry: Option<Retry<'_>>,
    ) -> GuardedDecisions {
        let now_ms = self.clock.now_ms();
        // Boxed: replay's futures would otherwise widen every decision's
        // future, and the hot paths move it.
        let result = Box::pin(async {
            let plain: Vec<_> = checks.iter().map(|g| g.check).collect();
            match (checks, retry) {
                ([one], None) => self
                    .store
                    .decide_at(one.check, now_ms)
                    .await
                    .map(|d| (vec![d], Replay::Fresh)),
                (_, None) => self
                    .store
                    .decide_all_at(&plain, now_ms)
                    .await
                    .map(|d| (d, Replay::Fresh)),
                (_, Some(retry)) => self
                    .store
                    .decide_once_at(&plain, retry, now_ms)
                    .await
                    .map(|r| (r.decisions, r.replay)),
            }
        })
        .await;
        shared(result)
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

impl Blocks for Guarded<RedisStore> {
    async fn take(&self, check: Check<'_>) -> Result<(Decision, Taken), StoreError> {
        self.shared().take(check).await
    }

    async fn give_back(&self, check: Check<'_>, taken: Taken) -> Result<u64, StoreError> {
        self.shared().give_back(check, taken).await
    }

    fn trusted(&self) -> bool {
        self.circuit() == CircuitState::Closed
    }
}

impl Blocks for AtClock {
    async fn take(&self, check: Check<'_>) -> Result<(Decision, Taken), StoreError> {
        self.store.take_at(check, self.clock.now_ms()).await
    }

    async fn give_back(&self, check: Check<'_>, taken: Taken) -> Result<u64, StoreError> {
        self.store
            .give_back_at(check, taken, self.clock.now_ms())
            .await
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

impl Ledger for Guarded<RedisStore> {
    async fn lease(&self, ask: &LeaseAsk<'_>) -> Result<Vec<LeaseGrant>, StoreError> {
        self.shared().lease(ask).await
    }
}

impl Ledger for AtClock {
    async fn lease(&self, ask: &LeaseAsk<'_>) -> Result<Vec<LeaseGrant>, StoreError> {
        self.store.lease(ask).await
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

impl Admin for Guarded<RedisStore> {
    async fn forget(&self, policy: &Policy, identity: &Identity) -> Result<bool, StoreError> {
        let local = self.forget_local(policy, identity);
        Ok(self.shared().forget(policy, identity).await? || local)
    }

    async fn forget_request_id(
        &self,
        policy: &Policy,
        identity: &Identity,
        id: &RequestId,
    ) -> Result<(), StoreError> {
        self.forget_local_request_id(policy, identity, id);
        self.shared().forget_request_id(policy, identity, id).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.shared().ping().await
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            keys: self.local_keys() as u64,
            evictions: 0,
            circuit: self.circuit().as_gauge(),
            answered_locally: self.shared().answered_locally(),
            script_calls: self.shared().script_calls(),
        }
    }

    fn sweep(&self) {
        Guarded::sweep(self);
    }
}

impl Admin for AtClock {
    async fn forget(&self, policy: &Policy, identity: &Identity) -> Result<bool, StoreError> {
        self.store.forget(policy, identity).await
    }

    async fn forget_request_id(
        &self,
        policy: &Policy,
        identity: &Identity,
        id: &RequestId,
    ) -> Result<(), StoreError> {
        self.store.forget_request_id(policy, identity, id).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.store.ping().await
    }

    fn stats(&self) -> StoreStats {
        StoreStats::default()
    }

    fn sweep(&self) {}
}
