//! A shipped config served for real: `tollgate serve` on loopback with test
//! tokens and identity key, its Redis URLs pointed at a real redis-server
//! on a free port. What the suite cannot run this way is refused by name.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tollgate_testkit::RedisServer;

use crate::discover::{Shipped, root};
use crate::support::TollgateProcess;

/// `TOLLGATE_IDENTITY_KEY` of every served config.
pub const IDENTITY_KEY: &str = "shipped-test-identity-key-of-32-bytes!";

/// The token of endpoint group `group` (`check`, `authorize`…).
pub fn token(group: &str) -> String {
    format!("shipped-test-{group}-token")
}

/// The config's `server.require_tokens`.
pub fn required_groups(config: &Value) -> Vec<String> {
    config
        .pointer("/server/require_tokens")
        .and_then(Value::as_array)
        .map(|groups| {
            groups
                .iter()
                .filter_map(|g| g.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The environment a deployment of `config` provides: the identity key,
/// and the tokens it requires (no more: a token set but not required
/// would guard what the config leaves open).
pub fn env_for(config: &Value) -> Vec<(String, String)> {
    let mut env = vec![("TOLLGATE_IDENTITY_KEY".to_owned(), IDENTITY_KEY.to_owned())];
    for group in required_groups(config) {
        env.push((
            format!("TOLLGATE_{}_TOKEN", group.to_ascii_uppercase()),
            token(&group),
        ));
    }
    env
}

pub fn parse(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("a shipped config is YAML")
}

/// `shipped`'s text as the suite runs it: its Redis URLs pointed at
/// `redis` (when it has any); an error naming what the suite cannot run.
pub fn runnable_text(shipped: &Shipped, redis: Option<&str>) -> Result<String, String> {
    let config = parse(&shipped.text);
    if config.get("envoy_ratelimit_configs").is_some() && shipped.source.contains('#') {
        return Err("envoy_ratelimit_configs (files beside an embedded config)".to_owned());
    }
    if config.pointer("/server/tls").is_some() {
        return Err("server.tls (certificate files)".to_owned());
    }
    let text = &shipped.text;
    let stores = serde_json::to_string(&[&config["store"], &config["stores"]]).expect("JSON");
    for unknown in ["rediss://", "\"sentinel\"", "\"cluster\""] {
        if stores.contains(unknown) {
            return Err(format!("a store with {unknown}"));
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find("redis://") {
        let Some(url) = redis else {
            return Ok(text.clone());
        };
        out.push_str(&rest[..at]);
        out.push_str(url);
        let tail = &rest[at + "redis://".len()..];
        let end = tail
            .find(|c: char| {
                c == '/' || c == '"' || c == '\'' || c.is_whitespace() || c == '}' || c == ','
            })
            .unwrap_or(tail.len());
        rest = &tail[end..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Writes `text` (`shipped`'s, as the suite runs it) to `dir`/tollgate.yaml
/// with the envoyproxy/ratelimit files it names copied beside it, as they
/// sit beside the shipped file; returns the config's path.
pub fn write_beside(shipped: &Shipped, text: &str, dir: &Path) -> PathBuf {
    let path = dir.join("tollgate.yaml");
    std::fs::write(&path, text).expect("write the config");
    let config = parse(text);
    let shipped_dir = root()
        .join(&shipped.source)
        .parent()
        .expect("a file has a directory")
        .to_owned();
    let companions = config["envoy_ratelimit_configs"].as_array();
    for name in companions.into_iter().flatten().filter_map(Value::as_str) {
        std::fs::copy(shipped_dir.join(name), dir.join(name))
            .unwrap_or_else(|e| panic!("{}: copy {name}: {e}", shipped.source));
    }
    path
}

/// Whether the config keeps its limits in the default memory store (no
/// `store` or `stores` section): the one the suite fills.
pub fn default_memory_store(config: &Value) -> bool {
    config.get("store").is_none() && config.get("stores").is_none()
}

/// A served config; the process is killed on drop.
pub struct Served {
    pub config: Value,
    /// Held for its lifetime: dropping it stops the server.
    _process: TollgateProcess,
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
    _redis: Option<RedisServer>,
}

impl Served {
    /// Serves `shipped` as the suite runs it, with `extra` appended to
    /// its text (a test-only section, such as a small memory store).
    pub fn start(shipped: &Shipped, extra: &str) -> Self {
        let redis = shipped
            .text
            .contains("redis://")
            .then(|| RedisServer::start().expect("a redis-server for the config's store"));
        let text = runnable_text(shipped, redis.as_ref().map(RedisServer::url).as_deref())
            .unwrap_or_else(|why| {
                panic!(
                    "the suite does not know how to run {}: {why}",
                    shipped.source
                )
            });
        let text = format!("{text}{extra}");
        let config = parse(&text);
        let dir = tempfile::tempdir().expect("temp dir");
        let path = write_beside(shipped, &text, dir.path());
        let env = env_for(&config);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let process = if config.pointer("/server/grpc_listen").is_some() {
            TollgateProcess::spawn_with_grpc(&path, &env).0
        } else {
            TollgateProcess::spawn(&path, &env)
        };
        let addr = process
            .base
            .strip_prefix("http://")
            .and_then(|a| a.parse().ok())
            .expect("tollgate's address");
        Self {
            config,
            _process: process,
            addr,
            _dir: dir,
            _redis: redis,
        }
    }

    /// `server.deny_status`, 429 by default.
    pub fn deny_status(&self) -> u16 {
        self.config
            .pointer("/server/deny_status")
            .and_then(Value::as_u64)
            .map_or(429, |s| u16::try_from(s).expect("a status"))
    }

    /// The `Tollgate-Authorization` line a proxy sends, when the config
    /// requires the authorize token.
    pub fn authorize_token_line(&self) -> String {
        if required_groups(&self.config)
            .iter()
            .any(|g| g == "authorize")
        {
            format!("Tollgate-Authorization: Bearer {}\r\n", token("authorize"))
        } else {
            String::new()
        }
    }
}
