//! `tollgate serve`'s config: the core's policies plus what a proxy needs
//! (`match`, `identity`, `cost`), the `server` settings and the `store`.
//! Every fault is reported with the policy and field it concerns.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper::http::HeaderName;
use ipnet::IpNet;
use serde::Deserialize;
use serde_json::{Map, Value};
use tollgate_core::{
    ConfigError, Policy, PolicySet, SecretHasher, describe, parse_policy, parse_yaml,
    parse_yaml_named,
};
use tollgate_store::{OnStoreFailure, RedisConfig};

use crate::envoy_rules::EnvoyRules;
use crate::failure_mode::parse_failure_mode;
use crate::listen::ListenAddress;
use crate::matching::{Matcher, PathPattern, TrailingSlash};
use crate::request_path::normalize;
use crate::scope::{Deployment, Scope, Stores, enforced, parse_scope};
use crate::tls::{EdgeTls, TlsPaths};
use crate::tokens::EndpointTokens;

mod retry;
pub use retry::RetryRule;

/// Fields a policy may carry beyond the core's.
const SERVE_FIELDS: &[&str] = &[
    "scope",
    "shards",
    "hot_lease",
    "match",
    "identity",
    "cost",
    "on_store_failure",
    "local_share_percent",
    "retry_window",
    "retry_ids",
];
/// The environment variable holding the key for hashing secret identity parts.
pub const DEFAULT_IDENTITY_KEY_ENV: &str = "TOLLGATE_IDENTITY_KEY";

/// Why a config file was not loaded; every message starts with the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigLoadError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Invalid { path: String, source: ConfigError },
    #[error("{path}: {source}")]
    Tls {
        path: String,
        source: crate::tls::TlsError,
    },
    #[error("{path}: envoy_ratelimit_configs: {source}")]
    Envoy {
        path: String,
        source: crate::envoy_rules::RulesError,
    },
}

/// `server.tls` is set, but its files were never read: a config parsed
/// from text alone (`ServeConfig::parse`) cannot serve TLS.
#[derive(Debug, thiserror::Error)]
#[error("server.tls is set but its files were not read (load the config from its file)")]
pub struct TlsNotLoaded;

/// A whole, validated config.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub server: ServerSettings,
    /// The stores by role (`store:` alone is one of them).
    pub stores: Stores,
    /// This instance's region and the regions there are.
    pub deployment: Deployment,
    /// A hash of the stores and the region: a reload may not change them.
    pub store_hash: String,
    pub policies: Vec<ServePolicy>,
    pub set: PolicySet,
    /// A short hash of the config text, to tell which config an instance runs.
    pub hash: String,
    /// Present when some policy hashes an API key or bearer token.
    pub hasher: Option<SecretHasher>,
    /// `envoy_ratelimit_configs`: envoyproxy/ratelimit files or directories,
    /// as written (relative to the config file's directory).
    pub envoy_ratelimit_configs: Vec<PathBuf>,
    /// Their descriptor rules, read by [`ServeConfig::load`].
    pub envoy: Arc<EnvoyRules>,
    /// The bearer tokens guarding `/v1/check` (and gRPC), `/v1/policies`
    /// and `/metrics`, from the environment; hashed, never kept raw.
    pub tokens: EndpointTokens,
    /// `server.tls`'s certificate and key, read by [`ServeConfig::load`].
    pub tls: Option<EdgeTls>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSettings {
    /// Where to listen when `--listen` is not given.
    #[serde(deserialize_with = "listen")]
    pub listen: ListenAddress,
    /// The status of a rejection on `/v1/authorize`. nginx's `auth_request`
    /// passes only 2xx, 401 and 403, so nginx setups use 403 and turn it
    /// back into the 429 contract (see examples/nginx.conf).
    pub deny_status: u16,
    /// Peers whose `X-Forwarded-For` / `X-Real-IP`, and whose description
    /// of the original request (`forward_auth`), are believed: CIDR networks
    /// or single addresses.
    #[serde(deserialize_with = "networks")]
    pub trusted_proxies: Vec<IpNet>,
    /// Which headers describe the original request to `/v1/authorize`:
    /// `nginx` (the default), `traefik`, `envoy`, or `{method, uri, host}`.
    #[serde(deserialize_with = "forward_auth")]
    pub forward_auth: ForwardAuth,
    /// The most header fields a request may carry, and the most bytes its
    /// head may take: beyond them hyper answers 431 (never a fail-open
    /// status: docs/forward-auth.md). Read at start.
    pub max_headers: usize,
    pub max_header_bytes: usize,
    /// The environment variable holding the secret-hashing key.
    pub identity_key_env: String,
    /// Largest request body accepted by `/v1/check`.
    pub max_body_bytes: usize,
    /// Largest encoded identity accepted.
    pub max_key_bytes: usize,
    /// Largest number of checks in one `/v1/check` batch.
    pub max_checks: usize,
    /// How often the config file is checked for changes, in ms (0: never).
    pub watch_interval_ms: u64,
    /// Where Envoy's rate limit service (gRPC) listens when
    /// `--grpc-listen` is not given; absent: not served.
    #[serde(deserialize_with = "grpc_listen")]
    pub grpc_listen: Option<ListenAddress>,
    /// Whether `ShouldRateLimit` answers carry the RateLimit fields (and
    /// `Retry-After`) for Envoy to add to its response.
    pub grpc_response_headers: bool,
    /// HTTP worker threads, each with its own runtime (0: one per core).
    pub http_workers: usize,
    /// Open HTTP connections beyond which new ones are closed at once.
    pub max_connections: usize,
    /// The longest a request's headers, and then its body, may take to
    /// arrive; a slower client's connection is closed (a slow body gets 408
    /// first). Read at start, like `http_workers`.
    pub request_timeout_ms: u64,
    /// TLS for both listeners: PEM certificate and key files, relative to
    /// the config file. Read at start.
    pub tls: Option<TlsPaths>,
    /// The header carrying a request id on `/v1/authorize` (e.g.
    /// draft-ietf-httpapi-idempotency-key-header's `Idempotency-Key`): a
    /// retry under the same id is charged once. Off unless named: on forward
    /// auth the id is the *client's* header, and a client reusing one id is
    /// admitted for one charge unless the application behind honours it.
    #[serde(deserialize_with = "header_name")]
    pub request_id_header: Option<HeaderName>,
}

