//! One store as the limiter drives it: the memory store, a Redis store
//! behind its circuit breaker and the policies' failure modes, or (for
//! replay) Redis deciding at the limiter's clock.

use std::sync::Arc;

use tollgate_core::{Clock, Decision, Taken};
use tollgate_store::{
    BreakerConfig, Check, DecidedBy, Guarded, GuardedCheck, GuardedDecisions, LeaseAsk, LeaseGrant,
    MemoryStore, MemoryStoreConfig, RedisStore, Replay, Retry, StoreError,
};

use crate::config::StoreSettings;

/// How many keys the local fallback budgets may hold.
const LOCAL_FALLBACK_KEYS: usize = 100_000;

/// Where state lives. The memory store cannot fail; a shared store is
/// guarded by a circuit breaker and the policies' failure modes.
pub enum Backend {
    Memory(MemoryStore),
    Redis(Guarded<RedisStore>),
    /// Redis deciding at the limiter's clock instead of its own `TIME`:
    /// for replay, whose events carry their own times. Unguarded: a replay
    /// stops at a store error rather than inventing decisions.
    RedisAtClock(RedisStore),
}

impl Backend {
    /// Opens the configured store; Redis is connected (and its scripts
    /// loaded) before the server starts answering.
    pub async fn open(settings: &StoreSettings, clock: Arc<dyn Clock>) -> Result<Self, StoreError> {
        match settings {
            StoreSettings::Memory { max_keys } => Ok(Backend::Memory(MemoryStore::new(
                clock,
                MemoryStoreConfig {
                    max_keys: *max_keys,
                    ..MemoryStoreConfig::default()
                },
            ))),
            StoreSettings::Redis(config) => RedisStore::connect(config).await.map(|store| {
                Backend::Redis(Guarded::new(
                    store,
                    BreakerConfig::default(),
                    clock,
                    LOCAL_FALLBACK_KEYS,
                ))
            }),
        }
    }

    /// `clock` dates a decision only for [`Backend::RedisAtClock`]; the
    /// others keep their own time (the memory store reads the same clock).
    /// With `retry`, under a request id.
    pub(super) async fn decide_all(
        &self,
        checks: &[GuardedCheck<'_>],
        clock: &dyn Clock,
        retry: Option<Retry<'_>>,
    ) -> GuardedDecisions {
        match self {
            Backend::Memory(store) => {
                let (decisions, replay) = match (checks, retry) {
                    ([one], None) => (vec![store.decide_now(one.check)], Replay::Fresh),
                    (_, None) => {
                        let plain: Vec<_> = checks.iter().map(|g| g.check).collect();
                        (store.decide_all_now(&plain), Replay::Fresh)
                    }
                    (_, Some(retry)) => {
                        let plain: Vec<_> = checks.iter().map(|g| g.check).collect();
                        let retried = store.decide_once_now(&plain, retry);
                        (retried.decisions, retried.replay)
                    }
                };
                GuardedDecisions {
                    decisions,
                    by: DecidedBy::Shared,
                    error: None,
                    store_ms: None,
                    replay,
                }
            }
            Backend::Redis(guarded) => guarded.decide_all(checks, retry).await,
            Backend::RedisAtClock(store) => {
                let now_ms = clock.now_ms();
                // Boxed: replay's futures would otherwise widen every
                // decision's future, and the hot paths move it.
                let result = Box::pin(async {
                    let plain: Vec<_> = checks.iter().map(|g| g.check).collect();
                    match (checks, retry) {
                        ([one], None) => store
                            .decide_at(one.check, now_ms)
                            .await
                            .map(|d| (vec![d], Replay::Fresh)),
                        (_, None) => store
                            .decide_all_at(&plain, now_ms)
                            .await
                            .map(|d| (d, Replay::Fresh)),
                        (_, Some(retry)) => store
                            .decide_once_at(&plain, retry, now_ms)
                            .await
                            .map(|r| (r.decisions, r.replay)),
                    }
                })
                .await;
                let (decisions, replay, error) = match result {
                    Ok((decisions, replay)) => (decisions, replay, None),
                    Err(e) => (Vec::new(), Replay::Fresh, Some(e)),
                };
                GuardedDecisions {
                    decisions,
                    by: DecidedBy::Shared,
                    error,
                    store_ms: None,
                    replay,
                }
            }
        }
    }
}

impl Backend {
    /// Expires idle keys (Redis expires its own by TTL).
    pub(super) fn sweep(&self) {
        match self {
            Backend::Memory(store) => {
                store.sweep();
            }
            Backend::Redis(guarded) => guarded.sweep(),
            Backend::RedisAtClock(_) => {}
        }
    }

