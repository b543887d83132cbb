//! Where state lives: one store's settings (`{memory: …}` or `{redis: …}`)
//! and the stores a config names by role (`local`, `regional`, `global`),
//! or today's single `store:`. A policy's scope picks one of them.

use serde::Deserialize;
use serde_json::{Map, Value};
use tollgate_core::{ConfigError, NodePath, describe, node_path, unknown_field};
use tollgate_limiter::RedisConfig;

use crate::fields::{deserialize_at as deserialize, doc};
use crate::regions::{Deployment, REGION_ENV};

/// The stores' roles, in the order the limiter asks them: the cheapest
/// first, so a local rejection never pays a round trip.
pub const STORE_ROLES: [&str; 3] = ["local", "regional", "global"];

/// Where state lives.
#[derive(Debug, Clone)]
pub enum StoreSettings {
    /// This instance's memory.
    Memory {
        /// The most keys held; near it, the key nearest to expiry is evicted.
        max_keys: usize,
    },
    /// A Redis server, Cluster or Sentinel-watched master.
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

/// What `/readyz` answers while a store does not answer its ping
/// (`readiness_when_down`, per store).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Readiness {
    /// Ready (the default): every policy on it still answers per its
    /// failure mode, so an outage pulls no instance out of service.
    #[default]
    Ready,
    /// Not ready (`503`): for a deployment where answering without this
    /// store is worse than not answering (every policy on it
    /// `fail_closed`, and another pool to take the traffic).
    NotReady,
}

impl Readiness {
    /// Its name in the config.
    pub fn name(self) -> &'static str {
        match self {
            Readiness::Ready => "ready",
            Readiness::NotReady => "not_ready",
        }
    }
}

/// The key beside `memory`/`redis` in a store's mapping.
const READINESS_KEY: &str = "readiness_when_down";

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

/// One store's settings (`{memory: …}` or `{redis: …}`) under `field`
/// (`store`, `stores.global`, …), which every message names; `at` is
/// where that is in the document.
fn parse_store_value(
    value: Option<&Value>,
    field: &str,
    at: &NodePath,
) -> Result<(StoreSettings, Readiness), ConfigError> {
    let fault = |m: String, below: &[&str]| {
        let path = below.iter().fold(at.clone(), |path, key| path.then(*key));
        ConfigError::Document(m).at(path)
    };
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok((StoreSettings::default(), Readiness::Ready));
    };
    let map = value
        .as_object()
        .ok_or_else(|| fault(format!("{field}: must be a mapping"), &[]))?;
    let readiness = match map.get(READINESS_KEY) {
        None => Readiness::Ready,
        Some(Value::String(v)) if v == "ready" => Readiness::Ready,
        Some(Value::String(v)) if v == "not_ready" => Readiness::NotReady,
        Some(other) => {
            return Err(fault(
                format!(
                    "{field}.{READINESS_KEY}: must be ready or not_ready, got {}",
                    describe(other)
                ),
                &[READINESS_KEY],
            ));
        }
    };
    let mut map = map.clone();
    map.remove(READINESS_KEY);
    let settings = parse_store_kind(&map, field, at)?;
    if readiness != Readiness::Ready && matches!(settings, StoreSettings::Memory { .. }) {
        return Err(fault(
            format!("{field}.{READINESS_KEY}: a memory store is never down (it is in the process)"),
            &[READINESS_KEY],
        ));
    }
    Ok((settings, readiness))
}

