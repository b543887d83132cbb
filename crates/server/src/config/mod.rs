//! `tollgate serve`'s config: the shared part every door reads
//! (`tollgate_config`: the policies with their `match`, `identity` and
//! `cost`, the regions and the `store`), the `server` settings and the
//! envoyproxy/ratelimit rules. Every fault is reported with the policy and
//! field it concerns.
//!
//! [`ServeConfig`] is loaded here; `document` reads the whole in order,
//! `server` its section, `hazards` what is valid but probably not meant.

mod document;
mod hazards;
mod server;

pub use document::{Overrides, Reading, hashed_series};
pub use server::{
    DEFAULT_MAX_CONNECTIONS, HotIdentityMetrics, OtlpFile, Protocol, ProxySocket, SamplerName,
    ServerSettings, TraceSettings, sampler_ratio,
};
// The shared part's types, which a `ServeConfig`'s fields are made of.
pub use tollgate_config::{
    CostRule, Deployment, IdentityPart, REGION_ENV, ServePolicy, StoreSettings,
};
// Named by tests only: the server reaches it through `IdentityPart::ClientIp`.
#[cfg(test)]
pub(crate) use tollgate_config::ClientNetworks;

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tollgate_config::{Config, LoadError, Matcher, replace_store};
use tollgate_core::{ConfigError, parse_yaml, parse_yaml_named};

use crate::envoy_rules::EnvoyRules;
use crate::limiter::MAX_REPLAYS;
use crate::listen::ListenAddress;
use crate::tls::EdgeTls;
use crate::tokens::EndpointTokens;
use document::parse_doc;
use tollgate_limiter::{DecisionSampling, HotSeries};

/// Why a config file was not loaded; every message starts with the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigLoadError {
    /// The file could not be read, or is not a valid config (as every
    /// door reads it: tollgate-config's [`LoadError`]).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// `server.tls`'s certificate or key could not be used.
    #[error("{path}: {source}")]
    Tls {
        /// The config file.
        path: String,
        /// Which file, and why.
        source: crate::tls::TlsError,
    },
    /// An envoyproxy/ratelimit file the config names is not valid.
    #[error("{path}: envoy_ratelimit_configs: {source}")]
    Envoy {
        /// The config file.
        path: String,
        /// Which rule file, and what is wrong in it.
        source: crate::envoy_rules::RulesError,
    },
}

/// `server.tls` is set, but its files were never read: a config parsed
/// from text alone (`ServeConfig::parse`) cannot serve TLS.
#[derive(Debug, thiserror::Error)]
#[error("server.tls is set but its files were not read (load the config from its file)")]
pub struct TlsNotLoaded;

/// A whole, validated config: the part every door reads
/// (tollgate-config's [`Config`]: stores, region, policies, hashes, the
/// identity hasher), which it reads as (`config.policies`), and what only
/// the server reads.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The part every door reads.
    pub shared: Config,
    /// The `server` section.
    pub server: ServerSettings,
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
    /// How the hot identity series name identities: `server.hot_identity_metrics`
    /// with the identity key, when hashed.
    pub hot_series: HotSeries,
    /// How `server.decision_log` samples decisions (off when absent).
    pub decision_sampling: DecisionSampling,
    /// How `server.trace` names identities: hashed (off without a trace).
    pub trace_identity: HotSeries,
}

/// A `ServeConfig` is the shared config and more: `config.policies`,
/// `config.stores`, `config.hash` are the shared part's.
impl Deref for ServeConfig {
    type Target = Config;

    fn deref(&self) -> &Config {
        &self.shared
    }
}

impl DerefMut for ServeConfig {
    fn deref_mut(&mut self) -> &mut Config {
        &mut self.shared
    }
}

impl ServeConfig {
    /// Reads, parses and validates the file at `path`, with its TLS files
    /// and envoyproxy/ratelimit rules.
    pub fn load(path: &Path) -> Result<Self, ConfigLoadError> {
        // A variable that is not UTF-8 is read lossily rather than as unset:
        // an unreadable token must be refused, not leave its endpoint open.
        Self::load_with_env(path, |name| {
            std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
        })
    }

