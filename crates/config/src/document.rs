//! The config document as a whole, as every door reads it: the regions,
//! the stores and the policies, read in order into a [`Config`], with the
//! `server` fields every door needs (`server_fields`: the identity key's
//! variable, shadow mode, how a request is read). The rest of `server` and
//! `envoy_ratelimit_configs` are the server's to read; a door only knows
//! their names. Each section's own reading lives beside this file.

use std::path::Path;

use serde_json::{Map, Value};
use tollgate_core::{
    ConfigError, PolicySet, SecretHasher, describe, node_path, parse_yaml, parse_yaml_named,
    unknown_field,
};

use crate::policy_fields::{ServePolicy, parse_policies};
use crate::regions::Deployment;
use crate::request_shaping::IdentityPart;
use crate::server_fields::{RequestSettings, ServerFields};
use crate::stores::{STORE_ROLES, Stores};

/// The shortest secret-hashing key accepted: 32 bytes, as many as BLAKE3's
/// key (a key of fewer bytes cannot hold 32 bytes of entropy).
const MIN_IDENTITY_KEY_BYTES: usize = 32;

/// What every door needs of a config file, validated: the stores, the
/// region, and each policy with its scope, match, identity and cost.
#[derive(Debug, Clone)]
pub struct Config {
    /// The stores by role (`store:` alone is one of them).
    pub stores: Stores,
    /// This instance's region and the regions there are.
    pub deployment: Deployment,
    /// A hash of the stores and the region: a reload may not change them.
    pub store_hash: String,
    /// The policies as the doors apply them, in the file's order.
    pub policies: Vec<ServePolicy>,
    /// The policies as declared, as one core set.
    pub set: PolicySet,
    /// A short hash of the config text, to tell which config an instance runs.
    pub hash: String,
    /// Each policy's entry as written, digested, in the file's order: what
    /// a reload compares to say which policies it changed.
    pub policy_digests: Vec<String>,
    /// Present when some policy hashes an API key or bearer token.
    pub hasher: Option<SecretHasher>,
    /// `server.shadow_mode`: every policy decided and counted, none enforced.
    pub shadow_mode: bool,
    /// How a door reads a request: trusted proxies, the longest identity,
    /// the request id header.
    pub request: RequestSettings,
}

/// Why a config file was not loaded; every message starts with the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The config file.
        path: String,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The file is not a valid config.
    #[error("{path}: {source}")]
    Invalid {
        /// The config file.
        path: String,
        /// What is wrong, and where.
        source: ConfigError,
    },
}

impl Config {
    /// Reads, parses and validates the file at `path`; `env` resolves
    /// environment variables (the region, the identity key).
    pub fn load(path: &Path, env: impl Fn(&str) -> Option<String>) -> Result<Self, LoadError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::parse_named(&text, &shown, env).map_err(|source| LoadError::Invalid {
            path: shown,
            source,
        })
    }

    /// Parses and validates `text`; `env` resolves environment variables.
    pub fn parse(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Self::from_document(text, &parse_yaml(text)?, env)
    }

    /// [`Self::parse`] for the text of file `source`, which an error names
    /// (`--> tollgate.yaml:4:4`) with the lines around the place it is about.
    pub fn parse_named(
        text: &str,
        source: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        Self::from_document(text, &parse_yaml_named(text, source)?, env)
            .map_err(|e| e.locate(text, source))
    }

    fn from_document(
        text: &str,
        doc: &Value,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let top = top_level(doc)?;
        let server = ServerFields::read(top.get("server"))?;
        let has_envoy = !matches!(top.get("envoy_ratelimit_configs"), None | Some(Value::Null));
        Self::read(text, top, &env, &server, has_envoy)
    }

    /// The shared sections of the document `top` (whose `text` is hashed),
    /// with the `server` fields they depend on; `has_envoy`: the config
    /// has envoyproxy/ratelimit files, so `policies` may be empty.
    pub fn read(
        text: &str,
        top: &Map<String, Value>,
        env: &impl Fn(&str) -> Option<String>,
        server: &ServerFields,
        has_envoy: bool,
    ) -> Result<Self, ConfigError> {
        let deployment = Deployment::parse(top, env)?;
        let stores = Stores::parse(top, &deployment)?;
        let store_hash = store_hash(top, &deployment);
        let list = policy_entries(top, has_envoy)?;
        let (set, policies) = parse_policies(list, &stores, &deployment)?;
        let identity_key = env(&server.identity_key_env).filter(|k| !k.is_empty());
        let hasher = identity_hasher(&policies, server, identity_key.as_deref())?;
        Ok(Self {
            stores,
            deployment,
            store_hash,
            policies,
            set,
            hash: blake3::hash(text.as_bytes()).to_hex()[..16].to_owned(),
            policy_digests: list
                .iter()
                .map(|entry| blake3::hash(entry.to_string().as_bytes()).to_hex()[..16].to_owned())
                .collect(),
            hasher,
            shadow_mode: server.shadow_mode,
            request: server.request.clone(),
        })
    }
}

