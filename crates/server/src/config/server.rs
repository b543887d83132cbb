//! The `server` section: listeners, limits of a request, how forwarded
//! requests are described, TLS. Also which of these are read only at start,
//! so a reload reports and keeps them from one table.

use std::net::SocketAddr;
use std::path::PathBuf;

use hyper::http::HeaderName;
use ipnet::IpNet;
use serde::Deserialize;
use serde_json::Value;
use tollgate_config::{DEFAULT_IDENTITY_KEY_ENV, RequestSettings, deserialize_at};
use tollgate_core::{ConfigError, describe, node_path, unknown_field};
pub use tollgate_http::ForwardAuth;

use crate::listen::ListenAddress;
use crate::tls::TlsPaths;
use crate::tokens::Guarded;
use connections::{
    DEFAULT_HEADER_TIMEOUT_MS, DEFAULT_MAX_CONNECTIONS_PER_PEER, DEFAULT_PROXY_IDLE_TIMEOUT_MS,
};
pub use connections::{DEFAULT_MAX_CONNECTIONS, ProxySocket};
pub use otlp::{OtlpFile, Protocol, SamplerName, sampler_ratio};

mod connections;
mod otlp;

/// More HTTP workers than this is a typo, not a machine.
const MAX_HTTP_WORKERS: usize = 1024;
/// Header fields a request may carry by default: what nginx, Envoy (100 of
/// the client's by default) and Traefik forward for any real client, with
/// room for the proxy's own.
const DEFAULT_MAX_HEADERS: usize = 256;
/// Bytes a request's head may take by default: nginx forwards up to its
/// `large_client_header_buffers` (4 × 8 KiB), Envoy up to 60 KiB.
const DEFAULT_MAX_HEADER_BYTES: usize = 64 * 1024;
/// Bounds on the two: more headers cost hyper an allocation a request
/// proportional to the count.
const MAX_HEADERS_RANGE: std::ops::RangeInclusive<usize> = 16..=8192;
const MAX_HEADER_BYTES_RANGE: std::ops::RangeInclusive<usize> = 4096..=1 << 20;