/// A store's mapping without its readiness: exactly one of `memory`, `redis`.
fn parse_store_kind(
    map: &Map<String, Value>,
    field: &str,
    at: &NodePath,
) -> Result<StoreSettings, ConfigError> {
    let fault = |m: String, below: &[&str]| {
        let path = below.iter().fold(at.clone(), |path, key| path.then(*key));
        ConfigError::Document(m).at(path)
    };
    match map.iter().next() {
        Some((kind, settings)) if map.len() == 1 && kind == "memory" => {
            let settings: MemorySettings = if settings.is_null() {
                MemorySettings {
                    max_keys: default_max_keys(),
                }
            } else {
                deserialize(
                    settings,
                    at.clone().then("memory"),
                    &format!("{field}.memory"),
                )?
            };
            if settings.max_keys == 0 {
                return Err(fault(
                    format!("{field}.memory: max_keys must be positive"),
                    &["memory", "max_keys"],
                ));
            }
            Ok(StoreSettings::Memory {
                max_keys: settings.max_keys,
            })
        }
        Some((kind, settings)) if map.len() == 1 && kind == "redis" => {
            let redis_at = at.clone().then("redis");
            secrets_are_text(settings, field, &redis_at)?;
            let config: RedisConfig =
                deserialize(settings, redis_at.clone(), &format!("{field}.redis"))?;
            // Its faults name their field (`store.redis.url`) as a config
            // with one `store:` does; here it is under `field`.
            config.check().map_err(|e| {
                let below = e.field.strip_prefix("store.redis").unwrap_or("");
                let below = below.strip_prefix('.').unwrap_or(below);
                let path = if below.is_empty() {
                    redis_at.clone()
                } else {
                    redis_at.clone().then_field(below)
                };
                ConfigError::Document(format!("{field}.redis{}: {}", dotted(below), e.reason))
                    .at(path)
            })?;
            Ok(StoreSettings::Redis(Box::new(config)))
        }
        Some((kind, _)) if !matches!(kind.as_str(), "memory" | "redis") => Err(fault(
            format!(
                "{field}: {kind}: {}",
                unknown_field(kind, &["memory", "redis", READINESS_KEY])
            ),
            &[kind],
        )),
        _ => Err(fault(
            format!("{field}: expected exactly one of: memory, redis"),
            &[],
        )),
    }
}

/// `.name`, or nothing for no name.
fn dotted(name: &str) -> String {
    if name.is_empty() {
        String::new()
    } else {
        format!(".{name}")
    }
}

/// A password or URL of the wrong type would be quoted by the
/// deserializer's message (`invalid type: integer `123456``): refuse it
/// here, by name and without its value.
fn secrets_are_text(redis: &Value, field: &str, at: &NodePath) -> Result<(), ConfigError> {
    let text = |v: &Value| v.is_string();
    let list = |v: &Value| v.as_array().is_some_and(|items| items.iter().all(text));
    let sentinel_nodes = redis.get("sentinel").and_then(|s| s.get("nodes"));
    let wrong = [
        ("password", redis.get("password"), "a string"),
        ("username", redis.get("username"), "a string"),
        ("url", redis.get("url"), "a string"),
        ("cluster", redis.get("cluster"), "a list of strings"),
        ("sentinel.nodes", sentinel_nodes, "a list of strings"),
    ]
    .into_iter()
    .find(|(_, value, kind)| {
        value.is_some_and(|v| {
            if kind.starts_with("a list") {
                !list(v)
            } else {
                !text(v)
            }
        })
    });
    match wrong {
        Some((name, _, kind)) => Err(ConfigError::Document(format!(
            "{field}.redis.{name}: must be {kind} (quote it)"
        ))
        .at(at.clone().then_field(name))),
        None => Ok(()),
    }
}