fn header_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<HeaderName>, D::Error> {
    let text = String::deserialize(d)?;
    HeaderName::from_bytes(text.as_bytes())
        .map(Some)
        .map_err(|_| {
            serde::de::Error::custom(format!("request_id_header: {text:?} is not a header name"))
        })
}

/// More HTTP workers than this is a typo, not a machine.
const MAX_HTTP_WORKERS: usize = 1024;
/// Header fields a request may carry by default: what nginx, Envoy (100 of
/// the client's by default) and Traefik forward for any real client, with
/// room for the proxy's own.
pub const DEFAULT_MAX_HEADERS: usize = 256;
/// Bytes a request's head may take by default: nginx forwards up to its
/// `large_client_header_buffers` (4 × 8 KiB), Envoy up to 60 KiB.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 64 * 1024;
/// Bounds on the two: more headers cost hyper an allocation a request
/// proportional to the count.
const MAX_HEADERS_RANGE: std::ops::RangeInclusive<usize> = 16..=8192;
const MAX_HEADER_BYTES_RANGE: std::ops::RangeInclusive<usize> = 4096..=1 << 20;
/// The shortest secret-hashing key accepted: 32 bytes, as many as BLAKE3's
/// key (a key of fewer bytes cannot hold 32 bytes of entropy).
pub const MIN_IDENTITY_KEY_BYTES: usize = 32;

/// Which headers describe the original request to `/v1/authorize`. Only
/// these are read, and only from a peer in `trusted_proxies`: a header of
/// another family is never believed, whoever sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardAuth {
    /// `nginx`, `traefik`, `envoy` or `custom`, for messages and docs.
    pub family: &'static str,
    /// The original method; absent: the call's own method.
    pub method: Option<HeaderName>,
    /// The original request target; absent: the call's own path (below
    /// `/v1/authorize/` when the proxy appends it there, as Envoy does).
    pub uri: Option<HeaderName>,
    /// The original host; absent: the call's own `Host`.
    pub host: Option<HeaderName>,
}

impl ForwardAuth {
    /// nginx `auth_request`: `X-Original-Method`, `X-Original-URI` and the
    /// `Host` nginx sets (examples/nginx.conf).
    pub fn nginx() -> Self {
        Self {
            family: "nginx",
            method: Some(HeaderName::from_static("x-original-method")),
            uri: Some(HeaderName::from_static("x-original-uri")),
            host: None,
        }
    }

    /// Traefik ForwardAuth: `X-Forwarded-Method`, `-Uri`, `-Host`.
    pub fn traefik() -> Self {
        Self {
            family: "traefik",
            method: Some(HeaderName::from_static("x-forwarded-method")),
            uri: Some(HeaderName::from_static("x-forwarded-uri")),
            host: Some(HeaderName::from_static("x-forwarded-host")),
        }
    }

    /// Envoy ext_authz (HTTP): the call itself is the original request
    /// (its method, `path_prefix` + its path, its Host); no header is read.
    pub fn envoy() -> Self {
        Self {
            family: "envoy",
            method: None,
            uri: None,
            host: None,
        }
    }
}

fn forward_auth<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ForwardAuth, D::Error> {
    use serde::de::Error;
    let value = Value::deserialize(d)?;
    match &value {
        Value::String(name) => match name.as_str() {
            "nginx" => Ok(ForwardAuth::nginx()),
            "traefik" => Ok(ForwardAuth::traefik()),
            "envoy" => Ok(ForwardAuth::envoy()),
            other => Err(D::Error::custom(format!(
                "forward_auth: unknown proxy {other:?} (expected nginx, traefik, envoy, or {{method, uri, host}} header names)"
            ))),
        },
        Value::Object(map) => {
            let mut custom = ForwardAuth {
                family: "custom",
                method: None,
                uri: None,
                host: None,
            };
            for (key, v) in map {
                let slot = match key.as_str() {
                    "method" => &mut custom.method,
                    "uri" => &mut custom.uri,
                    "host" => &mut custom.host,
                    other => {
                        return Err(D::Error::custom(format!(
                            "forward_auth.{other}: unknown field (expected: method, uri, host)"
                        )));
                    }
                };
                let name = v
                    .as_str()
                    .and_then(|n| HeaderName::from_bytes(n.as_bytes()).ok())
                    .ok_or_else(|| {
                        D::Error::custom(format!(
                            "forward_auth.{key}: must be a header name, got {}",
                            describe(v)
                        ))
                    })?;
                *slot = Some(name);
            }
            if custom.uri.is_none() {
                return Err(D::Error::custom(
                    "forward_auth: name at least the `uri` header (method and host fall back to the call's own)",
                ));
            }
            Ok(custom)
        }
        other => Err(D::Error::custom(format!(
            "forward_auth: must be nginx, traefik, envoy or a mapping of header names, got {}",
            describe(other)
        ))),
    }
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            listen: ListenAddress::from(SocketAddr::from(([127, 0, 0, 1], 8080))),
            deny_status: 429,
            trusted_proxies: Vec::new(),
            forward_auth: ForwardAuth::nginx(),
            max_headers: DEFAULT_MAX_HEADERS,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            identity_key_env: DEFAULT_IDENTITY_KEY_ENV.to_owned(),
            max_body_bytes: 64 * 1024,
            max_key_bytes: 1024,
            max_checks: 16,
            watch_interval_ms: 1000,
            grpc_listen: None,
            grpc_response_headers: false,
            http_workers: 0,
            max_connections: 16_384,
            request_timeout_ms: 30_000,
            tls: None,
            request_id_header: None,
        }
    }
}

