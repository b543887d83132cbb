//! A Redis store deciding at a given clock's time instead of its own
//! `TIME`: replay, whose events carry their own times. Unguarded: a replay
//! stops at a store error rather than inventing decisions.

use std::future::Future;
use std::sync::Arc;

use tollgate_core::{Clock, Decision, Identity, PermitId, Policy, Released, Taken};

use super::RedisStore;
use crate::check::Check;
use crate::contract::{self, Admin, Blocks, Decide, Ledger, Store, StoreStats};
use crate::error::StoreError;
use crate::fallback::{self, GuardedCheck, GuardedDecisions};
use crate::lease::{LeaseAsk, LeaseGrant};
use crate::request_id::{RequestId, Retried, Retry};

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

/// Decides at `clock`'s time, read once a call.
impl Store for AtClock {
    fn decide(
        &self,
        check: Check<'_>,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        self.store.decide_at(check, self.clock.now_ms())
    }

    fn decide_all(
        &self,
        checks: &[Check<'_>],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        self.store.decide_all_at(checks, self.clock.now_ms())
    }

    fn decide_once(
        &self,
        checks: &[Check<'_>],
        retry: Retry<'_>,
    ) -> impl Future<Output = Result<Retried, StoreError>> + Send {
        self.store
            .decide_once_at(checks, retry, self.clock.now_ms())
    }

    fn release(
        &self,
        policy: &Policy,
        identity: &Identity,
        permit: PermitId,
    ) -> impl Future<Output = Result<Released, StoreError>> + Send {
        self.store
            .release_at(policy, identity, permit, self.clock.now_ms())
    }
}

impl Decide for AtClock {
    async fn decide(
        &self,
        checks: &[GuardedCheck<'_>],
        retry: Option<Retry<'_>>,
    ) -> GuardedDecisions {
        // Boxed: replay's futures would otherwise widen every decision's
        // future, and the hot paths move it.
        fallback::shared(Box::pin(contract::decide_checks(self, checks, retry)).await)
    }

    async fn release(
        &self,
        policy: &Policy,
        identity: &Identity,
        permit: PermitId,
    ) -> Result<Released, StoreError> {
        Box::pin(Store::release(self, policy, identity, permit)).await
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

impl Ledger for AtClock {
    async fn lease(&self, ask: &LeaseAsk<'_>) -> Result<Vec<LeaseGrant>, StoreError> {
        self.store.lease(ask).await
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