/// The `server` section of a config.
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
    /// of the original request (`forward_auth`), are believed
    /// ([`RequestSettings::trusted_proxies`], as every door reads it).
    #[serde(deserialize_with = "tollgate_config::trusted_proxies")]
    pub trusted_proxies: Vec<IpNet>,
    /// Which headers describe the original request to `/v1/authorize`:
    /// `nginx` (the default), `traefik`, `envoy`, or `{method, uri, host}`.
    #[serde(deserialize_with = "forward_auth")]
    pub forward_auth: ForwardAuth,
    /// The most header fields a request may carry, and the most bytes its
    /// head may take: beyond them hyper answers 431 (never a fail-open
    /// status: docs/forward-auth.md). Read at start.
    pub max_headers: usize,
    /// The most bytes a request's head may take (see `max_headers`). Read
    /// at start.
    pub max_header_bytes: usize,
    /// The environment variable holding the secret-hashing key.
    pub identity_key_env: String,
    /// Largest request body accepted by `/v1/check`.
    pub max_body_bytes: usize,
    /// Largest encoded identity accepted
    /// ([`RequestSettings::max_key_bytes`]).
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
    /// Open connections, all listeners together, beyond which a new one is
    /// closed at once. Read at start, and checked against the file
    /// descriptors the process may open (`crate::descriptors`).
    pub max_connections: usize,
    /// The most connections one peer that is not a trusted proxy may hold
    /// (an IPv4 address; an IPv6 /64). Read at start.
    pub max_connections_per_peer: usize,
    /// How many of `max_connections` only trusted proxies (and the proxy
    /// socket) may take, so a flood from elsewhere never locks the proxy
    /// out. Absent: a quarter of `max_connections`; none while no proxy is
    /// trusted. Read at start.
    pub proxy_reserved_connections: Option<usize>,
    /// The longest a peer that is not a trusted proxy may take to send a
    /// complete request head, from its connect and between keep-alive
    /// requests; then its connection is closed. Read at start.
    pub header_timeout_ms: u64,
    /// The same bound for trusted proxies: how long their idle keep-alive
    /// connections are kept, longer than proxies keep theirs so that the
    /// proxy, not tollgate, closes an idle one. Read at start.
    pub proxy_idle_timeout_ms: u64,
    /// A unix socket serving the HTTP API to the proxy alone (nginx
    /// `proxy_pass http://unix:PATH:`, Caddy `unix/PATH`); every peer on
    /// it is a trusted proxy. Read at start.
    pub proxy_socket: Option<ProxySocket>,
    /// The longest a request's body may take to arrive (a slow body gets
    /// 408), and a TLS handshake from a trusted proxy. Read at start, like
    /// `http_workers`.
    pub request_timeout_ms: u64,
    /// TLS for both listeners: PEM certificate and key files, relative to
    /// the config file. Read at start.
    pub tls: Option<TlsPaths>,
    /// The header carrying a request id on `/v1/authorize`
    /// ([`RequestSettings::request_id_header`]).
    #[serde(deserialize_with = "tollgate_config::request_id_header")]
    pub request_id_header: Option<HeaderName>,
    /// Endpoint groups (`check`, `admin`, `metrics`) that must have a
    /// token: without its variable the config is refused, so a deployment
    /// meant to be guarded never comes up open.
    #[serde(deserialize_with = "token_groups")]
    pub require_tokens: Vec<Guarded>,
    /// How the `tollgate_hot_identity_*` series name identities.
    pub hot_identity_metrics: HotIdentityMetrics,
    /// Every policy and envoyproxy/ratelimit rule in shadow mode, as
    /// envoyproxy/ratelimit's `SHADOW_MODE`: decided and counted, never
    /// enforced (`--shadow-mode` / `TOLLGATE_SHADOW_MODE` win).
    pub shadow_mode: bool,
    /// The per-decision debug log (`tollgate::decision` target): off
    /// unless present.
    pub decision_log: Option<DecisionLogSettings>,
    /// Trace capture: sampled decisions as `tollgate replay` input lines.
    /// Read at start.
    pub trace: Option<TraceSettings>,
    /// Trace export over OTLP (`OtlpFile`); the OpenTelemetry
    /// environment names the rest or overrides it. Read at start.
    pub otlp: Option<OtlpFile>,
    /// Whether the file names `trusted_proxies`, even as `[]`: an explicit
    /// empty list says no proxy forwards requests here, which `validate`
    /// then need not warn of.
    #[serde(skip)]
    pub trusted_proxies_declared: bool,
}

/// `server.trace`: where and how much of the decisions to capture.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceSettings {
    /// The capture file, relative to the config file; opened for appending.
    pub path: PathBuf,
    /// Percent of decisions captured, 0 to 100.
    #[serde(default = "all_decisions")]
    pub sample_percent: f64,
    /// The file's cap: past it, lines are dropped and counted.
    #[serde(default = "default_trace_bytes")]
    pub max_bytes: u64,
}

fn all_decisions() -> f64 {
    100.0
}

fn default_trace_bytes() -> u64 {
    1 << 30
}

/// `server.decision_log`: which share of decisions is logged, one debug
/// event each, when the `tollgate::decision` target is enabled.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionLogSettings {
    /// Percent of decisions logged, 0 to 100 (fractions allowed).
    pub sample_percent: f64,
}

/// `server.hot_identity_metrics`: identities are client addresses, tenant
/// names, emails, and `/metrics` is often read more widely than `/v1/hot`
/// (admin token), so they reach labels raw only when asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HotIdentityMetrics {
    /// No hot identity series.
    Off,
    /// A keyed hash of each identity, keyed from `identity_key_env`;
    /// without that key the series are off.
    #[default]
    Hashed,
    /// Identities as they are.
    Raw,
}

