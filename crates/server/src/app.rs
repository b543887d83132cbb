//! The running server's state, shared by every protocol adapter: the live
//! config (swapped atomically on reload), the limiter every decision goes
//! through, and the metrics.

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tollgate_core::Clock;

use crate::config::{ConfigLoadError, ServeConfig};
use crate::limiter::{Backend, Limiter};
use crate::live::LiveConfig;
use crate::metrics::Metrics;
use tollgate_store::StoreError;

pub struct App {
    pub live: ArcSwap<LiveConfig>,
    pub limiter: Limiter,
    pub metrics: Arc<Metrics>,
    pub config_path: PathBuf,
    /// `--region`, which every reload must load the config in too.
    pub region_flag: Option<String>,
}

/// Why a reload was refused; the previous config keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Invalid(#[from] ConfigLoadError),
    #[error("the store section changed; restart tollgate to apply it")]
    StoreChanged,
}

impl App {
    /// Opens the store and serves `config`. `clock` is the limiter's time:
    /// the system clock in production, a manual clock in tests.
    pub async fn open(
        config: ServeConfig,
        config_path: PathBuf,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StoreError> {
        let metrics = Arc::new(Metrics::new(Arc::clone(&clock)));
        let mut backends = Vec::with_capacity(config.stores.list.len());
        for (_, settings) in &config.stores.list {
            backends.push(Backend::open(settings, Arc::clone(&clock)).await?);
        }
        let live = LiveConfig::new(config, &metrics);
        Ok(Self {
            live: ArcSwap::from_pointee(live),
            limiter: Limiter::new(backends, Arc::clone(&metrics), clock),
            metrics,
            config_path,
            region_flag: None,
        })
    }

    /// This instance's region as `--region` gave it (reloads keep it).
    pub fn in_region(mut self, region: Option<String>) -> Self {
        self.region_flag = region;
        self
    }

    /// Loads the config file again. A valid config replaces the old one
    /// atomically (buckets carry over: state is keyed by policy name and
    /// records its scale); an invalid one is refused and the old one stays.
    pub fn reload(&self) -> Result<(), ReloadError> {
        let result = ServeConfig::load_in_region(&self.config_path, self.region_flag.as_deref())
            .map_err(ReloadError::from)
            .and_then(|config| {
                let current = self.live.load();
                if config.store_hash != current.config.store_hash {
                    return Err(ReloadError::StoreChanged);
                }
                if config.hash == current.config.hash {
                    return Ok(false);
                }
                for warning in config.warnings() {
                    tracing::warn!("{warning}");
                }
                self.live
                    .store(Arc::new(LiveConfig::new(config, &self.metrics)));
                Ok(true)
            });
        match result {
            Ok(changed) => {
                if changed {
                    self.metrics.reloads.inc();
                    tracing::info!(config = %self.config_path.display(), hash = %self.live.load().config.hash, "config reloaded");
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
