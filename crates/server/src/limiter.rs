//! The decision seam: every protocol's checks are decided here, and only
//! here. A protocol adapter (HTTP `/v1/check`, forward auth, Envoy's RLS,
//! replay) turns its input into [`Check`]s and the [`Decided`] back into its
//! own answer; the limiter calls the store under each policy's failure mode
//! and records what happened — store latency, store errors by kind,
//! degraded decisions, each policy's outcomes, hot identities — so every
//! decision lands in the same metrics whatever door it came in by.
//!
//! A new scope (a policy choosing its store: region, split, leased) belongs
//! here, beside [`Backend`]; a new protocol is a module beside `http` and
//! `rls` that calls [`Limiter::decide`].

use std::sync::Arc;
use std::sync::Mutex;

use tollgate_core::{Clock, Identity, Policy};
use tollgate_store::{
    BreakerConfig, DecidedBy, Guarded, GuardedCheck, GuardedDecisions, MemoryStore,
    MemoryStoreConfig, OnStoreFailure, RedisStore, StoreError,
};

use crate::config::StoreSettings;
use crate::live::LivePolicy;
use crate::metrics::{DegradedLabels, ErrorLabels, Metrics, PolicyCounters};
use crate::stopwatch::Stopwatch;

/// One check as an adapter hands it to the limiter.
#[derive(Clone, Copy)]
pub struct Check<'a> {
    pub policy: &'a Policy,
    pub identity: &'a Identity,
    pub cost: u64,
    /// What the policy does when the shared store cannot decide.
    pub on_failure: OnStoreFailure,
    /// For `local`: the policy scaled to its share.
    pub local: Option<&'a Policy>,
    /// Where the outcome is counted (`tollgate_decisions_total{policy}`,
    /// hot identities); `None` for a decision that is not the policy's
    /// verdict (an RLS limit in shadow mode, a peek made for another limit).
    pub counters: Option<&'a PolicyCounters>,
}

impl<'a> Check<'a> {
    /// A configured policy's check, counted as that policy's.
    pub fn of(live: &'a LivePolicy, identity: &'a Identity, cost: u64) -> Self {
        Self {
            policy: &live.serve.policy,
            identity,
            cost,
            on_failure: live.serve.on_store_failure,
            local: live.local.as_ref(),
            counters: Some(&live.counters),
        }
    }

    fn guarded(&self) -> GuardedCheck<'a> {
        GuardedCheck {
            check: tollgate_store::Check {
                policy: self.policy,
                identity: self.identity,
                cost: self.cost,
            },
            on_failure: self.on_failure,
            local_policy: self.local,
        }
    }
}

/// The decisions of one request (in the checks' order, all or nothing),
/// the path that made them, and why the shared store did not, if it did not.
pub type Decided = GuardedDecisions;

/// How often a degraded decision may be logged (the rest are counted).
const DEGRADED_LOG_EVERY_MS: u64 = 10_000;
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
    async fn decide_all(&self, checks: &[GuardedCheck<'_>], clock: &dyn Clock) -> GuardedDecisions {
        match self {
            Backend::Memory(store) => GuardedDecisions {
                decisions: match checks {
                    [one] => vec![store.decide_now(one.check)],
                    _ => {
                        let plain: Vec<_> = checks.iter().map(|g| g.check).collect();
                        store.decide_all_now(&plain)
                    }
                },
                by: DecidedBy::Shared,
                error: None,
                store_ms: None,
            },
            Backend::Redis(guarded) => guarded.decide_all(checks).await,
            Backend::RedisAtClock(store) => {
                let now_ms = clock.now_ms();
                // Boxed: replay's futures would otherwise widen every
                // decision's future, and the hot paths move it.
                let result = Box::pin(async {
                    match checks {
                        [one] => store.decide_at(one.check, now_ms).await.map(|d| vec![d]),
                        _ => {
                            let plain: Vec<_> = checks.iter().map(|g| g.check).collect();
                            store.decide_all_at(&plain, now_ms).await
                        }
                    }
                })
                .await;
                let (decisions, error) = match result {
                    Ok(decisions) => (decisions, None),
                    Err(e) => (Vec::new(), Some(e)),
                };
                GuardedDecisions {
                    decisions,
                    by: DecidedBy::Shared,
                    error,
                    store_ms: None,
                }
            }
        }
    }
}

/// Lets one log line through per interval of the limiter's clock; the rest
/// are only counted.
#[derive(Default)]
struct LogLimiter {
    last_ms: Mutex<Option<u64>>,
}

