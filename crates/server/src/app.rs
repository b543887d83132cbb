//! The running server's state: the store, the current config (swapped
//! atomically on reload), and the metrics.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tollgate_core::{Clock, Policy};
use tollgate_store::{
    BreakerConfig, DecisionPath, Guarded, GuardedCheck, GuardedDecisions, MemoryStore,
    MemoryStoreConfig, OnStoreFailure, RedisStore, StoreError, local_policy,
};

use crate::config::{ServeConfig, ServePolicy, StoreSettings};
use crate::metrics::{Metrics, PolicyCounters};
use crate::response::policy_item;

/// A policy ready to serve: config, counters and its precomputed
/// `RateLimit-Policy` item.
pub struct LivePolicy {
    pub serve: ServePolicy,
    pub counters: PolicyCounters,
    pub policy_item: String,
    /// The policy scaled to its local share, for `on_store_failure: local`.
    pub local: Option<Policy>,
}

impl LivePolicy {
    /// The check as the guarded store takes it.
    pub fn guarded<'a>(
        &'a self,
        identity: &'a tollgate_core::Identity,
        cost: u64,
    ) -> GuardedCheck<'a> {
        GuardedCheck {
            check: tollgate_store::Check {
                policy: &self.serve.policy,
                identity,
                cost,
            },
            on_failure: self.serve.on_store_failure,
            local_policy: self.local.as_ref(),
        }
    }
}

/// One loaded config. Replaced whole on reload; never mutated.
pub struct Runtime {
    pub config: ServeConfig,
    pub policies: Vec<LivePolicy>,
    by_name: HashMap<String, usize, foldhash::fast::RandomState>,
    /// envoyproxy/ratelimit descriptor rules, for the gRPC service.
    pub envoy: crate::rls::LiveRules,
}

impl Runtime {
    pub fn new(config: ServeConfig, metrics: &Metrics) -> Self {
        let policies: Vec<LivePolicy> = config
            .policies
            .iter()
            .map(|serve| LivePolicy {
                counters: metrics.policy_counters(serve.policy.name()),
                local: match serve.on_store_failure {
                    OnStoreFailure::Local { share_percent } => {
                        Some(local_policy(&serve.policy, share_percent))
                    }
                    _ => None,
                },
                policy_item: policy_item(&serve.policy),
                serve: serve.clone(),
            })
            .collect();
        let by_name = policies
            .iter()
            .enumerate()
            .map(|(i, p)| (p.serve.policy.name().to_owned(), i))
            .collect();
        let envoy = crate::rls::LiveRules::new(Arc::clone(&config.envoy), metrics);
        Self {
            config,
            policies,
            by_name,
            envoy,
        }
    }

    pub fn policy(&self, name: &str) -> Option<&LivePolicy> {
        self.by_name.get(name).map(|&i| &self.policies[i])
    }
}

/// How many keys the local fallback budgets may hold.
const LOCAL_FALLBACK_KEYS: usize = 100_000;

/// Where this server's state lives. The memory store cannot fail; a shared
/// store is guarded by a circuit breaker and the policies' failure modes.
pub enum Backend {
    Memory(MemoryStore),
    Redis(Guarded<RedisStore>),
}

impl Backend {
    /// Opens the configured store; Redis is connected (and its scripts
    /// loaded) before the server starts answering.
    pub async fn open(settings: &StoreSettings, clock: Arc<dyn Clock>) -> Result<Self, String> {
        match settings {
            StoreSettings::Memory { max_keys } => Ok(Backend::Memory(MemoryStore::new(
                clock,
                MemoryStoreConfig {
                    max_keys: *max_keys,
                    ..MemoryStoreConfig::default()
                },
            ))),
            StoreSettings::Redis(config) => RedisStore::connect(config)
                .await
                .map(|store| {
                    Backend::Redis(Guarded::new(
                        store,
                        BreakerConfig::default(),
                        clock,
                        LOCAL_FALLBACK_KEYS,
                    ))
                })
                .map_err(|e| format!("cannot open the Redis store: {e}")),
        }
    }