/// The stores a config names, by role, in [`STORE_ROLES`] order.
#[derive(Debug, Clone)]
pub struct Stores {
    /// Each named store with its role; a policy's store is an index here.
    pub list: Vec<(&'static str, StoreSettings)>,
    /// Each store's `readiness_when_down`, as `list`.
    pub readiness: Vec<Readiness>,
}

impl Stores {
    /// `stores:` (roles to stores; `regional` may map each region to its
    /// store), or today's single `store:`, or the memory store by default.
    pub fn parse(top: &Map<String, Value>, deployment: &Deployment) -> Result<Self, ConfigError> {
        match (top.get("store"), top.get("stores")) {
            (Some(_), Some(_)) => Err(doc(
                "give store (one store) or stores (by role), not both".into()
            )
            .at(node_path!["stores"])),
            (None, Some(Value::Object(map))) if !map.is_empty() => {
                Self::parse_roles(map, deployment)
            }
            (None, Some(other)) => Err(doc(format!(
                "stores: must map roles (local, regional, global) to stores, got {}",
                describe(other)
            ))
            .at(node_path!["stores"])),
            (store, None) => {
                let (settings, readiness) =
                    parse_store_value(store, "store", &node_path!["store"])?;
                let role = match settings {
                    StoreSettings::Memory { .. } => "local",
                    StoreSettings::Redis(_) => "global",
                };
                Ok(Self {
                    list: vec![(role, settings)],
                    readiness: vec![readiness],
                })
            }
        }
    }

    fn parse_roles(map: &Map<String, Value>, deployment: &Deployment) -> Result<Self, ConfigError> {
        if let Some(role) = map.keys().find(|k| !STORE_ROLES.contains(&k.as_str())) {
            return Err(doc(format!(
                "stores.{role}: unknown role (expected: local, regional, global)"
            ))
            .at(node_path!["stores", role]));
        }
        let mut list = Vec::new();
        let mut readiness = Vec::new();
        for role in STORE_ROLES {
            let Some(value) = map.get(role) else { continue };
            let field = format!("stores.{role}");
            let role_at = node_path!["stores", role];
            let (value, at) = if role == "regional" {
                this_regions_store(value, deployment)?
            } else {
                (value, role_at.clone())
            };
            // `local: memory` is a store with its defaults.
            let (settings, when_down) = match value {
                Value::String(kind) => {
                    let mut m = Map::new();
                    m.insert(kind.clone(), Value::Null);
                    parse_store_value(Some(&Value::Object(m)), &field, &at)?
                }
                other => parse_store_value(Some(other), &field, &at)?,
            };
            match (role, &settings) {
                ("local", StoreSettings::Memory { .. })
                | ("regional" | "global", StoreSettings::Redis(_)) => {}
                ("local", _) => {
                    return Err(doc(format!(
                        "{field}: must be a memory store (it is this instance's own)"
                    ))
                    .at(role_at));
                }
                _ => {
                    return Err(doc(format!(
                        "{field}: must be a redis store (a memory store is one instance's, not a {role} one)"
                    ))
                    .at(role_at));
                }
            }
            list.push((role, settings));
            readiness.push(when_down);
        }
        Ok(Self { list, readiness })
    }

    /// Where the store of `role` is in [`Stores::list`].
    pub fn index(&self, role: &str) -> Option<usize> {
        self.list.iter().position(|(r, _)| *r == role)
    }

    /// The store envoyproxy/ratelimit rules decide on: the most shared one.
    pub fn default_index(&self) -> usize {
        self.list.len().saturating_sub(1)
    }
}

/// `regional` as one store, or as a map of regions to stores from which
/// this instance's region's is taken; with where that store is written.
fn this_regions_store<'v>(
    value: &'v Value,
    deployment: &Deployment,
) -> Result<(&'v Value, NodePath), ConfigError> {
    let at = node_path!["stores", "regional"];
    let Value::Object(map) = value else {
        return Ok((value, at));
    };
    if map.contains_key("redis") || map.contains_key("memory") || map.contains_key(READINESS_KEY) {
        return Ok((value, at));
    }
    let region = deployment.region.as_deref().ok_or_else(|| {
        doc(format!(
            "stores.regional: names a store per region, so this instance needs its region (region:, --region or {REGION_ENV})"
        ))
        .at(at.clone())
    })?;
    match map.get(region) {
        Some(store) => Ok((store, at.then(region))),
        None => Err(doc(format!(
            "stores.regional: no store for this instance's region {region:?} (it names: {})",
            map.keys().cloned().collect::<Vec<_>>().join(", ")
        ))
        .at(at)),
    }
}