fn listen<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ListenAddress, D::Error> {
    let text = String::deserialize(d)?;
    text.parse()
        .map_err(|e| serde::de::Error::custom(format!("listen: {e}")))
}

fn grpc_listen<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<ListenAddress>, D::Error> {
    let Some(text) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    text.parse()
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("grpc_listen: {e}")))
}

fn networks<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
    let texts = Vec::<String>::deserialize(d)?;
    texts
        .iter()
        .map(|t| {
            t.parse::<IpNet>()
                .or_else(|_| t.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    serde::de::Error::custom(format!(
                        "trusted_proxies: {t:?} is not an IP address or CIDR network"
                    ))
                })
        })
        .collect()
}

/// Where state lives.
#[derive(Debug, Clone)]
pub enum StoreSettings {
    Memory { max_keys: usize },
    Redis(Box<RedisConfig>),
}

impl StoreSettings {
    /// Its kind and where it is, for logs: never a password.
    pub fn describe(&self) -> String {
        use tollgate_store::redact_url;
        match self {
            StoreSettings::Memory { max_keys } => format!("memory (max_keys {max_keys})"),
            StoreSettings::Redis(config) => {
                if let Some(url) = &config.url {
                    format!("redis {}", redact_url(url))
                } else if let Some(nodes) = &config.cluster {
                    let nodes: Vec<String> = nodes.iter().map(|n| redact_url(n)).collect();
                    format!("redis cluster {}", nodes.join(","))
                } else if let Some(sentinel) = &config.sentinel {
                    format!("redis sentinel master {}", sentinel.master)
                } else {
                    "redis".to_owned()
                }
            }
        }
    }

    /// A Redis Cluster, which must be reachable to start (it learns its
    /// slots from a seed node); the other stores start without their server.
    pub fn is_cluster(&self) -> bool {
        matches!(self, StoreSettings::Redis(c) if c.cluster.is_some())
    }
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings::Memory {
            max_keys: 1_000_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemorySettings {
    #[serde(default = "default_max_keys")]
    max_keys: usize,
}

fn default_max_keys() -> usize {
    1_000_000
}

/// A policy as the server applies it.
#[derive(Debug, Clone)]
pub struct ServePolicy {
    /// What this instance enforces: the policy as declared, or under
    /// `split` its region's share.
    pub policy: Policy,
    /// The policy as the config declares it.
    pub declared: Policy,
    /// Where it is enforced, and so its bound.
    pub scope: Scope,
    /// Its store, in [`Stores::list`].
    pub store: usize,
    pub matcher: Matcher,
    /// Parts of the identity taken from a forwarded request.
    pub identity: Vec<IdentityPart>,
    pub cost: CostRule,
    /// What the policy does when the shared store cannot decide.
    pub on_store_failure: OnStoreFailure,
    /// Sub-buckets each identity's limit is split over (1: not sharded).
    pub shards: u16,
    /// Local leases for hot identities (off: `None`).
    pub hot_lease: Option<HotLeaseRule>,
    /// How it remembers request ids; `None`: `retry_window: off`.
    pub retry: Option<RetryRule>,
}

pub use tollgate_limiter::HotLeaseRule;

/// The most shards a policy may split an identity over.
pub const MAX_SHARDS: u64 = 256;

/// One part of an identity, taken from the request being limited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityPart {
    /// A header's value, as is.
    Header(String),
    /// An API key in a header, hashed with the identity key.
    ApiKey(String),
    /// The token of `Authorization: Bearer <token>`, hashed.
    Bearer,
    /// The client's address (forwarded only from trusted proxies).
    ClientIp,
    Method,
    Path,
    /// The policy's `match.path` pattern (or prefix) that matched.
    Route,
    Host,
    /// A constant: every request shares one bucket.
    Literal(String),
}

impl IdentityPart {
    /// The part's name inside a composite identity.
    pub fn name(&self) -> &str {
        match self {
            IdentityPart::Header(h) => h,
            IdentityPart::ApiKey(_) => "api_key",
            IdentityPart::Bearer => "bearer",
            IdentityPart::ClientIp => "client_ip",
            IdentityPart::Method => "method",
            IdentityPart::Path => "path",
            IdentityPart::Route => "route",
            IdentityPart::Host => "host",
            IdentityPart::Literal(_) => "literal",
        }
    }

    pub fn is_secret(&self) -> bool {
        matches!(self, IdentityPart::ApiKey(_) | IdentityPart::Bearer)
    }

    /// The part as written in config, for `/v1/policies`.
    pub fn describe(&self) -> String {
        match self {
            IdentityPart::Header(h) => format!("header:{h}"),
            IdentityPart::ApiKey(h) => format!("api_key:{h}"),
            IdentityPart::Literal(v) => format!("literal:{v}"),
            other => other.name().to_owned(),
        }
    }
}

/// What a request costs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CostRule {
    Constant(u64),
    /// Read from a header; `default` when absent, refused below `min`
    /// (1 unless the config says 0: a client never chooses a free request)
    /// and above `max`.
    Header {
        name: String,
        min: u64,
        max: u64,
        default: u64,
    },
}