    /// [`Self::load`] as `tollgate serve` was told: `--region` and
    /// `--store` (or their environment variables) over the file's own.
    pub fn load_overridden(path: &Path, overrides: &Overrides) -> Result<Self, ConfigLoadError> {
        let region = overrides.region.as_deref();
        let mut config = Self::load_inner(
            path,
            |name| match region.filter(|_| name == REGION_ENV) {
                Some(region) => Some(region.to_owned()),
                None => std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()),
            },
            overrides.store.as_deref(),
            Reading::Serve,
        )?;
        if let Some(shadow_mode) = overrides.shadow_mode {
            config.server.shadow_mode = shadow_mode;
            config.shared.shadow_mode = shadow_mode;
        }
        Ok(config)
    }

    /// [`Self::load`] with `env` resolving environment variables.
    pub fn load_with_env(
        path: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigLoadError> {
        Self::load_inner(path, env, None, Reading::Serve)
    }

    /// The file at `path` read for its policies alone, as `tollgate
    /// replay` and `compare` read it: what only serving uses (`server.trace`
    /// and the identity key it needs, the endpoint tokens, `server.tls`'s
    /// files) is parsed but neither required nor loaded.
    pub fn load_policies(path: &Path) -> Result<Self, ConfigLoadError> {
        Self::load_inner(
            path,
            |name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()),
            None,
            Reading::Policies,
        )
    }

    fn load_inner(
        path: &Path,
        env: impl Fn(&str) -> Option<String>,
        store: Option<&str>,
        reading: Reading,
    ) -> Result<Self, ConfigLoadError> {
        let shown = || path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            path: shown(),
            source,
        })?;
        let parsed = parse_yaml_named(&text, &shown()).and_then(|mut doc| {
            if let Some(store) = store {
                replace_store(&mut doc, store)?;
            }
            parse_doc(&text, doc, env, reading)
        });
        let mut config = parsed.map_err(|source| LoadError::Invalid {
            path: shown(),
            source: source.locate(&text, &shown()),
        })?;
        if let (Some(paths), Reading::Serve) = (&config.server.tls, reading) {
            let base = path.parent().unwrap_or_else(|| Path::new("."));
            let tls = EdgeTls::load(paths, base).map_err(|source| ConfigLoadError::Tls {
                path: shown(),
                source,
            })?;
            config.tls = Some(tls);
        }
        if !config.envoy_ratelimit_configs.is_empty() {
            let paths = config.envoy_paths(path);
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
        parse_doc(text, parse_yaml(text)?, env, Reading::Serve)
    }

    /// [`Self::parse`] for the text of file `source`, which an error names
    /// (`--> tollgate.yaml:4:4`) with the lines around the place it is about.
    pub fn parse_named(
        text: &str,
        source: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        parse_doc(text, parse_yaml_named(text, source)?, env, Reading::Serve)
            .map_err(|e| e.locate(text, source))
    }

    /// What is valid but probably not meant, or dangerous to serve on the
    /// file's own listeners: `validate` prints these, a reload logs them.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings_serving(&self.server.listen, self.server.grpc_listen.as_ref())
    }

    /// [`Self::warnings`] for serving on `http` and `grpc` (`serve`'s
    /// `--listen` and `--grpc-listen` win over the file's).
    pub fn warnings_serving(
        &self,
        http: &ListenAddress,
        grpc: Option<&ListenAddress>,
    ) -> Vec<String> {
        let mut warnings = hazards::hazards(self, http, grpc);
        let matching: Vec<&str> = self
            .policies
            .iter()
            .filter(|p| p.matcher != Matcher::default())
            .map(|p| p.policy.name())
            .collect();
        // The proxy socket's peer is trusted whatever the list says.
        // `trusted_proxies: []` written out says no proxy forwards here.
        if !matching.is_empty()
            && self.server.trusted_proxies.is_empty()
            && !self.server.trusted_proxies_declared
            && self.server.proxy_socket.is_none()
        {
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
            for part in &serve.identity {
                if let IdentityPart::Header(name) = part
                    && looks_secret(name)
                {
                    let instead = if name.eq_ignore_ascii_case("authorization") {
                        "bearer (or api_key: authorization)".to_owned()
                    } else {
                        format!("api_key: {name}")
                    };
                    warnings.push(format!(
                        "policy {}: identity part header:{name} looks like a secret, and a header: part is kept as it is: its value would stand in the store's keys, in /v1/hot{}; key it as {instead} to hash it with the identity key",
                        serve.policy.name(),
                        if self.server.hot_identity_metrics == HotIdentityMetrics::Raw {
                            " and in the tollgate_hot_identity_* series (hot_identity_metrics: raw)"
                        } else {
                            ""
                        }
                    ));
                }
            }
        }
        if self.server.hot_identity_metrics == HotIdentityMetrics::Raw {
            warnings.push(
                "server.hot_identity_metrics is raw: the tollgate_hot_identity_* series carry identities as they are (client addresses, header values) to whoever reads /metrics; hashed keeps their shape without who they are".to_owned(),
            );
        }
        if self.server.ui && matches!(self.decision_sampling.identity, HotSeries::Off) {
            warnings.push(format!(
                "server.ui is on, but {} holds no identity key: the page lists its hot identities unnamed (it names them only by their keyed hash); set it to tell them apart",
                self.server.identity_key_env
            ));
        }
        warnings.extend(self.client_request_id_warnings());
        warnings
    }

    /// Policies that let a client's own id (`server.request_id_header`)
    /// replay their admissions, and settings that do nothing.
    fn client_request_id_warnings(&self) -> Vec<String> {
        let honouring = self.policies.iter().filter(|p| p.client_request_ids);
        let Some(header) = &self.server.request_id_header else {
            return honouring
                .map(|p| format!(
                    "policy {}: client_request_ids: true does nothing: server.request_id_header names no header",
                    p.policy.name()
                ))
                .collect();
        };
        let warnings: Vec<String> = honouring
            .map(|p| format!(
                "policy {}: client_request_ids: true lets the id a client chooses in {header} replay its admissions: a client reusing one id is admitted up to {MAX_REPLAYS} more times a charge within retry_window; keep it to policies whose application answers a repeated id from its own record (docs/request-ids.md)",
                p.policy.name()
            ))
            .collect();
        if warnings.is_empty() {
            return vec![format!(
                "server.request_id_header is {header}, but no policy sets client_request_ids: true: the ids clients send in it replay nothing (docs/request-ids.md)"
            )];
        }
        warnings
    }
}

/// Whether a header named `name` probably carries a credential or a
/// session: what must never be kept or shown raw.
fn looks_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    matches!(
        name.as_str(),
        "authorization" | "proxy-authorization" | "cookie" | "set-cookie"
    ) || (!name.ends_with("idempotency-key")
        && [
            "key",
            "token",
            "secret",
            "password",
            "session",
            "credential",
        ]
        .iter()
        .any(|word| name.contains(word)))
}

#[cfg(test)]
mod tests;
