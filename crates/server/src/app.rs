//! The running server's state, shared by every protocol adapter: the live
//! config (swapped atomically on reload), the limiter every decision goes
//! through, and the metrics.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use tollgate_core::{Clock, Policy};

use crate::config::{ConfigLoadError, Overrides, ServeConfig, StoreSettings};
use crate::connections::{ConnectionGate, ConnectionLimits};
use crate::limiter::{Backend, Limiter, RedisStore, StoreError, StoreName};
use crate::live::LiveConfig;
use crate::metrics::{Metrics, PeerLabels};
use crate::trace::open_trace;
use tollgate_config::PolicyChanges;
use tollgate_store::LIVE_REFRESH_MS;

/// The state every protocol adapter shares while the server runs.
pub struct App {
    /// The current config, swapped whole on a successful reload.
    pub live: ArcSwap<LiveConfig>,
    /// The limiter every decision goes through, with the stores it opened
    /// (shared with its upkeep's tasks).
    pub limiter: Arc<Limiter>,
    /// The server's metrics, as `/metrics` exposes them.
    pub metrics: Arc<Metrics>,
    /// The open connections of every listener, bounded by the start
    /// config's `server` settings.
    pub(crate) connections: Arc<ConnectionGate>,
    /// The config file, read again on every reload.
    pub config_path: PathBuf,
    /// `--region` and `--store` (or their variables), which every reload
    /// must load the config with too.
    pub overrides: Overrides,
    /// The file and the reason of the last refused reload: SIGHUP and the
    /// file watcher both reload, and one bad edit is one failure.
    last_refused: Mutex<Option<blake3::Hash>>,
    /// The Redis stores whose prefix this server marks as live while it
    /// serves ([`App::keep_live_marks`]), so no replay writes there.
    live_marks: Vec<RedisStore>,
}