impl ServeConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigLoadError> {
        // A variable that is not UTF-8 is read lossily rather than as unset:
        // an unreadable token must be refused, not leave its endpoint open.
        Self::load_with_env(path, |name| {
            std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
        })
    }

    /// [`Self::load`] for an instance told its region (`--region`), which
    /// wins over `TOLLGATE_REGION` and the file's `region:`.
    pub fn load_in_region(path: &Path, region: Option<&str>) -> Result<Self, ConfigLoadError> {
        let overrides = Overrides {
            region: region.map(str::to_owned),
            store: None,
        };
        Self::load_overridden(path, &overrides)
    }

    /// [`Self::load`] as `tollgate serve` was told: `--region` and
    /// `--store` (or their environment variables) over the file's own.
    pub fn load_overridden(path: &Path, overrides: &Overrides) -> Result<Self, ConfigLoadError> {
        let region = overrides.region.as_deref();
        Self::load_inner(
            path,
            |name| match region.filter(|_| name == crate::scope::REGION_ENV) {
                Some(region) => Some(region.to_owned()),
                None => std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()),
            },
            overrides.store.as_deref(),
        )
    }

    /// [`Self::load`] with `env` resolving environment variables.
    pub fn load_with_env(
        path: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigLoadError> {
        Self::load_inner(path, env, None)
    }

    fn load_inner(
        path: &Path,
        env: impl Fn(&str) -> Option<String>,
        store: Option<&str>,
    ) -> Result<Self, ConfigLoadError> {
        let shown = || path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigLoadError::Read {
            path: shown(),
            source,
        })?;
        let parsed = parse_yaml_named(&text, &shown()).and_then(|mut doc| {
            if let Some(store) = store {
                replace_store(&mut doc, store)?;
            }
            Self::parse_doc(&text, doc, env)
        });
        let mut config = parsed.map_err(|source| ConfigLoadError::Invalid {
            path: shown(),
            source,
        })?;
        if let Some(paths) = &config.server.tls {
            let base = path.parent().unwrap_or_else(|| Path::new("."));
            let tls = EdgeTls::load(paths, base).map_err(|source| ConfigLoadError::Tls {
                path: shown(),
                source,
            })?;
            config.tls = Some(tls);
        }
        if !config.envoy_ratelimit_configs.is_empty() {
            let base = path.parent().unwrap_or_else(|| Path::new("."));
            let paths: Vec<PathBuf> = config
                .envoy_ratelimit_configs
                .iter()
                .map(|p| base.join(p))
                .collect();
            let rules =
                EnvoyRules::load(&paths, &config.set).map_err(|source| ConfigLoadError::Envoy {
                    path: shown(),
                    source,
                })?;
            // A change to an envoyproxy/ratelimit file is a config change.
            config.hash = blake3::hash(format!("{}{}", config.hash, rules.content_hash).as_bytes())
                .to_hex()[..16]
                .to_owned();
            config.envoy = Arc::new(rules);
        }
        Ok(config)
    }

    /// The loaded `server.tls`; an error when it is set but was not loaded
    /// (a config from [`Self::parse`] alone cannot read its files).
    pub fn edge_tls(&self) -> Result<Option<&EdgeTls>, TlsNotLoaded> {
        match (&self.server.tls, &self.tls) {
            (Some(_), None) => Err(TlsNotLoaded),
            (_, tls) => Ok(tls.as_ref()),
        }
    }

    /// The envoyproxy/ratelimit paths as read, relative to `config_path`.
    pub fn envoy_paths(&self, config_path: &Path) -> Vec<PathBuf> {
        let base = config_path.parent().unwrap_or_else(|| Path::new("."));
        self.envoy_ratelimit_configs
            .iter()
            .map(|p| base.join(p))
            .collect()
    }

    /// Parses and validates; `env` resolves environment variables.
    pub fn parse(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Self::parse_doc(text, parse_yaml(text)?, env)
    }

    /// [`Self::parse`] for the text of file `source`, which a YAML syntax
    /// error names (`--> tollgate.yaml:4:4`) with the lines around it.
    pub fn parse_named(
        text: &str,
        source: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        Self::parse_doc(text, parse_yaml_named(text, source)?, env)
    }

    fn parse_doc(
        text: &str,
        doc: Value,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let top = doc
            .as_object()
            .ok_or_else(|| ConfigError::Document("expected a mapping with `policies`".into()))?;
        for key in top.keys() {
            if !matches!(
                key.as_str(),
                "server"
                    | "store"
                    | "stores"
                    | "region"
                    | "regions"
                    | "policies"
                    | "envoy_ratelimit_configs"
            ) {
                return Err(ConfigError::Document(format!(
                    "unknown top-level field {key:?} (expected: server, store, policies, envoy_ratelimit_configs)"
                )));
            }
        }
        let envoy_ratelimit_configs = parse_envoy_paths(top.get("envoy_ratelimit_configs"))?;
        let server: ServerSettings = match top.get("server") {
            None | Some(Value::Null) => ServerSettings::default(),
            Some(v) => serde_json::from_value(v.clone())
                .map_err(|e| ConfigError::Document(format!("server: {e}")))?,
        };
        if server.http_workers > MAX_HTTP_WORKERS {
            return Err(ConfigError::Document(format!(
                "server: http_workers {} is more than {MAX_HTTP_WORKERS}",
                server.http_workers
            )));
        }
        for (name, value) in [
            ("max_body_bytes", server.max_body_bytes),
            ("max_key_bytes", server.max_key_bytes),
            ("max_checks", server.max_checks),
        ] {
            if value == 0 {
                return Err(ConfigError::Document(format!(
                    "server: {name} must be positive"
                )));
            }
        }
        if !MAX_HEADERS_RANGE.contains(&server.max_headers) {
            return Err(ConfigError::Document(format!(
                "server: max_headers {} is outside {}..={}",
                server.max_headers,
                MAX_HEADERS_RANGE.start(),
                MAX_HEADERS_RANGE.end()
            )));
        }
        if !MAX_HEADER_BYTES_RANGE.contains(&server.max_header_bytes) {
            return Err(ConfigError::Document(format!(
                "server: max_header_bytes {} is outside {}..={}",
                server.max_header_bytes,
                MAX_HEADER_BYTES_RANGE.start(),
                MAX_HEADER_BYTES_RANGE.end()
            )));
        }
        if server.request_timeout_ms == 0 {
            return Err(ConfigError::Document(
                "server: request_timeout_ms must be positive".into(),
            ));
        }
        if server.max_connections == 0 {
            return Err(ConfigError::Document(
                "server: max_connections must be positive".into(),
            ));
        }
        if !(400..=599).contains(&server.deny_status) {
            return Err(ConfigError::Document(format!(
                "server: deny_status {} is not an HTTP error status (400-599)",
                server.deny_status
            )));
        }
        let deployment = Deployment::parse(top, &env)?;
        let stores = Stores::parse(top, &deployment)?;
        let store_hash = {
            let mut hasher = blake3::Hasher::new();
            for key in ["store", "stores"] {
                hasher.update(
                    top.get(key)
                        .map(ToString::to_string)
                        .unwrap_or_default()
                        .as_bytes(),
                );
            }
            hasher.update(deployment.region.as_deref().unwrap_or("").as_bytes());
            hasher.finalize().to_hex()[..16].to_owned()
        };
        let no_policies = Vec::new();
        let list = match top.get("policies") {
            Some(Value::Array(list)) => list,
            Some(other) => {
                return Err(ConfigError::Document(format!(
                    "`policies` must be a list, got {}",
                    describe(other)
                )));
            }
            None if !envoy_ratelimit_configs.is_empty() => &no_policies,
            None => return Err(ConfigError::Document("missing `policies`".into())),
        };
        if list.is_empty() && envoy_ratelimit_configs.is_empty() {
            return Err(ConfigError::Document(
                "`policies` is empty: a config needs at least one policy (or envoy_ratelimit_configs)".into(),
            ));
        }
        let mut set = PolicySet::default();
        let mut policies = Vec::with_capacity(list.len());
        for (index, entry) in list.iter().enumerate() {
            let fields = entry.as_object().ok_or_else(|| {
                ConfigError::Document(format!("policies[{index}] must be a mapping"))
            })?;
            let policy = parse_policy(index, fields, SERVE_FIELDS)?;
            let serve = parse_serve_fields(policy.clone(), fields, &stores, &deployment)?;
            set.push(policy)?;
            policies.push(serve);
        }
        let tokens =
            EndpointTokens::from_env(&env).map_err(|e| ConfigError::Document(e.to_string()))?;
        let hasher = if policies
            .iter()
            .any(|p| p.identity.iter().any(IdentityPart::is_secret))
        {
            let key = env(&server.identity_key_env).filter(|k| !k.is_empty()).ok_or_else(|| {
                ConfigError::Document(format!(
                    "a policy hashes an API key or bearer token, so the environment variable {} must hold the hashing key (server.identity_key_env names it)",
                    server.identity_key_env
                ))
            })?;
            if key.len() < MIN_IDENTITY_KEY_BYTES {
                return Err(ConfigError::Document(format!(
                    "the identity hashing key in {} is {} bytes: it needs at least {MIN_IDENTITY_KEY_BYTES} bytes of entropy (e.g. `openssl rand -hex 32`)",
                    server.identity_key_env,
                    key.len()
                )));
            }
            Some(SecretHasher::new(key.as_bytes()))
        } else {
            None
        };
        Ok(Self {
            server,
            stores,
            deployment,
            store_hash,
            policies,
            set,
            hash: blake3::hash(text.as_bytes()).to_hex()[..16].to_owned(),
            hasher,
            envoy_ratelimit_configs,
            envoy: Arc::new(EnvoyRules::default()),
            tokens,
            tls: None,
        })
    }

    /// What is valid but probably not meant: `validate` prints these,
    /// `serve` logs them at start.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let matching: Vec<&str> = self
            .policies
            .iter()
            .filter(|p| p.matcher != Matcher::default())
            .map(|p| p.policy.name())
            .collect();
        if !matching.is_empty() && self.server.trusted_proxies.is_empty() {
            warnings.push(format!(
                "policies {} match forwarded requests, but server.trusted_proxies is empty: /v1/authorize refuses a request description ({} headers) from any peer, and client_ip is the caller's own address",
                matching.join(", "),
                self.server.forward_auth.family
            ));
        }
        for serve in &self.policies {
            let limit = serve.policy.limits().limit();
            if let CostRule::Header { name, max, .. } = &serve.cost
                && *max > limit
            {
                warnings.push(format!(
                    "policy {}: cost.max {max} is above the limit {limit}: a request whose {name} header asks more than {limit} is never admitted (429 without Retry-After)",
                    serve.policy.name()
                ));
            }
        }
        warnings
    }
}