    /// Decides every check all-or-nothing, on the shared store when it can.
    pub async fn decide_all(&self, checks: &[GuardedCheck<'_>]) -> GuardedDecisions {
        match self {
            Backend::Memory(store) => GuardedDecisions {
                decisions: match checks {
                    [one] => vec![store.decide_now(one.check)],
                    _ => {
                        let plain: Vec<_> = checks.iter().map(|g| g.check).collect();
                        store.decide_all_now(&plain)
                    }
                },
                path: DecisionPath::Shared,
                error: None,
                store_ms: None,
            },
            Backend::Redis(guarded) => guarded.decide_all(checks).await,
        }
    }

    /// Periodic upkeep: expire idle keys (Redis expires its own by TTL).
    pub fn sweep(&self) {
        match self {
            Backend::Memory(store) => {
                store.sweep();
            }
            Backend::Redis(guarded) => guarded.sweep(),
        }
    }

    /// Refreshes the store gauges (at scrape time).
    pub fn maintain_gauges(&self, metrics: &Metrics) {
        match self {
            Backend::Memory(store) => {
                metrics
                    .store_keys
                    .set(i64::try_from(store.key_count()).unwrap_or(i64::MAX));
                metrics
                    .store_evictions
                    .set(i64::try_from(store.evictions()).unwrap_or(i64::MAX));
            }
            Backend::Redis(guarded) => {
                metrics.circuit_state.set(guarded.circuit().as_gauge());
                metrics
                    .store_keys
                    .set(i64::try_from(guarded.local_keys()).unwrap_or(i64::MAX));
            }
        }
    }

    /// Whether the store can decide right now.
    pub async fn ready(&self) -> Result<(), StoreError> {
        match self {
            Backend::Memory(_) => Ok(()),
            Backend::Redis(guarded) => guarded.shared().ping().await,
        }
    }
}

/// Lets one log line through per interval; the rest are only counted.
#[derive(Default)]
pub struct LogLimiter {
    last: std::sync::Mutex<Option<std::time::Instant>>,
}

impl LogLimiter {
    pub fn should_log(&self) -> bool {
        let Ok(mut last) = self.last.lock() else {
            return false;
        };
        let now = std::time::Instant::now();
        let due = last.is_none_or(|t| now.duration_since(t).as_secs() >= 10);
        if due {
            *last = Some(now);
        }
        due
    }
}

pub struct App {
    /// Rate-limits the warning logged for degraded decisions.
    pub degraded_log: LogLimiter,
    pub runtime: ArcSwap<Runtime>,
    pub store: Backend,
    pub metrics: Metrics,
    pub config_path: PathBuf,
    /// The memory store's time, also dating the hot identities' windows.
    pub clock: Arc<dyn Clock>,
}

impl App {
    /// Opens the store and serves `config`. `clock` is the memory store's
    /// time: the system clock in production, a manual clock in tests.
    pub async fn open(
        config: ServeConfig,
        config_path: PathBuf,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, String> {
        let metrics = Metrics::new(Arc::clone(&clock));
        let store = Backend::open(&config.store, Arc::clone(&clock)).await?;
        let runtime = Runtime::new(config, &metrics);
        Ok(Self {
            degraded_log: LogLimiter::default(),
            runtime: ArcSwap::from_pointee(runtime),
            store,
            metrics,
            config_path,
            clock,
        })
    }

    /// Loads the config file again. A valid config replaces the old one
    /// atomically (buckets carry over: state is keyed by policy name and
    /// records its scale); an invalid one is refused and the old one stays.
    pub fn reload(&self) -> Result<(), String> {
        let result = ServeConfig::load(&self.config_path).and_then(|config| {
            let current = self.runtime.load();
            if config.store_hash != current.config.store_hash {
                return Err("the store section changed; restart tollgate to apply it".into());
            }
            if config.hash == current.config.hash {
                return Ok(false);
            }
            self.runtime
                .store(Arc::new(Runtime::new(config, &self.metrics)));
            Ok(true)
        });
        match result {
            Ok(changed) => {
                if changed {
                    self.metrics.reloads.inc();
                    tracing::info!(config = %self.config_path.display(), hash = %self.runtime.load().config.hash, "config reloaded");
                }
                Ok(())
            }
            Err(reason) => {
                self.metrics.reload_failures.inc();
                tracing::error!(config = %self.config_path.display(), %reason, "config reload refused; the previous config keeps serving");
                Err(reason)
            }
        }
    }
}