    /// (decisions answered from the rejected-until cache, script calls made
    /// for single decisions), since start: how much the cache shields the
    /// store.
    pub(super) fn shield(&self) -> (u64, u64) {
        match self {
            Backend::Redis(guarded) => (
                guarded.shared().answered_locally(),
                guarded.shared().batched_calls(),
            ),
            Backend::RedisAtClock(_) | Backend::Memory(_) => (0, 0),
        }
    }

    /// (keys held here, keys evicted since start, circuit state).
    pub(super) fn gauges(&self) -> (u64, u64, i64) {
        match self {
            Backend::Memory(store) => (store.key_count() as u64, store.evictions(), 0),
            Backend::Redis(guarded) => {
                (guarded.local_keys() as u64, 0, guarded.circuit().as_gauge())
            }
            Backend::RedisAtClock(_) => (0, 0, 0),
        }
    }

    /// Forgets `policy`'s state for `identity` (and, behind a breaker, the
    /// local fallback's): whether the store held one.
    pub(super) async fn forget(
        &self,
        policy: &tollgate_core::Policy,
        identity: &tollgate_core::Identity,
    ) -> Result<bool, StoreError> {
        match self {
            Backend::Memory(store) => Ok(store.forget(policy, identity)),
            Backend::Redis(guarded) => {
                let local = guarded.forget_local(policy, identity);
                Ok(guarded.shared().forget(policy, identity).await? || local)
            }
            Backend::RedisAtClock(store) => store.forget(policy, identity).await,
        }
    }

    /// Asks a leased policy's ledger (only a Redis store keeps one).
    pub(super) async fn lease(&self, ask: &LeaseAsk<'_>) -> Result<LeaseGrant, StoreError> {
        match self {
            Backend::Redis(guarded) => guarded.shared().lease(ask).await,
            Backend::RedisAtClock(store) => store.lease(ask).await,
            Backend::Memory(_) => Err(StoreError::Config(
                "a lease ledger lives in a Redis store, not a memory one".into(),
            )),
        }
    }

    /// Decides `check` and says where its units came from, so the unused
    /// ones can go back ([`Backend::give_back`]): a hot-lease block. The
    /// caller asks only while the store is [`trusted`](Backend::trusted);
    /// a failure is its to handle (the request decides as usual).
    pub(super) async fn take(
        &self,
        check: Check<'_>,
        clock: &dyn Clock,
    ) -> Result<(Decision, Taken), StoreError> {
        match self {
            Backend::Memory(store) => Ok(store.take(check)),
            Backend::Redis(guarded) => guarded.shared().take(check).await,
            Backend::RedisAtClock(store) => store.take_at(check, clock.now_ms()).await,
        }
    }

    /// Gives back up to `check.cost` units of a [`Backend::take`] that were
    /// never used; how many went back.
    pub(super) async fn give_back(
        &self,
        check: Check<'_>,
        taken: Taken,
        clock: &dyn Clock,
    ) -> Result<u64, StoreError> {
        match self {
            Backend::Memory(store) => Ok(store.give_back(check, taken)),
            Backend::Redis(guarded) => guarded.shared().give_back(check, taken).await,
            Backend::RedisAtClock(store) => store.give_back_at(check, taken, clock.now_ms()).await,
        }
    }

    /// Whether calls go to the store now: always for memory, while its
    /// circuit is closed for Redis (a block is not worth a timeout).
    pub(super) fn trusted(&self) -> bool {
        match self {
            Backend::Redis(guarded) => guarded.circuit() == tollgate_store::CircuitState::Closed,
            Backend::Memory(_) | Backend::RedisAtClock(_) => true,
        }
    }

    /// A bounded round trip: whether the store answers now.
    pub(super) async fn ping(&self) -> Result<(), StoreError> {
        match self {
            Backend::Memory(_) => Ok(()),
            Backend::Redis(guarded) => guarded.shared().ping().await,
            Backend::RedisAtClock(store) => store.ping().await,
        }
    }
}
