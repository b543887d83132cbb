//! The config document as `tollgate serve` reads it: the shared sections
//! (regions, stores, policies: `tollgate_config`), then what only the
//! server reads (`server`, the endpoint tokens, envoyproxy/ratelimit
//! files) into a [`ServeConfig`], and what `tollgate serve` is told over
//! the file (`--region`, `--store`).

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Map, Value};
use tollgate_config::{Config, Matcher, ServerFields, check_identity_key, top_level};
use tollgate_core::{ConfigError, SecretHasher, describe, node_path};

use super::ServeConfig;
use super::server::{HotIdentityMetrics, ServerSettings};
use crate::envoy_rules::EnvoyRules;
use crate::tokens::EndpointTokens;
use tollgate_limiter::{DecisionSampling, HotSeries};

/// What a config is read for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Serving it: every setting is required as `serve` needs it.
    Serve,
    /// Deciding by its policies alone (`replay`, `compare`): the identity
    /// key, the endpoint tokens and `server.trace`'s key are not needed,
    /// so none of them is read from the environment.
    Policies,
}

/// A parsed document as a validated config; `text` is hashed to tell which
/// config an instance runs, `env` resolves environment variables.
pub(super) fn parse_doc(
    text: &str,
    doc: Value,
    env: impl Fn(&str) -> Option<String>,
    reading: Reading,
) -> Result<ServeConfig, ConfigError> {
    let top: &Map<String, Value> = top_level(&doc)?;
    let envoy_ratelimit_configs = parse_envoy_paths(top.get("envoy_ratelimit_configs"))?;
    let server = ServerSettings::parse(top.get("server"))?;
    let fields = ServerFields {
        identity_key_env: server.identity_key_env.clone(),
        shadow_mode: server.shadow_mode,
        request: server.request(),
        reads_requests: reading == Reading::Serve,
    };
    let shared = Config::read(
        text,
        top,
        &env,
        &fields,
        !envoy_ratelimit_configs.is_empty(),
    )?;
    if !server.forward_auth.is_off() {
        refuse_forward_auth_permits(&shared)?;
    }
    if reading == Reading::Policies {
        return Ok(ServeConfig {
            shared,
            server,
            envoy_ratelimit_configs,
            envoy: Arc::new(EnvoyRules::default()),
            tokens: EndpointTokens::default(),
            tls: None,
            hot_series: HotSeries::Off,
            decision_sampling: DecisionSampling::default(),
            trace_identity: HotSeries::Off,
        });
    }
    let tokens =
        EndpointTokens::from_env(&env).map_err(|e| ConfigError::Document(e.to_string()))?;
    tokens.require(&server.require_tokens).map_err(|e| {
        ConfigError::Document(e.to_string()).at(node_path!["server", "require_tokens"])
    })?;
    let identity_key = env(&server.identity_key_env).filter(|k| !k.is_empty());
    let hot_series = hot_series(&server, identity_key.as_deref())?;
    let decision_sampling = decision_sampling(&server, identity_key.as_deref())?;
    let trace_identity = trace_identity(&server, identity_key.as_deref())?;
    Ok(ServeConfig {
        shared,
        server,
        envoy_ratelimit_configs,
        envoy: Arc::new(EnvoyRules::default()),
        tokens,
        tls: None,
        hot_series,
        decision_sampling,
        trace_identity,
    })
}

/// A concurrency policy with `match` is one forward auth would apply, and
/// forward auth never hears that a request ended: every permit it took
/// would be held until its lease ended. Refused, naming the door; without
/// `match` the policy is for /v1/check and /v1/release (which /v1/authorize
/// skips), and the tower layer matches requests itself. A server with
/// `forward_auth: off` (serving a layer's file) applies no `match`.
fn refuse_forward_auth_permits(config: &Config) -> Result<(), ConfigError> {
    let found = config.policies.iter().enumerate().find(|(_, serve)| {
        serve.declared.limits().holds_permits() && serve.matcher != Matcher::default()
    });
    let Some((i, serve)) = found else {
        return Ok(());
    };
    Err(ConfigError::Field {
        policy: serve.declared.name().to_owned(),
        field: "match".to_owned(),
        reason: "a concurrency policy cannot be applied by forward auth (/v1/authorize): a proxy's auth request never says when the request ends, so its permit would be held until its lease ends; take `match` away and acquire and release through /v1/check and /v1/release, apply it in the service with tollgate-tower, or turn forward auth off here (server.forward_auth: off)".to_owned(),
    }
    .at(node_path!["policies", i, "match"]))
}