impl Default for ServerSettings {
    fn default() -> Self {
        let RequestSettings {
            trusted_proxies,
            max_key_bytes,
            request_id_header,
        } = RequestSettings::default();
        Self {
            listen: ListenAddress::from(SocketAddr::from(([127, 0, 0, 1], 8080))),
            deny_status: 429,
            trusted_proxies,
            forward_auth: ForwardAuth::nginx(),
            max_headers: DEFAULT_MAX_HEADERS,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            identity_key_env: DEFAULT_IDENTITY_KEY_ENV.to_owned(),
            max_body_bytes: 64 * 1024,
            max_key_bytes,
            max_checks: 16,
            watch_interval_ms: 1000,
            grpc_listen: None,
            grpc_response_headers: false,
            http_workers: 0,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            proxy_reserved_connections: None,
            header_timeout_ms: DEFAULT_HEADER_TIMEOUT_MS,
            proxy_idle_timeout_ms: DEFAULT_PROXY_IDLE_TIMEOUT_MS,
            proxy_socket: None,
            request_timeout_ms: 30_000,
            tls: None,
            request_id_header,
            require_tokens: Vec::new(),
            hot_identity_metrics: HotIdentityMetrics::default(),
            shadow_mode: false,
            decision_log: None,
            trace: None,
            otlp: None,
            trusted_proxies_declared: false,
        }
    }
}

impl ServerSettings {
    /// The `server` section (absent: every default), validated.
    pub(super) fn parse(value: Option<&Value>) -> Result<Self, ConfigError> {
        let server: ServerSettings = match value {
            None | Some(Value::Null) => ServerSettings::default(),
            Some(v) => ServerSettings {
                trusted_proxies_declared: v.get("trusted_proxies").is_some(),
                ..deserialize_at(v, node_path!["server"], "server")?
            },
        };
        server.validate()?;
        Ok(server)
    }

    /// Refuses settings serde accepts but that cannot serve.
    fn validate(&self) -> Result<(), ConfigError> {
        if self.http_workers > MAX_HTTP_WORKERS {
            return Err(ConfigError::Document(format!(
                "server: http_workers {} is more than {MAX_HTTP_WORKERS}",
                self.http_workers
            ))
            .at(node_path!["server", "http_workers"]));
        }
        let positive = |name: &'static str, value: usize| {
            if value == 0 {
                return Err(
                    ConfigError::Document(format!("server: {name} must be positive"))
                        .at(node_path!["server", name]),
                );
            }
            Ok(())
        };
        positive("max_body_bytes", self.max_body_bytes)?;
        self.request().validate()?;
        positive("max_checks", self.max_checks)?;
        if let Some(log) = self.decision_log
            && !(0.0..=100.0).contains(&log.sample_percent)
        {
            return Err(ConfigError::Document(format!(
                "server: decision_log.sample_percent {} is outside 0..=100",
                log.sample_percent
            ))
            .at(node_path!["server", "decision_log", "sample_percent"]));
        }
        if let Some(trace) = &self.trace {
            if !(0.0..=100.0).contains(&trace.sample_percent) {
                return Err(ConfigError::Document(format!(
                    "server: trace.sample_percent {} is outside 0..=100",
                    trace.sample_percent
                ))
                .at(node_path!["server", "trace", "sample_percent"]));
            }
            if trace.max_bytes == 0 || trace.path.as_os_str().is_empty() {
                return Err(ConfigError::Document(
                    "server: trace needs a path and a positive max_bytes".to_owned(),
                )
                .at(node_path!["server", "trace"]));
            }
        }
        if let Some(otlp) = &self.otlp {
            otlp.validate().map_err(|fault| {
                ConfigError::Document(format!("server: otlp: {fault}"))
                    .at(node_path!["server", "otlp"])
            })?;
        }
        if !MAX_HEADERS_RANGE.contains(&self.max_headers) {
            return Err(ConfigError::Document(format!(
                "server: max_headers {} is outside {}..={}",
                self.max_headers,
                MAX_HEADERS_RANGE.start(),
                MAX_HEADERS_RANGE.end()
            ))
            .at(node_path!["server", "max_headers"]));
        }
        if !MAX_HEADER_BYTES_RANGE.contains(&self.max_header_bytes) {
            return Err(ConfigError::Document(format!(
                "server: max_header_bytes {} is outside {}..={}",
                self.max_header_bytes,
                MAX_HEADER_BYTES_RANGE.start(),
                MAX_HEADER_BYTES_RANGE.end()
            ))
            .at(node_path!["server", "max_header_bytes"]));
        }
        if self.request_timeout_ms == 0 {
            return Err(ConfigError::Document(
                "server: request_timeout_ms must be positive".into(),
            )
            .at(node_path!["server", "request_timeout_ms"]));
        }
        self.validate_connections()?;
        if !(400..=599).contains(&self.deny_status) {
            return Err(ConfigError::Document(format!(
                "server: deny_status {} is not an HTTP error status (400-599)",
                self.deny_status
            ))
            .at(node_path!["server", "deny_status"]));
        }
        Ok(())
    }

    /// How every door reads a request, as this section states it.
    pub fn request(&self) -> RequestSettings {
        RequestSettings {
            trusted_proxies: self.trusted_proxies.clone(),
            max_key_bytes: self.max_key_bytes,
            request_id_header: self.request_id_header.clone(),
        }
    }

    /// The start-only settings that `new` changes from these running ones,
    /// by name (`server.listen`), in [`START_ONLY`]'s order.
    pub(crate) fn start_only_changes(&self, new: &ServerSettings) -> Vec<&'static str> {
        START_ONLY
            .iter()
            .filter(|setting| (setting.differs)(self, new))
            .map(|setting| setting.name)
            .collect()
    }

    /// Puts back `running`'s start-only settings: what runs is what opened
    /// at start, whatever a reloaded file says.
    pub(crate) fn keep_start_only(&mut self, running: &ServerSettings) {
        for setting in &START_ONLY {
            (setting.keep)(self, running);
        }
    }
}

