//! The running server's state: the store, the current config (swapped
//! atomically on reload), and the metrics.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tollgate_core::{Clock, Decision};
use tollgate_store::{Check, MemoryStore, MemoryStoreConfig, RedisStore, Store, StoreError};

use crate::config::{ServeConfig, ServePolicy, StoreSettings};
use crate::metrics::{Metrics, PolicyCounters};
use crate::response::policy_item;

/// A policy ready to serve: config, counters and its precomputed
/// `RateLimit-Policy` item.
pub struct LivePolicy {
    pub serve: ServePolicy,
    pub counters: PolicyCounters,
    pub policy_item: String,
}

/// One loaded config. Replaced whole on reload; never mutated.
pub struct Runtime {
    pub config: ServeConfig,
    pub policies: Vec<LivePolicy>,
    by_name: HashMap<String, usize, foldhash::fast::RandomState>,
}

impl Runtime {
    pub fn new(config: ServeConfig, metrics: &Metrics) -> Self {
        let policies: Vec<LivePolicy> = config
            .policies
            .iter()
            .map(|serve| LivePolicy {
                counters: metrics.policy_counters(serve.policy.name()),
                policy_item: policy_item(&serve.policy),
                serve: serve.clone(),
            })
            .collect();
        let by_name = policies
            .iter()
            .enumerate()
            .map(|(i, p)| (p.serve.policy.name().to_owned(), i))
            .collect();
        Self {
            config,
            policies,
            by_name,
        }
    }

    pub fn policy(&self, name: &str) -> Option<&LivePolicy> {
        self.by_name.get(name).map(|&i| &self.policies[i])
    }
}

/// Where this server's state lives.
pub enum Backend {
    Memory(MemoryStore),
    Redis(RedisStore),
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
                .map(Backend::Redis)
                .map_err(|e| format!("cannot open the Redis store: {e}")),
        }
    }

    pub async fn decide(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        match self {
            Backend::Memory(store) => store.decide(check).await,
            Backend::Redis(store) => store.decide(check).await,
        }
    }

    pub async fn decide_all(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        match self {
            Backend::Memory(store) => store.decide_all(checks).await,
            Backend::Redis(store) => store.decide_all(checks).await,
        }
    }

    /// Periodic upkeep: expire idle keys (Redis expires its own by TTL).
    pub fn sweep(&self) {
        if let Backend::Memory(store) = self {
            store.sweep();
        }
    }

    /// Refreshes the store gauges (at scrape time).
    pub fn maintain_gauges(&self, metrics: &Metrics) {
        if let Backend::Memory(store) = self {
            metrics
                .store_keys
                .set(i64::try_from(store.key_count()).unwrap_or(i64::MAX));
            metrics
                .store_evictions
                .set(i64::try_from(store.evictions()).unwrap_or(i64::MAX));
        }
    }

    /// Whether the store can decide right now.
    pub async fn ready(&self) -> Result<(), StoreError> {
        match self {
            Backend::Memory(_) => Ok(()),
            Backend::Redis(store) => store.ping().await,
        }
    }
}

pub struct App {
    pub runtime: ArcSwap<Runtime>,
    pub store: Backend,
    pub metrics: Metrics,
    pub config_path: PathBuf,
}

impl App {
    /// Opens the store and serves `config`. `clock` is the memory store's
    /// time: the system clock in production, a manual clock in tests.
    pub async fn open(
        config: ServeConfig,
        config_path: PathBuf,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, String> {
        let metrics = Metrics::new();
        let store = Backend::open(&config.store, clock).await?;
        let runtime = Runtime::new(config, &metrics);
        Ok(Self {
            runtime: ArcSwap::from_pointee(runtime),
            store,
            metrics,
            config_path,
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