impl LogLimiter {
    fn should_log(&self, now_ms: u64) -> bool {
        let Ok(mut last) = self.last_ms.lock() else {
            return false;
        };
        let due = last.is_none_or(|t| now_ms.saturating_sub(t) >= DEGRADED_LOG_EVERY_MS);
        if due {
            *last = Some(now_ms);
        }
        due
    }
}

/// The stores, their failure modes, the clock and the decision metrics.
pub struct Limiter {
    backend: Backend,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    degraded_log: LogLimiter,
}

impl Limiter {
    pub fn new(backend: Backend, metrics: Arc<Metrics>, clock: Arc<dyn Clock>) -> Self {
        Self {
            backend,
            metrics,
            clock,
            degraded_log: LogLimiter::default(),
        }
    }

    /// Decides `checks` all or nothing, and records what the store did and
    /// what each counted policy decided.
    pub async fn decide(&self, checks: &[Check<'_>]) -> Decided {
        let stopwatch = Stopwatch::start();
        let clock = self.clock.as_ref();
        let decided = match checks {
            [one] => self.backend.decide_all(&[one.guarded()], clock).await,
            _ => {
                let guarded: Vec<GuardedCheck<'_>> = checks.iter().map(Check::guarded).collect();
                self.backend.decide_all(&guarded, clock).await
            }
        };
        self.observe_store(&decided);
        for (check, decision) in checks.iter().zip(&decided.decisions) {
            let Some(counters) = check.counters else {
                continue;
            };
            if decision.allowed {
                counters.allowed.inc();
            } else {
                counters.rejected.inc();
                self.metrics
                    .hot
                    .record(check.policy.name(), check.identity, self.clock.now_ms());
            }
        }
        self.metrics.decision_seconds.observe(stopwatch.seconds());
        decided
    }

    /// The store's latency, its errors, and decisions made without it.
    fn observe_store(&self, decided: &Decided) {
        if let Some(ms) = decided.store_ms {
            self.metrics.store_seconds.observe(ms as f64 / 1000.0);
        }
        if let Some(error) = &decided.error {
            self.metrics
                .store_errors
                .get_or_create(&ErrorLabels {
                    kind: error_kind(error),
                })
                .inc();
        }
        if decided.by.is_degraded() {
            let allowed = decided.decisions.iter().all(|d| d.allowed);
            self.metrics
                .degraded
                .get_or_create(&DegradedLabels {
                    path: decided.by.name(),
                    outcome: if allowed { "allowed" } else { "rejected" },
                })
                .inc();
            if self.degraded_log.should_log(self.clock.now_ms()) {
                tracing::warn!(
                    path = decided.by.name(),
                    error = decided.error.as_ref().map(ToString::to_string),
                    "deciding without the shared store (logged at most every {} s)",
                    DEGRADED_LOG_EVERY_MS / 1000
                );
            }
        }
    }

    /// The clock decisions are dated by.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Periodic upkeep: expire idle keys (Redis expires its own by TTL).
    pub fn sweep(&self) {
        match &self.backend {
            Backend::Memory(store) => {
                store.sweep();
            }
            Backend::Redis(guarded) => guarded.sweep(),
            Backend::RedisAtClock(_) => {}
        }
    }

    /// Refreshes the store gauges (at scrape time).
    pub fn maintain_gauges(&self) {
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        match &self.backend {
            Backend::Memory(store) => {
                self.metrics.store_keys.set(gauge(store.key_count() as u64));
                self.metrics.store_evictions.set(gauge(store.evictions()));
            }
            Backend::Redis(guarded) => {
                self.metrics.circuit_state.set(guarded.circuit().as_gauge());
                self.metrics
                    .store_keys
                    .set(gauge(guarded.local_keys() as u64));
            }
            Backend::RedisAtClock(_) => {}
        }
    }

    /// Whether the store answers right now (a bounded ping), recorded in
    /// `tollgate_store_up`.
    pub async fn store_answers(&self) -> Result<(), StoreError> {
        let answered = match &self.backend {
            Backend::Memory(_) => Ok(()),
            Backend::Redis(guarded) => guarded.shared().ping().await,
            Backend::RedisAtClock(store) => store.ping().await,
        };
        self.metrics.store_up.set(i64::from(answered.is_ok()));
        answered
    }
}

/// A store error's kind, the label of `tollgate_store_errors_total`.
fn error_kind(error: &StoreError) -> &'static str {
    match error {
        StoreError::Timeout { .. } => "timeout",
        StoreError::Unavailable(_) => "unavailable",
        StoreError::Protocol(_) => "protocol",
        StoreError::Config(_) => "config",
    }
}