/// The document as a mapping of known top-level fields.
pub fn top_level(doc: &Value) -> Result<&Map<String, Value>, ConfigError> {
    let top = doc
        .as_object()
        .ok_or_else(|| ConfigError::Document("expected a mapping with `policies`".into()))?;
    check_top_level(top)?;
    Ok(top)
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
                "{key}: {}",
                unknown_field(key, &TOP_LEVEL)
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
    server: &ServerFields,
    key: Option<&str>,
) -> Result<Option<SecretHasher>, ConfigError> {
    if !policies
        .iter()
        .any(|p| p.identity.iter().any(IdentityPart::is_secret))
    {
        return Ok(None);
    }
    if !server.reads_requests && key.is_none_or(|k| k.len() < MIN_IDENTITY_KEY_BYTES) {
        return Ok(None);
    }
    let key = key.ok_or_else(|| {
        ConfigError::Document(format!(
            "a policy hashes an API key or bearer token, so the environment variable {} must hold the hashing key (server.identity_key_env names it)",
            server.identity_key_env
        ))
    })?;
    check_identity_key(&server.identity_key_env, key)?;
    Ok(Some(SecretHasher::new(key.as_bytes())))
}

/// Refuses an identity key too short to hold 32 bytes of entropy; `env`
/// is the variable it came from.
pub fn check_identity_key(env: &str, key: &str) -> Result<(), ConfigError> {
    if key.len() < MIN_IDENTITY_KEY_BYTES {
        return Err(ConfigError::Document(format!(
            "the identity hashing key in {} is {} bytes: it needs at least {MIN_IDENTITY_KEY_BYTES} bytes of entropy (e.g. `openssl rand -hex 32`)",
            env,
            key.len()
        )));
    }
    Ok(())
}

/// `--store`: replaces the config's one `store:` (a Redis URL keeps the
/// section's other Redis settings: timeout, prefix, credentials…). A config
/// naming its stores by role is refused: which role would it replace?
pub fn replace_store(doc: &mut Value, store: &str) -> Result<(), ConfigError> {
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
        let mut replaced = serde_json::json!({ "redis": redis });
        // How the file's Redis store answers readiness stays with the Redis
        // that replaces it.
        if let (Some(readiness), Some(map)) = (
            current.and_then(|v| v.get("readiness_when_down")),
            replaced.as_object_mut(),
        ) {
            map.insert("readiness_when_down".into(), readiness.clone());
        }
        replaced
    } else {
        return Err(ConfigError::Document(format!(
            "--store (TOLLGATE_STORE): {:?} is not a store: expected memory, redis://HOST:PORT or rediss://HOST:PORT",
            tollgate_store::redact_url(store)
        )));
    };
    top.insert("store".into(), replacement);
    Ok(())
}
