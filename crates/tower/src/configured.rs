//! Rules and stores from a tollgate config file, the same file and schema
//! as `tollgate serve` (tollgate-config): each policy's plan, its `match`,
//! `identity` and `cost`, read from the request's head the way the
//! server's forward auth reads them, so a service and the server keyed by
//! one config spend one budget.
//!
//! The request side is tollgate-http's (`Forwarded::own`, `policy_check`):
//! the client address is the connection's peer (axum's
//! `ConnectInfo<SocketAddr>`, or a `SocketAddr` extension; without one,
//! `0.0.0.0` for every request), or the `X-Forwarded-For` hop a listed
//! trusted proxy vouches for.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::extract::ConnectInfo;
use http::request::Parts;
use ipnet::IpNet;
use prometheus_client::registry::Registry;
use thiserror::Error;
use tollgate_config::{
    Config, LoadError, PlanContext, RequestFault, ServePolicy, StoreSettings, plan_of,
};
use tollgate_core::{Clock, SecretHasher};
use tollgate_http::{Forwarded, Peer, Problem, policy_check, policy_item};
use tollgate_limiter::{Backend, Limiter, LimiterMetrics, StoreName};
use tollgate_store::{RedisStore, StoreError};

use crate::rule::{Applies, Rule};

/// The longest identity keyed, as the server's default `max_key_bytes`.
const MAX_KEY_BYTES: usize = 1024;

/// Why a config could not be served by the layer.
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
}

/// A config's policies as rules and its stores as one limiter.
pub struct Configured {
    /// The policies' rules, in the file's order.
    pub rules: Vec<Rule>,
    /// The stores the file names, decided in process.
    pub limiter: Limiter,
    /// The limiter's series, for a service that exposes them.
    pub registry: Registry,
}

impl Configured {
    /// Reads `path` (environment variables from the process, as `tollgate
    /// serve` reads them) and opens its stores on `clock`.
    pub async fn load(path: &Path, clock: Arc<dyn Clock>) -> Result<Self, ConfigError> {
        #[allow(clippy::disallowed_methods)] // the config's own env lookups
        let config = Config::load(path, |name| std::env::var(name).ok())?;
        Self::open(&config, clock).await
    }

    /// `config`'s rules, and its stores opened on `clock`.
    pub async fn open(config: &Config, clock: Arc<dyn Clock>) -> Result<Self, ConfigError> {
        let mut registry = Registry::with_prefix("tollgate");
        let metrics = Arc::new(LimiterMetrics::register(&mut registry, Arc::clone(&clock)));
        let rules = rules_of(config, &metrics, &[]);
        let policies: Vec<&tollgate_core::Policy> =
            config.policies.iter().map(|p| &p.policy).collect();
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
        let limiter = Limiter::named(backends, metrics, clock);
        Ok(Self {
            rules,
            limiter,
            registry,
        })
    }
}

/// `config`'s policies as rules, their plans built as the server builds
/// them (its counters in `metrics`); for a layer that asks a remote
/// tollgate, only their identities, costs and failure modes matter.
/// `trusted_proxies`: the proxies whose `X-Forwarded-For` names the
/// client (`server.trusted_proxies` of the server's config).
pub fn rules_of(config: &Config, metrics: &LimiterMetrics, trusted_proxies: &[IpNet]) -> Vec<Rule> {
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
            let plan = plan_of(serve, &context, None);
            let serve = serve.clone();
            let hasher = config.hasher.clone();
            let trusted = trusted_proxies.to_vec();
            let ids = serve.client_request_ids;
            let rule = Rule::judged(plan, move |parts| {
                judge(&serve, hasher.as_ref(), &trusted, parts)
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
async fn open_store(
    settings: &StoreSettings,
    policies: &[&tollgate_core::Policy],
    clock: Arc<dyn Clock>,
) -> Result<Backend, StoreError> {
    Ok(match settings {
        StoreSettings::Memory { max_keys } => Backend::memory(*max_keys, clock),
        StoreSettings::Redis(config) => {
            let store = RedisStore::connect(config).await?;
            if let Err(e) = store.prepare(policies).await {
                tracing::warn!(error = %e, "cannot register the policies' gcra scales yet");
            }
            Backend::redis(store, clock)
        }
    })
}

/// Whether `serve` applies to the request, and its identity and cost,
/// read by tollgate-http as the server's forward auth reads a request.
fn judge(
    serve: &ServePolicy,
    hasher: Option<&SecretHasher>,
    trusted_proxies: &[IpNet],
    parts: &Parts,
) -> Applies {
    let fault = |RequestFault(detail)| Problem::bad_request(detail);
    let request = Forwarded::own(parts, peer(parts), trusted_proxies).map_err(fault)?;
    policy_check(serve, &request, hasher, MAX_KEY_BYTES).map_err(fault)
}

/// The connection's peer: axum's `ConnectInfo<SocketAddr>`, or a
/// `SocketAddr` extension. Without either, every request counts as from
/// one unspecified address (`0.0.0.0`), never as from a proxy: headers a
/// client writes (`X-Forwarded-For`) must not choose its identity, so a
/// service that gives the layer no peer shares one budget per identity
/// rule on the client address (docs/embedding.md) rather than none.
fn peer(parts: &Parts) -> Peer {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
        .or_else(|| parts.extensions.get::<SocketAddr>().copied())
        .map_or(Peer::Addr(NO_PEER), Peer::Addr)
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
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().expect("net")];
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
