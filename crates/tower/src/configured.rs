//! A tower layer run by a tollgate config file, the same file and schema
//! as `tollgate serve` (tollgate-config): each policy's plan, its `match`,
//! `identity` and `cost`, read from the request's head the way the
//! server's forward auth reads them, so a service and the server keyed by
//! one config spend one budget. [`Configured`] also does what the server
//! does around its policies: it runs the limiter's upkeep (sweeps,
//! give-backs, lease renewals) while it lives, and reloads the file as
//! the server does, refusing a file it cannot serve.
//!
//! The request side is tollgate-http's (`Forwarded::own`, `policy_check`)
//! with the file's `server` settings for it (tollgate-config's
//! `RequestSettings`): the client address is the connection's peer (axum's
//! `ConnectInfo<SocketAddr>`, or a `SocketAddr` extension; without one,
//! `0.0.0.0` for every request), or the `X-Forwarded-For` hop one of
//! `server.trusted_proxies` vouches for; an identity longer than
//! `server.max_key_bytes` is refused (400).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use axum::extract::ConnectInfo;
use http::request::Parts;
use prometheus_client::registry::Registry;
use thiserror::Error;
use tollgate_config::{
    Config, LoadError, PlanContext, RequestFault, RequestSettings, ServePolicy, StoreSettings,
    plan_after,
};
use tollgate_core::{Clock, SecretHasher};
use tollgate_http::{Forwarded, Peer, Problem, policy_check, policy_item};
use tollgate_limiter::{
    Backend, KeptPlans, Limiter, LimiterMetrics, Plan, StoreName, UpkeepHandle,
};
#[cfg(feature = "redis")]
use tollgate_store::RedisStore;
use tollgate_store::StoreError;

use crate::layer::RateLimitLayer;
use crate::rule::{Applies, Rule};

/// Why a config could not be served by the layer, or a reload was refused
/// (the rules loaded before keep serving).
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read or is not a valid config.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A store could not be opened.
    #[error("store {role}: {error}")]
    Store {
        /// The store's role.
        role: &'static str,
        /// What went wrong.
        error: StoreError,
    },
    /// The stores or the region changed: the limiter holds the stores it
    /// opened, and the policies' stores depend on both, so nothing of the
    /// new file applies (as `tollgate serve` refuses such a reload).
    #[error("{0} changed and needs a restart; nothing of the new config was applied")]
    NeedsRestart(&'static str),
    /// A config opened from memory has no file to read again.
    #[error("this config was not loaded from a file: there is nothing to reload")]
    NoFile,
}

/// What a reload that was not refused did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reloaded {
    /// The file is the one serving: nothing changed.
    Unchanged,
    /// The new rules serve from the next request on.
    Applied,
}

/// A config's stores as one limiter, its policies as the rules of one
/// [`RateLimitLayer`], and the limiter's upkeep for them, which stops when
/// this is dropped: keep it as long as the layer serves.
pub struct Configured {
    /// The file read again on [`Configured::reload`].
    path: Option<PathBuf>,
    limiter: Arc<Limiter>,
    metrics: Arc<LimiterMetrics>,
    registry: Registry,
    layer: RateLimitLayer<Arc<Limiter>>,
    /// What serves now, read by the upkeep at each turn.
    current: Arc<ArcSwap<Loaded>>,
    /// One reload at a time: each builds on the rules it replaces.
    reloading: Mutex<()>,
    upkeep: UpkeepHandle,
}

/// One load of the file: the config and its policies' rules, in order.
struct Loaded {
    config: Config,
    rules: Vec<Rule>,
    /// Where leased policies' ledgers are: the global store.
    ledger: Option<usize>,
}

/// The upkeep keeps the plans loaded now, a reload's from its next turn.
impl KeptPlans for Loaded {
    fn plans(&self) -> Vec<&Plan> {
        self.rules.iter().map(Rule::plan).collect()
    }

