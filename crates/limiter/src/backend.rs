//! One store as the limiter drives it: the memory store, a Redis store
//! behind its circuit breaker and the policies' failure modes, or (for
//! replay) Redis deciding at the limiter's clock. Every operation is the
//! store's own, through the store contract's traits
//! ([`tollgate_store::Decide`], [`Blocks`], [`Ledger`], [`Admin`]); this
//! enum only picks which store, so each operation's future stays a
//! concrete type (no box on the hot path).

use std::sync::Arc;

use tollgate_core::{Clock, Decision, Identity, PermitId, Policy, Released, Taken};
use tollgate_store::{
    Admin, Blocks, Check, Decide, GuardedCheck, GuardedDecisions, LeaseAsk, LeaseGrant, Ledger,
    MemoryStore, MemoryStoreConfig, RequestId, Retry, StoreError, StoreStats,
};
#[cfg(feature = "redis")]
use tollgate_store::{AtClock, BreakerConfig, Guarded, RedisStore};

/// How many keys the local fallback budgets may hold.
#[cfg(feature = "redis")]
const LOCAL_FALLBACK_KEYS: usize = 100_000;

/// Where state lives. The memory store cannot fail; a shared store is
/// guarded by a circuit breaker and the policies' failure modes.
pub enum Backend {
    /// The embedded store: one process decides alone.
    Memory(MemoryStore),
    /// Redis behind its breaker and the failure modes.
    #[cfg(feature = "redis")]
    Redis(Guarded<RedisStore>),
    /// Redis deciding at the limiter's clock instead of its own `TIME`
    /// (replay). Unguarded: a replay stops at a store error.
    #[cfg(feature = "redis")]
    RedisAtClock(AtClock),
}

/// Calls the same operation on whichever store this is.
macro_rules! each {
    ($backend:expr, $store:ident => $call:expr) => {
        match $backend {
            Backend::Memory($store) => $call,
            #[cfg(feature = "redis")]
            Backend::Redis($store) => $call,
            #[cfg(feature = "redis")]
            Backend::RedisAtClock($store) => $call,
        }
    };
}

impl Backend {
    /// The embedded store of at most `max_keys` keys, on `clock`.
    pub fn memory(max_keys: usize, clock: Arc<dyn Clock>) -> Self {
        let config = MemoryStoreConfig {
            max_keys,
            ..MemoryStoreConfig::default()
        };
        Self::memory_with(config, clock)
    }

    /// The embedded store sized by `config` (keys and lock shards), on
    /// `clock`.
    pub fn memory_with(config: MemoryStoreConfig, clock: Arc<dyn Clock>) -> Self {
        Backend::Memory(MemoryStore::new(clock, config))
    }

    /// A connected Redis store behind the default breaker, with local
    /// fallback budgets timed by `clock`.
    #[cfg(feature = "redis")]
    pub fn redis(store: RedisStore, clock: Arc<dyn Clock>) -> Self {
        Backend::Redis(Guarded::new(
            store,
            BreakerConfig::default(),
            clock,
            LOCAL_FALLBACK_KEYS,
        ))
    }

    /// A Redis store deciding at `clock`'s time (replay).
    #[cfg(feature = "redis")]
    pub fn redis_at_clock(store: RedisStore, clock: Arc<dyn Clock>) -> Self {
        Backend::RedisAtClock(AtClock::new(store, clock))
    }

    /// Whether the store is shared (Redis): it can fail, and has a
    /// circuit, errors and call latencies to report.
    pub fn is_shared(&self) -> bool {
        !matches!(self, Backend::Memory(_))
    }

    /// Decides `checks` all-or-nothing, under `retry` when given.
    pub(crate) async fn decide(
        &self,
        checks: &[GuardedCheck<'_>],
        retry: Option<Retry<'_>>,
    ) -> GuardedDecisions {
        each!(self, s => Decide::decide(s, checks, retry).await)
    }

    /// Frees a held permit ([`Decide::release`]).
    pub(crate) async fn release(
        &self,
        policy: &Policy,
        identity: &Identity,
        permit: PermitId,
    ) -> Result<Released, StoreError> {
        each!(self, s => Decide::release(s, policy, identity, permit).await)
    }

    /// Takes a block ([`Blocks::take`]).
    pub(crate) async fn take(&self, check: Check<'_>) -> Result<(Decision, Taken), StoreError> {
        each!(self, s => Blocks::take(s, check).await)
    }

    /// Gives back what a block left unspent ([`Blocks::give_back`]).
    pub(crate) async fn give_back(
        &self,
        check: Check<'_>,
        taken: Taken,
    ) -> Result<u64, StoreError> {
        each!(self, s => Blocks::give_back(s, check, taken).await)
    }

    /// Whether blocks are worth asking for now.
    pub(crate) fn trusted(&self) -> bool {
        each!(self, s => Blocks::trusted(s))
    }

    /// One lease renewal ([`Ledger::lease`]).
    pub(crate) async fn lease(&self, ask: &LeaseAsk<'_>) -> Result<Vec<LeaseGrant>, StoreError> {
        each!(self, s => Ledger::lease(s, ask).await)
    }

    /// Forgets a state ([`Admin::forget`]).
    pub(crate) async fn forget(
        &self,
        policy: &Policy,
        identity: &Identity,
    ) -> Result<bool, StoreError> {
        each!(self, s => Admin::forget(s, policy, identity).await)
    }

    /// Forgets one request id ([`Admin::forget_request_id`]).
    pub(crate) async fn forget_request_id(
        &self,
        policy: &Policy,
        identity: &Identity,
        id: &RequestId,
    ) -> Result<(), StoreError> {
        each!(self, s => Admin::forget_request_id(s, policy, identity, id).await)
    }

    /// Whether the store answers now ([`Admin::ping`]).
    pub(crate) async fn ping(&self) -> Result<(), StoreError> {
        each!(self, s => Admin::ping(s).await)
    }

    /// What the store holds and did ([`Admin::stats`]).
    pub(crate) fn stats(&self) -> StoreStats {
        each!(self, s => Admin::stats(s))
    }

    /// Expires idle keys held here ([`Admin::sweep`]).
    pub(crate) fn sweep(&self) {
        each!(self, s => Admin::sweep(s))
    }
}