/// What `tollgate serve` was told on its command line or in its
/// environment that wins over the file, at start and on every reload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--region` / `TOLLGATE_REGION`.
    pub region: Option<String>,
    /// `--store` / `TOLLGATE_STORE`: `memory` or a Redis URL.
    pub store: Option<String>,
}

/// `--store`: replaces the config's one `store:` (a Redis URL keeps the
/// section's other Redis settings: timeout, prefix, credentials…). A config
/// naming its stores by role is refused: which role would it replace?
fn replace_store(doc: &mut Value, store: &str) -> Result<(), ConfigError> {
    let Some(top) = doc.as_object_mut() else {
        // Not a mapping: parse_doc says so.
        return Ok(());
    };
    if let Some(stores) = top.get("stores") {
        let roles = stores
            .as_object()
            .map(|m| {
                let named = crate::scope::STORE_ROLES
                    .iter()
                    .filter(|r| m.contains_key(**r));
                named.copied().collect::<Vec<_>>().join(", ")
            })
            .unwrap_or_default();
        return Err(ConfigError::Document(format!(
            "--store (TOLLGATE_STORE) replaces a config's one `store:`, but this config names its stores by role (stores: {roles}): change them in the file"
        )));
    }
    let current = top.get("store");
    let replacement = if store == "memory" {
        match current {
            Some(v) if v.get("memory").is_some() => v.clone(),
            _ => serde_json::json!({ "memory": null }),
        }
    } else if store.starts_with("redis://") || store.starts_with("rediss://") {
        let mut redis = current
            .and_then(|v| v.get("redis"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        redis.remove("cluster");
        redis.remove("sentinel");
        redis.insert("url".into(), Value::String(store.to_owned()));
        serde_json::json!({ "redis": redis })
    } else {
        return Err(ConfigError::Document(format!(
            "--store (TOLLGATE_STORE): {:?} is not a store: expected memory, redis://HOST:PORT or rediss://HOST:PORT",
            tollgate_store::redact_url(store)
        )));
    };
    top.insert("store".into(), replacement);
    Ok(())
}

fn parse_envoy_paths(value: Option<&Value>) -> Result<Vec<PathBuf>, ConfigError> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(list)) if !list.is_empty() => list
            .iter()
            .enumerate()
            .map(|(i, item)| {
                item.as_str()
                    .filter(|s| !s.is_empty())
                    .map(PathBuf::from)
                    .ok_or_else(|| {
                        ConfigError::Document(format!(
                            "envoy_ratelimit_configs[{i}] must be a file or directory path, got {}",
                            describe(item)
                        ))
                    })
            })
            .collect(),
        Some(other) => Err(ConfigError::Document(format!(
            "envoy_ratelimit_configs must be a non-empty list of files or directories, got {}",
            describe(other)
        ))),
    }
}