    fn ledger(&self) -> Option<usize> {
        self.ledger
    }
}

impl Configured {
    /// Reads `path` (environment variables from the process, as `tollgate
    /// serve` reads them), opens its stores on `clock` and starts their
    /// upkeep on this tokio runtime.
    pub async fn load(path: &Path, clock: Arc<dyn Clock>) -> Result<Self, ConfigError> {
        let config = read(path)?;
        Self::start(config, Some(path.to_owned()), clock).await
    }

    /// `config`'s rules, its stores opened on `clock` and their upkeep
    /// started; with no file, [`Configured::reload`] has nothing to read
    /// ([`Configured::apply`] takes a new config).
    pub async fn open(config: Config, clock: Arc<dyn Clock>) -> Result<Self, ConfigError> {
        Self::start(config, None, clock).await
    }

    async fn start(
        config: Config,
        path: Option<PathBuf>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ConfigError> {
        let mut registry = Registry::with_prefix("tollgate");
        let metrics = Arc::new(LimiterMetrics::register(&mut registry, Arc::clone(&clock)));
        let limiter = Arc::new(open_stores(&config, &metrics, clock).await?);
        let rules = rules_after(&config, &metrics, None);
        let mut layer = RateLimitLayer::new(Arc::clone(&limiter), rules.clone());
        if let Some(name) = &config.request.request_id_header {
            layer = layer.with_request_id_header(name.clone());
        }
        let ledger = config.stores.index("global");
        let current = Arc::new(ArcSwap::from_pointee(Loaded {
            config,
            rules,
            ledger,
        }));
        let kept = Arc::clone(&current);
        let upkeep = limiter.upkeep(move || kept.load_full());
        Ok(Self {
            path,
            limiter,
            metrics,
            registry,
            layer,
            current,
            reloading: Mutex::new(()),
            upkeep,
        })
    }

    /// The layer, reading request ids from `server.request_id_header`
    /// when the file names it (for the policies with
    /// `client_request_ids: true`): every clone follows this config's
    /// reloads.
    pub fn layer(&self) -> RateLimitLayer<Arc<Limiter>> {
        self.layer.clone()
    }

    /// The rules serving now, in the file's order.
    pub fn rules(&self) -> Vec<Rule> {
        self.current.load().rules.clone()
    }

    /// How the file says a request is read (`server.trusted_proxies`,
    /// `server.max_key_bytes`, `server.request_id_header`), as loaded now.
    pub fn request(&self) -> RequestSettings {
        self.current.load().config.request.clone()
    }

    /// The limiter deciding on the file's stores.
    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    /// The limiter's series, for a service that exposes them.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Reads the file again and applies it as [`Configured::apply`] does,
    /// logged as `tollgate serve` logs a reload.
    pub fn reload(&self) -> Result<Reloaded, ConfigError> {
        let path = self.path.as_deref().ok_or(ConfigError::NoFile)?;
        let result = read(path).and_then(|config| self.apply(config));
        let shown = path.display();
        match &result {
            Ok(Reloaded::Applied) => {
                let hash = self.current.load().config.hash.clone();
                tracing::info!(config = %shown, %hash, "config reloaded");
            }
            Ok(Reloaded::Unchanged) => {}
            Err(reason) => {
                tracing::error!(config = %shown, %reason, "config reload refused; the previous config keeps serving");
            }
        }
        result
    }

    /// Serves `config`'s rules from the next request on, on the same
    /// limiter and stores, carrying over what the server carries over on a
    /// reload (leases, hot-lease blocks, a changed `shards`' old layout).
    /// Refused, with nothing applied, when it changes the stores or the
    /// region. A changed `server.request_id_header` keeps its running
    /// value until a restart (logged), as the server keeps its start-only
    /// settings.
    pub fn apply(&self, mut config: Config) -> Result<Reloaded, ConfigError> {
        let _one = self
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let current = self.current.load_full();
        if config.store_hash != current.config.store_hash {
            let what = if config.deployment.region != current.config.deployment.region {
                "the region"
            } else {
                "the stores"
            };
            return Err(ConfigError::NeedsRestart(what));
        }
        if config.hash == current.config.hash {
            return Ok(Reloaded::Unchanged);
        }
        // Every clone of the layer reads the header it was made with.
        let running = &current.config.request.request_id_header;
        if config.request.request_id_header != *running {
            tracing::warn!(
                "server.request_id_header changed and needs a restart (the running value stays until then)"
            );
            config.request.request_id_header.clone_from(running);
        }
        let rules = rules_after(&config, &self.metrics, Some(&current));
        self.layer.reload(rules.clone());
        let ledger = config.stores.index("global");
        self.current.store(Arc::new(Loaded {
            config,
            rules,
            ledger,
        }));
        Ok(Reloaded::Applied)
    }

    /// Stops the upkeep and gives back what hot-lease blocks hold, as a
    /// stopping server does; dropping stops the upkeep without that.
    pub async fn stop(self) {
        self.upkeep.stop().await;
    }
}

/// Reads the config at `path`, environment variables from the process.
fn read(path: &Path) -> Result<Config, ConfigError> {
    #[allow(clippy::disallowed_methods)] // the config's own env lookups
    let config = Config::load(path, |name| std::env::var(name).ok())?;
    Ok(config)
}

/// `config`'s stores, opened as the server opens them, as one limiter.
async fn open_stores(
    config: &Config,
    metrics: &Arc<LimiterMetrics>,
    clock: Arc<dyn Clock>,
) -> Result<Limiter, ConfigError> {
    let policies: Vec<&tollgate_core::Policy> = config.policies.iter().map(|p| &p.policy).collect();
    let mut backends = Vec::with_capacity(config.stores.list.len());
    for (role, settings) in &config.stores.list {
        let backend = open_store(settings, &policies, Arc::clone(&clock))
            .await
            .map_err(|error| ConfigError::Store { role, error })?;
        let name = StoreName {
            role: (*role).to_owned(),
            region: None,
            what: settings.describe(),
        };
        backends.push((name, backend));
    }
    Ok(Limiter::named(backends, Arc::clone(metrics), clock))
}

/// `config`'s policies as rules, their plans built as the server builds
/// them (its counters in `metrics`), each request read as the file's
/// `server` section says (`trusted_proxies`, `max_key_bytes`); for a layer
/// that asks a remote tollgate, only their identities, costs and failure
/// modes matter.
pub fn rules_of(config: &Config, metrics: &LimiterMetrics) -> Vec<Rule> {
    rules_after(config, metrics, None)
}

/// [`rules_of`] replacing `before`'s rules: a policy of the same name
/// carries its plan's state over as the server's reload does.
fn rules_after(config: &Config, metrics: &LimiterMetrics, before: Option<&Loaded>) -> Vec<Rule> {
    let context = PlanContext {
        region: config.deployment.region.as_deref().unwrap_or_default(),
        shadow_mode: config.shadow_mode,
        metrics,
        policy_item,
    };
    config
        .policies
        .iter()
        .map(|serve| {
            let was = before.and_then(|loaded| {
                let name = serve.declared.name();
                let index = loaded
                    .config
                    .policies
                    .iter()
                    .position(|p| p.declared.name() == name)?;
                Some((
                    &loaded.config.policies[index],
                    loaded.rules.get(index)?.plan(),
                ))
            });
            let plan = plan_after(serve, &context, was);
            let serve = serve.clone();
            let hasher = config.hasher.clone();
            let request = config.request.clone();
            let ids = serve.client_request_ids;
            let rule = Rule::judged(plan, move |parts| {
                judge(&serve, hasher.as_ref(), &request, parts)
            });
            if ids {
                rule.with_client_request_ids()
            } else {
                rule
            }
        })
        .collect()
}

/// Opens one store as the server does: Redis connected and its scripts
/// and gcra scales loaded before the first request (down, it fails over).
#[cfg_attr(not(feature = "redis"), allow(unused_variables))]
async fn open_store(
    settings: &StoreSettings,
    policies: &[&tollgate_core::Policy],
    clock: Arc<dyn Clock>,
) -> Result<Backend, StoreError> {
    Ok(match settings {
        StoreSettings::Memory { max_keys } => Backend::memory(*max_keys, clock),
        #[cfg(feature = "redis")]
        StoreSettings::Redis(config) => {
            let store = RedisStore::connect(config).await?;
            if let Err(e) = store.prepare(policies).await {
                tracing::warn!(error = %e, "cannot register the policies' gcra scales yet");
            }
            Backend::redis(store, clock)
        }
        // Refused when the config was read (tollgate-store's `NO_REDIS`);
        // settings built in code meet the same answer here.
        #[cfg(not(feature = "redis"))]
        StoreSettings::Redis(_) => return Err(StoreError::Config(tollgate_store::NO_REDIS.into())),
    })
}

/// Whether `serve` applies to the request, and its identity and cost,
/// read by tollgate-http as the server's forward auth reads a request.
fn judge(
    serve: &ServePolicy,
    hasher: Option<&SecretHasher>,
    settings: &RequestSettings,
    parts: &Parts,
) -> Applies {
    let fault = |RequestFault(detail)| Problem::bad_request(detail);
    let request = Forwarded::own(parts, peer(parts), &settings.trusted_proxies).map_err(fault)?;
    policy_check(serve, &request, hasher, settings.max_key_bytes).map_err(fault)
}

/// The connection's peer: axum's `ConnectInfo<SocketAddr>`, tonic's
/// `TcpConnectInfo` (feature `tonic`), or a `SocketAddr` extension.
/// Without any, every request counts as from
/// one unspecified address (`0.0.0.0`), never as from a proxy: headers a
/// client writes (`X-Forwarded-For`) must not choose its identity, so a
/// service that gives the layer no peer shares one budget per identity
/// rule on the client address (docs/embedding.md) rather than none.
fn peer(parts: &Parts) -> Peer {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
        .or_else(|| tonic_peer(parts))
        .or_else(|| parts.extensions.get::<SocketAddr>().copied())
        .map_or(Peer::Addr(NO_PEER), Peer::Addr)
}

/// The peer tonic's server gave the call, when it knows one.
#[cfg(feature = "tonic")]
fn tonic_peer(parts: &Parts) -> Option<SocketAddr> {
    use tonic::transport::server::TcpConnectInfo;
    parts
        .extensions
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
}

#[cfg(not(feature = "tonic"))]
fn tonic_peer(_: &Parts) -> Option<SocketAddr> {
    None
}

/// The address a request without a known peer is counted as.
const NO_PEER: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(forwarded_for: &str) -> Parts {
        let request = http::Request::builder()
            .header("x-forwarded-for", forwarded_for)
            .body(())
            .expect("request");
        request.into_parts().0
    }

    #[test]
    fn a_request_without_a_peer_is_counted_as_one_address_whatever_it_forwards() {
        let parts = parts("203.0.113.7");
        assert_eq!(peer(&parts), Peer::Addr(NO_PEER));
        let trusted: Vec<ipnet::IpNet> = vec!["10.0.0.0/8".parse().expect("net")];
        let told = tollgate_http::client_ip(&parts.headers, peer(&parts).ip(), &trusted);
        assert_eq!(told.ok(), Some(std::net::IpAddr::from([0, 0, 0, 0])));
    }

    #[test]
    fn a_connection_peer_is_the_peer() {
        let mut parts = parts("203.0.113.7");
        let addr: SocketAddr = "198.51.100.4:5000".parse().expect("addr");
        parts.extensions.insert(ConnectInfo(addr));
        assert_eq!(peer(&parts), Peer::Addr(addr));
    }
}