/// A `server` setting read once at start: a reload that changes it keeps
/// its running value, applies the rest, and says it needs a restart.
struct StartOnly {
    /// As a reload names it: `server.listen`.
    name: &'static str,
    /// Whether the running settings and new ones differ in it.
    differs: fn(&ServerSettings, &ServerSettings) -> bool,
    /// Copies it from the running settings into new ones.
    keep: fn(&mut ServerSettings, &ServerSettings),
}

/// The [`StartOnly`] entries of `server` fields, each named `server.FIELD`.
macro_rules! start_only {
    ($($field:ident),* $(,)?) => {
        [$(StartOnly {
            name: concat!("server.", stringify!($field)),
            differs: |running, new| running.$field != new.$field,
            keep: |new, running| new.$field.clone_from(&running.$field),
        }),*]
    };
}

/// The settings read once at start — listeners, workers, limits of a
/// request's head, TLS — in the order a reload reports them. Both the
/// report and the copy-back read this one list.
const START_ONLY: [StartOnly; 15] = start_only![
    listen,
    grpc_listen,
    proxy_socket,
    http_workers,
    max_connections,
    max_connections_per_peer,
    proxy_reserved_connections,
    header_timeout_ms,
    proxy_idle_timeout_ms,
    request_timeout_ms,
    max_headers,
    max_header_bytes,
    tls,
    trace,
    otlp,
];

fn forward_auth<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ForwardAuth, D::Error> {
    use serde::de::Error;
    let value = Value::deserialize(d)?;
    match &value {
        // YAML reads a bare `off` as false.
        Value::Bool(false) => Ok(ForwardAuth::off()),
        Value::String(name) => match name.as_str() {
            "nginx" => Ok(ForwardAuth::nginx()),
            "traefik" => Ok(ForwardAuth::traefik()),
            "envoy" => Ok(ForwardAuth::envoy()),
            "off" => Ok(ForwardAuth::off()),
            other => Err(D::Error::custom(format!(
                "forward_auth: unknown proxy {other:?} (expected nginx, traefik, envoy, off, or {{method, uri, host}} header names)"
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
                            "forward_auth.{other}: {}",
                            unknown_field(other, &["method", "uri", "host"])
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
            "forward_auth: must be nginx, traefik, envoy, off or a mapping of header names, got {}",
            describe(other)
        ))),
    }
}

fn token_groups<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Guarded>, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    let mut groups = Vec::with_capacity(names.len());
    for name in &names {
        let group = Guarded::from_name(name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "require_tokens: unknown endpoint group {name:?} (expected: check, admin, metrics, authorize)"
            ))
        })?;
        if !groups.contains(&group) {
            groups.push(group);
        }
    }
    Ok(groups)
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

#[cfg(test)]
mod tests;