/// One store's settings (`{memory: …}` or `{redis: …}`) under `field`
/// (`store`, `stores.global`, …), which every message names.
pub(crate) fn parse_store_value(
    value: Option<&Value>,
    field: &str,
) -> Result<StoreSettings, ConfigError> {
    let fault = |m: String| ConfigError::Document(m);
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(StoreSettings::default());
    };
    let map = value
        .as_object()
        .ok_or_else(|| fault(format!("{field}: must be a mapping")))?;
    match map.iter().next() {
        Some((kind, settings)) if map.len() == 1 && kind == "memory" => {
            let settings: MemorySettings = if settings.is_null() {
                MemorySettings {
                    max_keys: default_max_keys(),
                }
            } else {
                serde_json::from_value(settings.clone())
                    .map_err(|e| fault(format!("{field}.memory: {e}")))?
            };
            if settings.max_keys == 0 {
                return Err(fault(format!("{field}.memory: max_keys must be positive")));
            }
            Ok(StoreSettings::Memory {
                max_keys: settings.max_keys,
            })
        }
        Some((kind, settings)) if map.len() == 1 && kind == "redis" => {
            let config: RedisConfig = serde_json::from_value(settings.clone())
                .map_err(|e| fault(format!("{field}.redis: {e}")))?;
            // Its messages name their field (`store.redis.url: …`) already.
            config.validate().map_err(|e| {
                fault(match e {
                    tollgate_store::StoreError::Config(message) => {
                        message.replacen("store.redis", &format!("{field}.redis"), 1)
                    }
                    other => format!("{field}.redis: {other}"),
                })
            })?;
            Ok(StoreSettings::Redis(Box::new(config)))
        }
        _ => Err(fault(format!(
            "{field}: expected exactly one of: memory, redis"
        ))),
    }
}

fn field_error(policy: &Policy, field: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Field {
        policy: policy.name().to_owned(),
        field: field.to_owned(),
        reason: reason.into(),
    }
}

fn parse_serve_fields(
    policy: Policy,
    fields: &Map<String, Value>,
    stores: &Stores,
    deployment: &Deployment,
) -> Result<ServePolicy, ConfigError> {
    let scope = parse_scope(&policy, fields.get("scope"), stores, deployment)?;
    let store = stores.index(scope.store_role()).unwrap_or_default();
    let matcher = match fields.get("match") {
        None | Some(Value::Null) => Matcher::default(),
        Some(Value::Object(m)) => parse_match(&policy, m)?,
        Some(other) => {
            return Err(field_error(
                &policy,
                "match",
                format!("must be a mapping, got {}", describe(other)),
            ));
        }
    };
    let identity = match fields.get("identity") {
        None | Some(Value::Null) => vec![IdentityPart::ClientIp],
        Some(Value::Array(parts)) if !parts.is_empty() => parts
            .iter()
            .enumerate()
            .map(|(i, p)| parse_identity_part(&policy, i, p))
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => {
            return Err(field_error(
                &policy,
                "identity",
                format!("must be a non-empty list of parts, got {}", describe(other)),
            ));
        }
    };
    let mut seen = HashSet::new();
    for part in &identity {
        if !seen.insert(part.name().to_ascii_lowercase()) {
            return Err(field_error(
                &policy,
                "identity",
                format!("part {:?} appears twice", part.describe()),
            ));
        }
        if *part == IdentityPart::Route && matcher.route().is_none() {
            return Err(field_error(
                &policy,
                "identity",
                "part \"route\" needs match.path or match.path_prefix to name the route",
            ));
        }
    }
    let cost = match fields.get("cost") {
        None | Some(Value::Null) => CostRule::Constant(1),
        Some(v @ Value::Number(_)) => {
            let cost = whole_number(&policy, "cost", v)?;
            let limit = policy.limits().limit();
            if cost > limit {
                return Err(field_error(
                    &policy,
                    "cost",
                    format!(
                        "{cost} is above the policy's limit {limit}: no request would ever be admitted"
                    ),
                ));
            }
            CostRule::Constant(cost)
        }
        Some(Value::Object(m)) => parse_cost_header(&policy, m)?,
        Some(other) => {
            return Err(field_error(
                &policy,
                "cost",
                format!(
                    "must be a whole number or {{header, max}}, got {}",
                    describe(other)
                ),
            ));
        }
    };
    let on_store_failure = parse_failure_mode(fields)
        .map_err(|fault| field_error(&policy, fault.field, fault.reason))?
        .unwrap_or(OnStoreFailure::FailOpen);
    let shards = parse_shards(&policy, fields.get("shards"), &scope, &cost)?;
    let hot_lease = parse_hot_lease(&policy, fields.get("hot_lease"), &scope, shards)?;
    let retry = retry::parse_retry(&policy, fields)?;
    Ok(ServePolicy {
        retry,
        policy: enforced(&policy, &scope, deployment),
        declared: policy,
        scope,
        store,
        matcher,
        identity,
        cost,
        on_store_failure,
        shards,
        hot_lease,
    })
}

