//! Rules and stores from a tollgate config file, the same file and schema
//! as `tollgate serve` (tollgate-config): each policy's plan, its `match`,
//! `identity` and `cost`, read from the request's head the way the
//! server's forward auth reads them, so a service and the server keyed by
//! one config spend one budget.
//!
//! The request side is a local adapter over tollgate-config's shaping
//! (`shape_part`, `compose`): the client address is the connection's peer
//! (axum's `ConnectInfo<SocketAddr>`, or a `SocketAddr` extension);
//! forwarded addresses are not read, since a service has no
//! `trusted_proxies` of its own.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use http::HeaderMap;
use http::request::Parts;
use prometheus_client::registry::Registry;
use thiserror::Error;
use tollgate_config::{
    ComposeFault, Config, CostRule, IdentityPart, LoadError, PartFault, PlanContext, ServePolicy,
    StoreSettings, Told, canonical_host, compose, normalize, plan_of, shape_part,
};
use tollgate_core::{Clock, SecretHasher};
use tollgate_http::{Problem, policy_item};
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
        let rules = rules_of(config, &metrics);
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
pub fn rules_of(config: &Config, metrics: &LimiterMetrics) -> Vec<Rule> {
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
            Rule::judged(plan, move |parts| judge(&serve, hasher.as_ref(), parts))
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

/// Whether `serve` applies to the request, and its identity and cost.
fn judge(serve: &ServePolicy, hasher: Option<&SecretHasher>, parts: &Parts) -> Applies {
    let path = normalize(parts.uri.path()).map_err(|e| Problem::bad_request(e.to_string()))?;
    let host = parts
        .headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| parts.uri.host())
        .unwrap_or_default();
    let host = canonical_host(host);
    let method = parts.method.as_str();
    if !serve.matcher.matches(method, &path, &host) {
        return Ok(None);
    }
    let name = serve.policy.name();
    let mut values: Vec<(&str, Cow<'_, str>)> = Vec::with_capacity(serve.identity.len());
    for part in &serve.identity {
        let told = match part {
            IdentityPart::Header(header) | IdentityPart::ApiKey(header) => {
                single_header(&parts.headers, header)?.map(Told::Text)
            }
            IdentityPart::Bearer => single_header(&parts.headers, "authorization")?.map(Told::Text),
            IdentityPart::ClientIp(_) => peer(parts).map(Told::Address),
            IdentityPart::Method => Some(Told::Text(method)),
            IdentityPart::Path | IdentityPart::Route => Some(Told::Text(&path)),
            IdentityPart::Host => Some(Told::Text(&host)),
            IdentityPart::Literal(_) => None,
        };
        let value = shape_part(serve, part, told, hasher).map_err(|fault| {
            Problem::bad_request(match fault {
                PartFault::Missing => format!(
                    "policy {name}: identity part {} is missing from the request",
                    part.name()
                ),
                PartFault::NotAnAddress(text) => {
                    format!("policy {name}: identity part client_ip: {text:?} is not an IP address")
                }
                PartFault::NoHasher => "no identity hashing key is configured".to_owned(),
            })
        })?;
        values.push((part.name(), value));
    }
    let identity =
        compose(values.iter().map(|(n, v)| (*n, v.as_ref())), MAX_KEY_BYTES).map_err(|fault| {
            Problem::bad_request(match fault {
                ComposeFault::Parts(e) => format!("policy {name}: {e}"),
                ComposeFault::TooLong(_) => {
                    format!("policy {name}: the identity is longer than {MAX_KEY_BYTES} bytes")
                }
            })
        })?;
    Ok(Some((identity, cost_of(serve, &parts.headers)?)))
}

/// The client's address: the connection's peer.
fn peer(parts: &Parts) -> Option<IpAddr> {
    parts
        .extensions
        .get::<axum_core_connect::ConnectInfo>()
        .map(|c| c.0.ip())
        .or_else(|| parts.extensions.get::<SocketAddr>().map(SocketAddr::ip))
        .map(|ip| ip.to_canonical())
}

/// axum's `ConnectInfo<SocketAddr>`, as the connection's peer.
mod axum_core_connect {
    pub(super) type ConnectInfo = axum::extract::ConnectInfo<std::net::SocketAddr>;
}

/// A header sent once, as text; sent twice, a refusal (no single value).
fn single_header<'h>(headers: &'h HeaderMap, name: &str) -> Result<Option<&'h str>, Problem> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Problem::bad_request(format!(
            "header {} appears more than once: send it once",
            name.to_ascii_lowercase()
        )));
    }
    std::str::from_utf8(first.as_bytes())
        .map(|t| Some(t.trim()))
        .map_err(|_| {
            Problem::bad_request(format!(
                "header {} is not valid UTF-8",
                name.to_ascii_lowercase()
            ))
        })
}

/// What the request costs under `serve`'s cost rule.
fn cost_of(serve: &ServePolicy, headers: &HeaderMap) -> Result<u64, Problem> {
    let (name, min, max, default) = match &serve.cost {
        CostRule::Constant(c) => return Ok(*c),
        CostRule::Header {
            name,
            min,
            max,
            default,
        } => (name, *min, *max, *default),
    };
    let policy = serve.policy.name();
    let Some(text) = single_header(headers, name)? else {
        return Ok(default);
    };
    let cost: u64 = text.parse().map_err(|_| {
        Problem::bad_request(format!(
            "policy {policy}: header {name} must be a whole number from {min} to {max}, got {text:?}"
        ))
    })?;
    if !(min..=max).contains(&cost) {
        return Err(Problem::bad_request(format!(
            "policy {policy}: header {name} is {cost}, outside {min} to {max}"
        )));
    }
    Ok(cost)
}