/// How the hot identity series name identities (`server.hot_identity_metrics`).
/// Hashed ones use the identity key, domain-separated from the identity
/// parts' hashes; without a key, hashed series are off.
fn hot_series(server: &ServerSettings, key: Option<&str>) -> Result<HotSeries, ConfigError> {
    series_of(server.hot_identity_metrics, server, key)
}

/// Identities named as `mode` says (see [`hot_series`]).
fn series_of(
    mode: HotIdentityMetrics,
    server: &ServerSettings,
    key: Option<&str>,
) -> Result<HotSeries, ConfigError> {
    Ok(match (mode, key) {
        (HotIdentityMetrics::Off, _) | (HotIdentityMetrics::Hashed, None) => HotSeries::Off,
        (HotIdentityMetrics::Raw, _) => HotSeries::Raw,
        (HotIdentityMetrics::Hashed, Some(key)) => hashed_series(&server.identity_key_env, key)?,
    })
}

/// Identities named by the keyed hash of `key` (the variable `env`
/// holds it), as the hashed hot identity series, the logs and
/// `server.trace` name them; a key too short is refused.
pub fn hashed_series(env: &str, key: &str) -> Result<HotSeries, ConfigError> {
    check_identity_key(env, key)?;
    let material = [b"tollgate hot identity series\0".as_slice(), key.as_bytes()].concat();
    Ok(HotSeries::Hashed(SecretHasher::new(&material)))
}

/// How `server.decision_log` samples decisions, and how every log line
/// names identities (the decision log's, the rejected and degraded lines,
/// an operator's reset): as the hot identity series would (the same keyed
/// hash, or raw when those are raw), even when those series are off; `-`
/// without an identity key.
fn decision_sampling(
    server: &ServerSettings,
    key: Option<&str>,
) -> Result<DecisionSampling, ConfigError> {
    let identity = match server.hot_identity_metrics {
        HotIdentityMetrics::Raw => HotSeries::Raw,
        _ => series_of(HotIdentityMetrics::Hashed, server, key)?,
    };
    let percent = server.decision_log.map_or(0.0, |log| log.sample_percent);
    Ok(DecisionSampling::percent(percent, identity))
}

/// How `server.trace` names identities: always the keyed hash, so a
/// capture never holds who was asking; without a key it is refused.
fn trace_identity(server: &ServerSettings, key: Option<&str>) -> Result<HotSeries, ConfigError> {
    if server.trace.is_none() {
        return Ok(HotSeries::Off);
    }
    match series_of(HotIdentityMetrics::Hashed, server, key)? {
        HotSeries::Off => Err(ConfigError::Document(format!(
            "server.trace hashes the identities it captures with the identity key, so the environment variable {} must hold it",
            server.identity_key_env
        ))
        .at(node_path!["server", "trace"])),
        hashed => Ok(hashed),
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
    /// `--shadow-mode` / `TOLLGATE_SHADOW_MODE`: over `server.shadow_mode`.
    pub shadow_mode: Option<bool>,
}

/// `envoy_ratelimit_configs`: the files or directories, as written.
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
                        .at(node_path!["envoy_ratelimit_configs", i])
                    })
            })
            .collect(),
        Some(other) => Err(ConfigError::Document(format!(
            "envoy_ratelimit_configs must be a non-empty list of files or directories, got {}",
            describe(other)
        ))
        .at(node_path!["envoy_ratelimit_configs"])),
    }
}