/// `hot_lease: {above, term}`: blocks for identities deciding above `above`
/// a second on one instance, spent for `term` (default 200 ms); a block is
/// at most a tenth of the limit.
fn parse_hot_lease(
    policy: &Policy,
    value: Option<&Value>,
    scope: &Scope,
    shards: u16,
) -> Result<Option<HotLeaseRule>, ConfigError> {
    let fields = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(m)) => m,
        Some(other) => {
            return Err(field_error(
                policy,
                "hot_lease",
                format!("must be {{above, term}}, got {}", describe(other)),
            ));
        }
    };
    if let Some(key) = fields
        .keys()
        .find(|k| !["above", "term"].contains(&k.as_str()))
    {
        return Err(field_error(
            policy,
            "hot_lease",
            format!("{key}: unknown field (expected: above, term)"),
        ));
    }
    let above = fields
        .get("above")
        .and_then(Value::as_u64)
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            field_error(
                policy,
                "hot_lease",
                "above: must be a whole number of decisions a second ≥ 1",
            )
        })?;
    let term_ms = match fields.get("term") {
        None | Some(Value::Null) => 200,
        Some(Value::String(text)) => tollgate_core::parse_duration_ms(text)
            .map_err(|e| field_error(policy, "hot_lease", format!("term: {e}")))?,
        Some(other) => {
            return Err(field_error(
                policy,
                "hot_lease",
                format!(
                    "term: must be a duration such as \"200ms\", got {}",
                    describe(other)
                ),
            ));
        }
    };
    if !(10..=10_000).contains(&term_ms) {
        return Err(field_error(
            policy,
            "hot_lease",
            format!(
                "term: {} is outside 10ms..=10s",
                tollgate_core::format_duration_ms(term_ms)
            ),
        ));
    }
    if shards > 1 || matches!(scope, Scope::Leased(_)) {
        return Err(field_error(
            policy,
            "hot_lease",
            "cannot be combined with shards or scope leased (each already splits the limit)",
        ));
    }
    let max_block = policy.limits().limit() / 10;
    if max_block < 2 {
        return Err(field_error(
            policy,
            "hot_lease",
            format!(
                "the limit {} is too small: a block is at most a tenth of it and at least 2",
                policy.limits().limit()
            ),
        ));
    }
    Ok(Some(HotLeaseRule {
        above,
        term_ms,
        max_block,
        windowed: !matches!(
            policy.limits(),
            tollgate_core::Limits::TokenBucket(_) | tollgate_core::Limits::Gcra(_)
        ),
    }))
}

/// `shards: N`: each identity's limit split over N sub-buckets on distinct
/// hash tags, each an integer share (they sum to the limit), so a Cluster
/// spreads one hot identity over its masters.
fn parse_shards(
    policy: &Policy,
    value: Option<&Value>,
    scope: &Scope,
    cost: &CostRule,
) -> Result<u16, ConfigError> {
    let n = match value {
        None | Some(Value::Null) => return Ok(1),
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=MAX_SHARDS).contains(n))
            .ok_or_else(|| {
                field_error(
                    policy,
                    "shards",
                    format!(
                        "must be a whole number 1..={MAX_SHARDS}, got {}",
                        describe(v)
                    ),
                )
            })?,
    };
    if n == 1 {
        return Ok(1);
    }
    if matches!(scope, Scope::Leased(_)) {
        return Err(field_error(
            policy,
            "shards",
            "cannot be combined with scope leased (a leased share is already split by region)",
        ));
    }
    let limit = policy.limits().limit();
    let weights = vec![1; n as usize];
    let smallest = (0..n as usize)
        .map(|i| tollgate_core::split_policy(policy, &weights, i).map(|p| p.limits().limit()))
        .collect::<Option<Vec<u64>>>()
        .and_then(|shares| shares.into_iter().min())
        .ok_or_else(|| {
            field_error(
                policy,
                "shards",
                format!("{n} shards of the limit {limit} leave a shard nothing: at most {limit}"),
            )
        })?;
    if let CostRule::Constant(c) = cost
        && *c > smallest
    {
        return Err(field_error(
            policy,
            "shards",
            format!(
                "a shard's share is {smallest}, below the cost {c}: a request must fit one shard"
            ),
        ));
    }
    u16::try_from(n).map_err(|_| field_error(policy, "shards", "too many"))
}

fn parse_match(policy: &Policy, m: &Map<String, Value>) -> Result<Matcher, ConfigError> {
    let mut matcher = Matcher::default();
    for (key, value) in m {
        let field = format!("match.{key}");
        match key.as_str() {
            "methods" => {
                let list = value.as_array().filter(|l| !l.is_empty()).ok_or_else(|| {
                    field_error(policy, &field, "must be a non-empty list of HTTP methods")
                })?;
                let mut methods = Vec::with_capacity(list.len());
                for item in list {
                    let method = item
                        .as_str()
                        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphabetic()))
                        .ok_or_else(|| {
                            field_error(
                                policy,
                                &field,
                                format!("{} is not an HTTP method", describe(item)),
                            )
                        })?;
                    methods.push(method.to_ascii_uppercase());
                }
                matcher.methods = Some(methods);
            }
            "path_prefix" => {
                let prefix = value
                    .as_str()
                    .filter(|s| s.starts_with('/'))
                    .ok_or_else(|| {
                        field_error(policy, &field, "must be a path starting with '/'")
                    })?;
                normalized(policy, &field, prefix)?;
                matcher.path_prefix = Some(prefix.to_owned());
            }
            "path" => {
                let text = value.as_str().ok_or_else(|| {
                    field_error(
                        policy,
                        &field,
                        "must be a path pattern such as \"/orders/{id}\"",
                    )
                })?;
                matcher.path = Some(
                    PathPattern::parse(text)
                        .map_err(|reason| field_error(policy, &field, reason))?,
                );
                normalized(policy, &field, text)?;
            }
            "host" => {
                let host = value.as_str().filter(|s| !s.is_empty()).ok_or_else(|| {
                    field_error(
                        policy,
                        &field,
                        "must be a host name such as api.example.com or *.example.com",
                    )
                })?;
                // `api.example.com.` is `api.example.com`, fully qualified.
                let host = host.strip_suffix('.').unwrap_or(host);
                matcher.host = Some(host.to_ascii_lowercase());
            }
            "case_insensitive" => {
                matcher.case_insensitive = value.as_bool().ok_or_else(|| {
                    field_error(
                        policy,
                        &field,
                        format!("must be true or false, got {}", describe(value)),
                    )
                })?;
            }
            "trailing_slash" => {
                matcher.trailing_slash = match value.as_str() {
                    Some("ignore") => TrailingSlash::Ignore,
                    Some("strict") => TrailingSlash::Strict,
                    Some(other) => {
                        return Err(field_error(
                            policy,
                            &field,
                            format!("must be ignore or strict, got {other:?}"),
                        ));
                    }
                    None => {
                        return Err(field_error(
                            policy,
                            &field,
                            format!("must be ignore or strict, got {}", describe(value)),
                        ));
                    }
                };
            }
            _ => {
                return Err(field_error(
                    policy,
                    &field,
                    "unknown field (expected: methods, path_prefix, path, host, case_insensitive, trailing_slash)",
                ));
            }
        }
    }
    if matcher.path.is_some() && matcher.path_prefix.is_some() {
        return Err(field_error(
            policy,
            "match",
            "give path or path_prefix, not both",
        ));
    }
    Ok(matcher)
}

