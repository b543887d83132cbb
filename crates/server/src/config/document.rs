//! The config document as a whole: its top-level fields read in order into
//! a [`ServeConfig`], and what `tollgate serve` is told over the file
//! (`--region`, `--store`). Each section's own reading lives beside it.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Map, Value};
use tollgate_core::{ConfigError, SecretHasher, describe, node_path};

use super::ServeConfig;
use super::policy_fields::{ServePolicy, parse_policies};
use super::regions::Deployment;
use super::request_shaping::IdentityPart;
use super::server::{HotIdentityMetrics, ServerSettings};
use super::stores::{STORE_ROLES, Stores};
use crate::envoy_rules::EnvoyRules;
use crate::tokens::EndpointTokens;
use tollgate_limiter::{DecisionSampling, HotSeries};

/// The shortest secret-hashing key accepted: 32 bytes, as many as BLAKE3's
/// key (a key of fewer bytes cannot hold 32 bytes of entropy).
const MIN_IDENTITY_KEY_BYTES: usize = 32;

/// A parsed document as a validated config; `text` is hashed to tell which
/// config an instance runs, `env` resolves environment variables.
pub(super) fn parse_doc(
    text: &str,
    doc: Value,
    env: impl Fn(&str) -> Option<String>,
) -> Result<ServeConfig, ConfigError> {
    let top = doc
        .as_object()
        .ok_or_else(|| ConfigError::Document("expected a mapping with `policies`".into()))?;
    check_top_level(top)?;
    let envoy_ratelimit_configs = parse_envoy_paths(top.get("envoy_ratelimit_configs"))?;
    let server = ServerSettings::parse(top.get("server"))?;
    let deployment = Deployment::parse(top, &env)?;
    let stores = Stores::parse(top, &deployment)?;
    let store_hash = store_hash(top, &deployment);
    let list = policy_entries(top, !envoy_ratelimit_configs.is_empty())?;
    let (set, policies) = parse_policies(list, &stores, &deployment)?;
    let tokens =
        EndpointTokens::from_env(&env).map_err(|e| ConfigError::Document(e.to_string()))?;
    tokens.require(&server.require_tokens).map_err(|e| {
        ConfigError::Document(e.to_string()).at(node_path!["server", "require_tokens"])
    })?;
    let identity_key = env(&server.identity_key_env).filter(|k| !k.is_empty());
    let hasher = identity_hasher(&policies, &server, identity_key.as_deref())?;
    let hot_series = hot_series(&server, identity_key.as_deref())?;
    let decision_sampling = decision_sampling(&server, identity_key.as_deref())?;
    let trace_identity = trace_identity(&server, identity_key.as_deref())?;
    Ok(ServeConfig {
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
        hot_series,
        decision_sampling,
        trace_identity,
    })
}

/// The document's top-level fields, in the order the docs list them.
const TOP_LEVEL: [&str; 7] = [
    "server",
    "region",
    "regions",
    "store",
    "stores",
    "policies",
    "envoy_ratelimit_configs",
];

/// Refuses a top-level field the document does not know.
fn check_top_level(top: &Map<String, Value>) -> Result<(), ConfigError> {
    for key in top.keys() {
        if !TOP_LEVEL.contains(&key.as_str()) {
            return Err(ConfigError::Document(format!(
                "unknown top-level field {key:?} (expected: {})",
                TOP_LEVEL.join(", ")
            ))
            .at(node_path![key]));
        }
    }
    Ok(())
}

/// A hash of the stores and the region, which a reload may not change.
fn store_hash(top: &Map<String, Value>, deployment: &Deployment) -> String {
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
}

/// The `policies` list: required, and not empty, unless the config has
/// envoyproxy/ratelimit files to decide by.
fn policy_entries(top: &Map<String, Value>, has_envoy: bool) -> Result<&[Value], ConfigError> {
    let list = match top.get("policies") {
        Some(Value::Array(list)) => list.as_slice(),
        Some(other) => {
            return Err(ConfigError::Document(format!(
                "`policies` must be a list, got {}",
                describe(other)
            ))
            .at(node_path!["policies"]));
        }
        None if has_envoy => &[],
        None => return Err(ConfigError::Document("missing `policies`".into())),
    };
    if list.is_empty() && !has_envoy {
        return Err(ConfigError::Document(
            "`policies` is empty: a config needs at least one policy (or envoy_ratelimit_configs)"
                .into(),
        )
        .at(node_path!["policies"]));
    }
    Ok(list)
}

/// The hasher of secret identity parts, when some policy has one: keyed
/// from `key`, the variable `server.identity_key_env` names.
fn identity_hasher(
    policies: &[ServePolicy],
    server: &ServerSettings,
    key: Option<&str>,
) -> Result<Option<SecretHasher>, ConfigError> {
    if !policies
        .iter()
        .any(|p| p.identity.iter().any(IdentityPart::is_secret))
    {
        return Ok(None);
    }
    let key = key.ok_or_else(|| {
        ConfigError::Document(format!(
            "a policy hashes an API key or bearer token, so the environment variable {} must hold the hashing key (server.identity_key_env names it)",
            server.identity_key_env
        ))
    })?;
    long_enough(server, key)?;
    Ok(Some(SecretHasher::new(key.as_bytes())))
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
        (HotIdentityMetrics::Hashed, Some(key)) => {
            long_enough(server, key)?;
            let material = [b"tollgate hot identity series\0".as_slice(), key.as_bytes()].concat();
            HotSeries::Hashed(SecretHasher::new(&material))
        }
    })
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

/// Refuses an identity key too short to hold 32 bytes of entropy.
fn long_enough(server: &ServerSettings, key: &str) -> Result<(), ConfigError> {
    if key.len() < MIN_IDENTITY_KEY_BYTES {
        return Err(ConfigError::Document(format!(
            "the identity hashing key in {} is {} bytes: it needs at least {MIN_IDENTITY_KEY_BYTES} bytes of entropy (e.g. `openssl rand -hex 32`)",
            server.identity_key_env,
            key.len()
        )));
    }
    Ok(())
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

/// `--store`: replaces the config's one `store:` (a Redis URL keeps the
/// section's other Redis settings: timeout, prefix, credentials…). A config
/// naming its stores by role is refused: which role would it replace?
pub(super) fn replace_store(doc: &mut Value, store: &str) -> Result<(), ConfigError> {
    let Some(top) = doc.as_object_mut() else {
        // Not a mapping: parse_doc says so.
        return Ok(());
    };
    if let Some(stores) = top.get("stores") {
        let roles = stores
            .as_object()
            .map(|m| {
                let named = STORE_ROLES.iter().filter(|r| m.contains_key(**r));
                named.copied().collect::<Vec<_>>().join(", ")
            })
            .unwrap_or_default();
        return Err(ConfigError::Document(format!(
            "--store (TOLLGATE_STORE) replaces a config's one `store:`, but this config names its stores by role (stores: {roles}): change them in the file"
        ))
        .at(node_path!["stores"]));
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