/// Why a reload was refused; the previous config keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The new config could not be loaded or is invalid.
    #[error(transparent)]
    Invalid(#[from] ConfigLoadError),
    /// The stores or the region: the limiter holds the stores it opened,
    /// and the policies' stores depend on both, so nothing of it applies.
    #[error("{0} changed and needs a restart; nothing of the new config was applied")]
    NeedsRestart(&'static str),
}

/// What a valid reload did.
enum Applied {
    /// The same config: nothing to do, nothing to count.
    Unchanged,
    /// Swapped in, changing `policies`; these start-only settings kept
    /// their running values.
    Reloaded {
        policies: PolicyChanges,
        needs_restart: Vec<&'static str>,
    },
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
        let mut live_marks = Vec::new();
        for (index, (role, settings)) in config.stores.list.iter().enumerate() {
            let policies: Vec<&Policy> = config
                .policies
                .iter()
                .filter(|p| p.store == index)
                .map(|p| &p.policy)
                .collect();
            let name = StoreName {
                role: (*role).to_owned(),
                region: (*role == "regional")
                    .then(|| config.deployment.region.clone())
                    .flatten(),
                what: settings.describe(),
            };
            let (backend, redis) = open_store(settings, &policies, Arc::clone(&clock)).await?;
            backends.push((name, backend));
            live_marks.extend(redis);
        }
        // One series a statement: `get_or_create`'s guard holds the
        // family's lock until the statement ends.
        let open_proxy = metrics
            .open_connections
            .get_or_create(&PeerLabels { peer: "proxy" })
            .clone();
        let open_other = metrics
            .open_connections
            .get_or_create(&PeerLabels { peer: "other" })
            .clone();
        let connections = Arc::new(ConnectionGate::new(
            ConnectionLimits::of(&config.server),
            open_proxy,
            open_other,
        ));
        let live = LiveConfig::new(config, &metrics, None);
        let limiter = Arc::new(Limiter::named(
            backends,
            Arc::clone(&metrics.limiter),
            clock,
        ));
        limiter.set_decision_sampling(live.config.decision_sampling.clone());
        if let Some(trace) = &live.config.server.trace {
            let dir = config_path.parent().unwrap_or(Path::new("."));
            let sink = open_trace(
                trace,
                dir,
                live.config.trace_identity.clone(),
                metrics.trace_dropped.clone(),
            )
            .map_err(|e| {
                StoreError::Config(format!(
                    "server.trace: cannot open {} for appending: {e}",
                    trace.path.display()
                ))
            })?;
            limiter.set_trace(sink);
        }
        Ok(Self {
            live: ArcSwap::from_pointee(live),
            limiter,
            metrics,
            connections,
            config_path,
            overrides: Overrides::default(),
            last_refused: Mutex::new(None),
            live_marks,
        })
    }

    /// Keeps every Redis store's prefix marked as a serving tollgate's
    /// (`<prefix>:live`, its TTL refreshed every [`LIVE_REFRESH_MS`]), so a
    /// replay refuses to write there; a refresh is bounded by the store's
    /// timeout, and one that fails is tried again at the next turn.
    pub async fn keep_live_marks(self: Arc<Self>) {
        if self.live_marks.is_empty() {
            return;
        }
        let mut tick = tokio::time::interval(Duration::from_millis(LIVE_REFRESH_MS));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            for store in &self.live_marks {
                if let Err(e) = store.mark_live_prefix().await {
                    tracing::debug!(prefix = store.prefix(), error = %e, "cannot refresh the store prefix's live mark");
                }
            }
        }
    }

    /// What `tollgate serve` was told over the file (reloads keep it).
    pub fn with_overrides(mut self, overrides: Overrides) -> Self {
        self.overrides = overrides;
        self
    }

    /// Holds at most `max` connections in all: the default
    /// `server.max_connections` lowered to fit the file descriptors this
    /// process may open. Before serving only.
    pub fn with_connection_limit(mut self, max: usize) -> Self {
        let server = &self.live.load().config.server;
        let limits = ConnectionLimits::at_most(server, max);
        self.connections = Arc::new(self.connections.with_limits(limits));
        self
    }

    /// Loads the config file again. A valid config replaces the old one
    /// atomically (buckets carry over: state is keyed by policy name and
    /// records its scale), keeping the running value of each start-only
    /// setting it changes; an invalid one, or one changing the stores or
    /// the region, is refused and the old one stays. A refusal is logged
    /// and counted once per bad edit: trying the same file again for the
    /// same reason (SIGHUP after the watcher) returns the error silently.
    /// Each reload logs what it changed: the policies added, removed and
    /// changed by name, or that nothing changed.
    pub fn reload(&self) -> Result<(), ReloadError> {
        self.reload_as(false)
    }

    /// [`App::reload`] for the file watcher's first look, made whether the
    /// file changed or not: an unchanged file is not worth a line then.
    pub(crate) fn reload_first_look(&self) -> Result<(), ReloadError> {
        self.reload_as(true)
    }

    fn reload_as(&self, first_look: bool) -> Result<(), ReloadError> {
        let result = ServeConfig::load_overridden(&self.config_path, &self.overrides)
            .map_err(ReloadError::from)
            .and_then(|config| self.apply(config));
        let shown = self.config_path.display();
        match result {
            Ok(Applied::Unchanged) => {
                self.forget_refusal();
                if !first_look {
                    let hash = self.live.load().config.hash.clone();
                    tracing::info!(config = %shown, %hash, "config reloaded: nothing changed");
                }
                Ok(())
            }
            Ok(Applied::Reloaded {
                policies,
                needs_restart,
            }) => {
                self.forget_refusal();
                self.metrics.reloads.inc();
                let hash = self.live.load().config.hash.clone();
                let (added, removed, changed) = (
                    policies.added.join(","),
                    policies.removed.join(","),
                    policies.changed.join(","),
                );
                if needs_restart.is_empty() {
                    tracing::info!(config = %shown, %hash, added, removed, changed, "config reloaded; {policies}");
                } else {
                    let settings = needs_restart.join(", ");
                    tracing::warn!(config = %shown, %hash, added, removed, changed, "config reloaded, but {settings} changed and needs a restart (the running value stays until then); {policies}");
                }
                Ok(())
            }
            Err(reason) => {
                if self.refused_before(&reason) {
                    tracing::debug!(config = %shown, %reason, "config reload refused again for the same reason (counted once)");
                    return Err(reason);
                }
                self.metrics.reload_failures.inc();
                tracing::error!(config = %shown, %reason, "config reload refused; the previous config keeps serving");
                Err(reason)
            }
        }
    }

    /// Swaps `config` in unless it changes the stores or the region.
    fn apply(&self, mut config: ServeConfig) -> Result<Applied, ReloadError> {
        let current = self.live.load();
        if config.store_hash != current.config.store_hash {
            let what = if config.deployment.region != current.config.deployment.region {
                "the region"
            } else {
                "the stores"
            };
            return Err(ReloadError::NeedsRestart(what));
        }
        if config.hash == current.config.hash {
            return Ok(Applied::Unchanged);
        }
        for warning in config.warnings() {
            tracing::warn!("{warning}");
        }
        let policies = PolicyChanges::between(&current.config, &config);
        let running = &current.config.server;
        let needs_restart = running.start_only_changes(&config.server);
        // The live config says what runs: the listeners, workers and TLS
        // opened at start.
        config.server.keep_start_only(running);
        config.tls = current.config.tls.clone();
        let next = LiveConfig::new(config, &self.metrics, Some(&current));
        self.limiter
            .set_decision_sampling(next.config.decision_sampling.clone());
        self.live.store(Arc::new(next));
        Ok(Applied::Reloaded {
            policies,
            needs_restart,
        })
    }

    /// Whether this refusal is the last one again: the same file content,
    /// refused for the same reason. Remembers it otherwise.
    fn refused_before(&self, reason: &ReloadError) -> bool {
        let mut hasher = blake3::Hasher::new();
        if let Ok(bytes) = std::fs::read(&self.config_path) {
            hasher.update(&bytes);
        }
        hasher.update(reason.to_string().as_bytes());
        let fingerprint = hasher.finalize();
        let Ok(mut last) = self.last_refused.lock() else {
            return false;
        };
        let again = *last == Some(fingerprint);
        *last = Some(fingerprint);
        again
    }

    fn forget_refusal(&self) {
        if let Ok(mut last) = self.last_refused.lock() {
            *last = None;
        }
    }
}

/// Opens a configured store, and a Redis one's handle for its live mark.
/// Redis is connected, its scripts loaded, the gcra scales of `policies`
/// registered and its prefix marked live before the server starts
/// answering, so a first decision costs one round trip and no replay
/// starting now writes there; Redis being down delays none of it past the
/// store timeout (decisions then fail over).
async fn open_store(
    settings: &StoreSettings,
    policies: &[&Policy],
    clock: Arc<dyn Clock>,
) -> Result<(Backend, Option<RedisStore>), StoreError> {
    Ok(match settings {
        StoreSettings::Memory { max_keys } => (Backend::memory(*max_keys, clock), None),
        StoreSettings::Redis(config) => {
            let store = RedisStore::connect(config).await?;
            // A store that cannot register the scales is down: its live
            // mark waits for the first refresh rather than a second timeout.
            match store.prepare(policies).await {
                Err(e) => {
                    tracing::warn!(error = %e, "cannot register the policies' gcra scales yet");
                }
                Ok(()) => {
                    if let Err(e) = store.mark_live_prefix().await {
                        tracing::warn!(error = %e, "cannot mark the store prefix as live yet");
                    }
                }
            }
            (Backend::redis(store.clone(), clock), Some(store))
        }
    })
}