/// Refuses a `match` path that no request can have: requests are matched by
/// their normalized path, so `/a//b` or `/a%20b` would silently match nothing.
fn normalized(policy: &Policy, field: &str, path: &str) -> Result<(), ConfigError> {
    match normalize(path) {
        Ok(p) if p == path => Ok(()),
        Ok(p) => Err(field_error(
            policy,
            field,
            format!(
                "{path:?} matches no request: requests are matched by their normalized path, here {p:?} (docs/config.md, How paths are normalized)"
            ),
        )),
        Err(fault) => Err(field_error(policy, field, format!("{path:?}: {fault}"))),
    }
}

fn parse_identity_part(
    policy: &Policy,
    index: usize,
    value: &Value,
) -> Result<IdentityPart, ConfigError> {
    let field = format!("identity[{index}]");
    let unknown = |what: &str| {
        field_error(
            policy,
            &field,
            format!(
                "{what} is not an identity part (expected one of: header: NAME, api_key: HEADER, bearer, client_ip, method, path, route, host, literal: VALUE)"
            ),
        )
    };
    match value {
        Value::String(s) => match s.as_str() {
            "bearer" => Ok(IdentityPart::Bearer),
            "client_ip" => Ok(IdentityPart::ClientIp),
            "method" => Ok(IdentityPart::Method),
            "path" => Ok(IdentityPart::Path),
            "route" => Ok(IdentityPart::Route),
            "host" => Ok(IdentityPart::Host),
            other => Err(unknown(&format!("{other:?}"))),
        },
        Value::Object(m) if m.len() == 1 => {
            let (kind, arg) = m.iter().next().ok_or_else(|| unknown("an empty mapping"))?;
            let arg = arg.as_str().filter(|s| !s.is_empty()).ok_or_else(|| {
                field_error(
                    policy,
                    &format!("{field}.{kind}"),
                    format!("must be a non-empty string, got {}", describe(arg)),
                )
            })?;
            let header = |name: &str| -> Result<String, ConfigError> {
                if name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                {
                    Ok(name.to_ascii_lowercase())
                } else {
                    Err(field_error(
                        policy,
                        &format!("{field}.{kind}"),
                        format!("{name:?} is not a header name"),
                    ))
                }
            };
            match kind.as_str() {
                "header" => Ok(IdentityPart::Header(header(arg)?)),
                "api_key" => Ok(IdentityPart::ApiKey(header(arg)?)),
                "literal" => Ok(IdentityPart::Literal(arg.to_owned())),
                other => Err(unknown(&format!("{other:?}"))),
            }
        }
        other => Err(unknown(&describe(other))),
    }
}

fn parse_cost_header(policy: &Policy, m: &Map<String, Value>) -> Result<CostRule, ConfigError> {
    if let Some(key) = m
        .keys()
        .find(|k| !matches!(k.as_str(), "header" | "min" | "max" | "default"))
    {
        return Err(field_error(
            policy,
            &format!("cost.{key}"),
            "unknown field (expected: header, min, max, default)",
        ));
    }
    let name = m
        .get("header")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            field_error(
                policy,
                "cost.header",
                "missing: the header to read the cost from",
            )
        })?;
    let max = match m.get("max") {
        Some(v) => whole_number(policy, "cost.max", v)?,
        None => {
            return Err(field_error(
                policy,
                "cost.max",
                "missing: a cost read from a header needs a maximum",
            ));
        }
    };
    if max == 0 {
        return Err(field_error(policy, "cost.max", "must be positive"));
    }
    let min = match m.get("min") {
        Some(v) => whole_number(policy, "cost.min", v)?,
        None => 1,
    };
    if min > max {
        return Err(field_error(
            policy,
            "cost.min",
            format!("{min} is above cost.max {max}"),
        ));
    }
    let default = match m.get("default") {
        Some(v) => whole_number(policy, "cost.default", v)?,
        None => min.max(1),
    };
    if default > max {
        return Err(field_error(
            policy,
            "cost.default",
            format!("{default} is above cost.max {max}"),
        ));
    }
    if default < min {
        return Err(field_error(
            policy,
            "cost.default",
            format!("{default} is below cost.min {min}"),
        ));
    }
    if HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(field_error(
            policy,
            "cost.header",
            format!("{name:?} is not a header name"),
        ));
    }
    Ok(CostRule::Header {
        name: name.to_ascii_lowercase(),
        min,
        max,
        default,
    })
}

/// `value` as a whole number ≥ 0, or a fault naming the policy's field.
fn whole_number(policy: &Policy, field: &str, value: &Value) -> Result<u64, ConfigError> {
    value.as_u64().ok_or_else(|| {
        field_error(
            policy,
            field,
            format!("must be a whole number ≥ 0, got {}", describe(value)),
        )
    })
}

#[cfg(test)]
mod tests;
