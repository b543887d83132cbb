//! How a Redis store reaches Redis, as the server's config spells it
//! under `store: {redis: {...}}`. Plain settings, outside the `redis`
//! feature, so that every config reader parses the same schema; a build
//! without the feature refuses any Redis URL here, by name, so a
//! memory-only service is told at load that it cannot reach Redis.
//!
//! ```yaml
//! store:
//!   redis:
//!     # exactly one of url, cluster, sentinel:
//!     url: redis://127.0.0.1:6379/0         # standalone; rediss:// for TLS
//!     # cluster: [redis://10.0.0.1:7000, redis://10.0.0.2:7000]   # seed nodes
//!     # sentinel: { master: mymaster, nodes: [redis://10.0.0.1:26379] }
//!     username: tollgate        # optional ACL user
//!     password: s3cret          # optional; never logged
//!     prefix: tollgate          # key prefix (default "tollgate"; no braces)
//!     timeout: 250ms            # per store call, queueing included (default 250ms)
//!     ttl_margin: 1s            # keys live reset_after + this (default 1s)
//!     batch: { max_keys: 128, queue: 8192, in_flight: 2 }   # the defaults
//!     rejected_cache: 100000    # keys remembered as rejected-until (0: off)
//! ```

use std::fmt;

use serde::{Deserialize, Deserializer};
use tollgate_core::parse_duration_ms;

use crate::StoreError;

/// Connection and behaviour of the Redis store. Deserialize it from the
/// `store.redis` mapping; unknown fields are errors.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisConfig {
    /// A standalone server: `redis://HOST:PORT[/DB]`, or `rediss://` for TLS.
    #[serde(default)]
    pub url: Option<String>,
    /// Redis Cluster seed nodes (`redis://` or `rediss://` URLs).
    #[serde(default)]
    pub cluster: Option<Vec<String>>,
    /// A master found through Redis Sentinel.
    #[serde(default)]
    pub sentinel: Option<SentinelConfig>,
    /// ACL user name for the data nodes (overrides one in a URL).
    #[serde(default)]
    pub username: Option<String>,
    /// Password for the data nodes (overrides one in a URL). Never logged.
    #[serde(default)]
    pub password: Option<String>,
    /// Every key starts `<prefix>:`.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// The longest a decision may wait on the store, queueing included.
    #[serde(
        default = "default_timeout",
        rename = "timeout",
        deserialize_with = "duration"
    )]
    pub timeout_ms: u64,
    /// How much longer than its time to refill or forget a key lives.
    #[serde(
        default = "default_margin",
        rename = "ttl_margin",
        deserialize_with = "duration"
    )]
    pub ttl_margin_ms: u64,
    /// How concurrent decisions are gathered into script calls.
    #[serde(default)]
    pub batch: BatchConfig,
    /// How many (key, cost) rejections are answered locally until their
    /// retry time; 0 turns the cache off.
    #[serde(default = "default_rejected_cache")]
    pub rejected_cache: usize,
}

/// Redis Sentinel: the master's name and where the sentinels listen.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentinelConfig {
    /// The master's name as the sentinels know it (`sentinel monitor <name>`).
    pub master: String,
    /// Sentinel addresses (`redis://HOST:PORT` URLs); any one answering is enough.
    pub nodes: Vec<String>,
}

/// Concurrent decisions are gathered into one script call each.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchConfig {
    /// The most keys one script call decides.
    #[serde(default = "default_batch_keys")]
    pub max_keys: usize,
    /// The most decisions waiting for a script call.
    #[serde(default = "default_queue")]
    pub queue: usize,
    /// Script calls in flight at once; while they are, decisions gather.
    #[serde(default = "default_in_flight")]
    pub in_flight: usize,
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            max_keys: default_batch_keys(),
            queue: default_queue(),
            in_flight: default_in_flight(),
        }
    }
}

impl RedisConfig {
    /// A standalone server at `url` with every default.
    pub fn standalone(url: impl Into<String>) -> Self {
        Self {
            url: Some(url.into()),
            ..Self::empty()
        }
    }

    /// A Redis Cluster reached through `nodes` with every default.
    pub fn cluster(nodes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            cluster: Some(nodes.into_iter().map(Into::into).collect()),
            ..Self::empty()
        }
    }

    fn empty() -> Self {
        Self {
            url: None,
            cluster: None,
            sentinel: None,
            username: None,
            password: None,
            prefix: default_prefix(),
            timeout_ms: default_timeout(),
            ttl_margin_ms: default_margin(),
            batch: BatchConfig::default(),
            rejected_cache: default_rejected_cache(),
        }
    }

    /// Checks what deserialization cannot: one topology, a usable prefix,
    /// positive sizes.
    pub fn validate(&self) -> Result<(), StoreError> {
        self.check()
            .map_err(|fault| StoreError::Config(fault.to_string()))
    }

    /// [`Self::validate`], naming the field at fault apart from why, so a
    /// config reader can show where that field is written.
    pub fn check(&self) -> Result<(), RedisConfigFault> {
        let topologies = [
            self.url.is_some(),
            self.cluster.is_some(),
            self.sentinel.is_some(),
        ];
        if topologies.iter().filter(|&&t| t).count() != 1 {
            return config("store.redis", "set exactly one of url, cluster, sentinel");
        }
        if self.cluster.as_ref().is_some_and(Vec::is_empty) {
            return config("store.redis.cluster", "list at least one node");
        }
        if let Some(sentinel) = &self.sentinel {
            if sentinel.nodes.is_empty() {
                return config("store.redis.sentinel.nodes", "list at least one sentinel");
            }
            if sentinel.master.is_empty() {
                return config("store.redis.sentinel.master", "must not be empty");
            }
        }
        for (field, url) in self.urls() {
            check_url(field, url)?;
        }
        if self.prefix.is_empty() || self.prefix.contains(['{', '}']) {
            return config(
                "store.redis.prefix",
                "must be non-empty and hold no brace (braces mark the Cluster hash tag)",
            );
        }
        if self.timeout_ms == 0 {
            return config("store.redis.timeout", "must be positive");
        }
        if self.batch.max_keys == 0 || self.batch.queue == 0 || self.batch.in_flight == 0 {
            return config(
                "store.redis.batch",
                "max_keys, queue and in_flight must be positive",
            );
        }
        Ok(())
    }
}

impl RedisConfig {
    /// Every URL the config names, with the field it is under.
    fn urls(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let url = self.url.iter().map(|u| ("store.redis.url", u.as_str()));
        let cluster = self
            .cluster
            .iter()
            .flatten()
            .map(|u| ("store.redis.cluster", u.as_str()));
        let sentinel = self
            .sentinel
            .iter()
            .flat_map(|s| &s.nodes)
            .map(|u| ("store.redis.sentinel.nodes", u.as_str()));
        url.chain(cluster).chain(sentinel)
    }
}

/// A URL the Redis client can open: `redis://`, `rediss://`, or a Unix
/// socket (`redis+unix://`, `unix://`). Checked at load, so `validate` and
/// `serve` refuse the same configs; the message never shows a password.
#[cfg(feature = "redis")]
fn check_url(field: &'static str, url: &str) -> Result<(), RedisConfigFault> {
    use redis::IntoConnectionInfo;
    let shown = redact_url(url);
    if redis::parse_redis_url(url).is_none() {
        return Err(RedisConfigFault {
            field,
            reason: format!(
                "{shown:?} is not a Redis URL (expected redis://HOST:PORT, rediss://… or redis+unix:///PATH)"
            ),
        });
    }
    url.into_connection_info()
        .map(|_| ())
        .map_err(|_| RedisConfigFault {
            field,
            reason: format!(
                "{shown:?} is not a valid Redis URL (check the host, port and database number)"
            ),
        })
}

/// Without the Redis store no URL can be opened: every one is refused,
/// saying why, rather than a store that fails at its first call.
#[cfg(not(feature = "redis"))]
fn check_url(field: &'static str, _url: &str) -> Result<(), RedisConfigFault> {
    Err(RedisConfigFault {
        field,
        reason: NO_REDIS.to_owned(),
    })
}

/// Why a build without the `redis` feature refuses a Redis store.
pub const NO_REDIS: &str = "this build has no Redis store (build tollgate-tower, tollgate-limiter or tollgate-store with the `redis` feature)";

/// A Redis store setting that cannot serve: `field: reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct RedisConfigFault {
    /// The field as a config names it: `store.redis.url`.
    pub field: &'static str,
    /// Why it cannot serve; never a password.
    pub reason: String,
}

fn config<T>(field: &'static str, reason: &str) -> Result<T, RedisConfigFault> {
    Err(RedisConfigFault {
        field,
        reason: reason.to_owned(),
    })
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &self.url.as_deref().map(redact_url))
            .field(
                "cluster",
                &self
                    .cluster
                    .as_ref()
                    .map(|nodes| nodes.iter().map(|n| redact_url(n)).collect::<Vec<_>>()),
            )
            .field("sentinel", &self.sentinel)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("prefix", &self.prefix)
            .field("timeout_ms", &self.timeout_ms)
            .field("ttl_margin_ms", &self.ttl_margin_ms)
            .field("batch", &self.batch)
            .field("rejected_cache", &self.rejected_cache)
            .finish()
    }
}

impl fmt::Debug for SentinelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelConfig")
            .field("master", &self.master)
            .field(
                "nodes",
                &self.nodes.iter().map(|n| redact_url(n)).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// A URL with its credentials hidden, for logs and errors. Every message
/// that shows a store URL goes through here.
///
/// The rule: everything between `://` (or the start, when there is none)
/// and the *last* `@` of the whole text becomes `<redacted>`, and the value
/// of a `pass=` or `password=` query parameter (a `redis+unix://` URL's way
/// to carry one) becomes `<redacted>` too.
///
/// Why the last `@` of the whole text, not of the authority: an unencoded
/// password may hold `/`, `?`, `#` or `@` (`redis://:p@ss/w@rd@host/0`), so
/// where the authority ends cannot be known from the text. An `@` that
/// really sits in a query or path (`rediss://h:6380/0?x=@`) is taken for
/// the end of the credentials too: that hides the host, never a password.
/// A list of URLs in one string is hidden from its first `://` to its last
/// `@`, for the same reason; lists in the config are redacted node by node.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    let shown = match rest.rfind('@') {
        Some(at) => format!("{scheme}<redacted>@{}", &rest[at + 1..]),
        None => format!("{scheme}{rest}"),
    };
    redact_query_password(&shown)
}

/// `…?db=1&pass=secret` → `…?db=1&pass=<redacted>`.
fn redact_query_password(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if matches!(name, "pass" | "password") => {
                format!("{name}=<redacted>")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{base}?{}", pairs.join("&"))
}

fn default_prefix() -> String {
    "tollgate".to_owned()
}
fn default_timeout() -> u64 {
    250
}
fn default_margin() -> u64 {
    1_000
}
fn default_batch_keys() -> usize {
    128
}
fn default_queue() -> usize {
    8_192
}
fn default_in_flight() -> usize {
    2
}
fn default_rejected_cache() -> usize {
    100_000
}

fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration_ms(&text).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_a_password() {
        let mut config = RedisConfig::standalone("redis://user:hunter2@127.0.0.1:6379/0");
        config.password = Some("hunter3".into());
        config.cluster = None;
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter"), "{shown}");
        assert!(
            shown.contains("redis://<redacted>@127.0.0.1:6379/0"),
            "{shown}"
        );
    }

    #[test]
    fn redaction_hides_everything_up_to_the_last_at() {
        let cases = [
            ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
            (
                "redis://user:hunter2@h:6379/0",
                "redis://<redacted>@h:6379/0",
            ),
            // A password holding `/`: the authority seems to end early.
            (
                "redis://user:pa/ss@host:6379/0",
                "redis://<redacted>@host:6379/0",
            ),
            // `@` and `/` in the password, several times.
            (
                "redis://:p@ss/w@rd@host:6379/0",
                "redis://<redacted>@host:6379/0",
            ),
            // `?` and `#` in the password.
            (
                "rediss://u:p?q#r@host:6380",
                "rediss://<redacted>@host:6380",
            ),
            // An `@` in a query hides the host: over-hiding, never leaking.
            ("rediss://h:6380/0?x=@", "rediss://<redacted>@"),
            // No scheme: from the start.
            ("user:pa/ss@host:6379", "<redacted>@host:6379"),
            // Two URLs in one string: from the first `://`.
            (
                "redis://a:p1@h1:7000,redis://b:p2@h2:7000",
                "redis://<redacted>@h2:7000",
            ),
            // A unix socket's password travels in the query.
            (
                "redis+unix:///run/redis.sock?db=1&pass=s/e@c",
                "redis+unix://<redacted>@c",
            ),
            (
                "redis+unix:///run/redis.sock?db=1&pass=secret",
                "redis+unix:///run/redis.sock?db=1&pass=<redacted>",
            ),
            (
                "unix:///run/redis.sock?password=secret&db=2",
                "unix:///run/redis.sock?password=<redacted>&db=2",
            ),
            ("memory", "memory"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[cfg(feature = "redis")]
    #[test]
    fn an_unparsable_url_is_refused_without_its_password() {
        for (url, secret) in [
            ("redis://user:se/cret@host:6379/0", "se/cret"),
            ("redis://:hun@ter/2@host:x/0", "ter/2"),
        ] {
            let config = RedisConfig::standalone(url);
            let Err(error) = config.validate() else {
                panic!("{url} was accepted");
            };
            let message = error.to_string();
            assert!(message.contains("<redacted>@host"), "{message}");
            assert!(!message.contains(secret), "{message}");
        }
    }

    #[cfg(feature = "redis")]
    #[test]
    fn the_yaml_shape_deserializes_and_rejects_unknown_fields() {
        let value = serde_json::json!({
            "url": "redis://127.0.0.1:7000",
            "timeout": "100ms",
            "batch": {"max_keys": 64},
        });
        let config: RedisConfig = serde_json::from_value(value).expect("valid");
        assert_eq!(config.timeout_ms, 100);
        assert_eq!(config.batch.max_keys, 64);
        assert_eq!(config.batch.queue, 8_192);
        assert_eq!(config.prefix, "tollgate");
        config.validate().expect("valid");
        let unknown = serde_json::json!({"url": "redis://x", "pasword": "typo"});
        assert!(serde_json::from_value::<RedisConfig>(unknown).is_err());
    }

    #[cfg(feature = "redis")]
    #[test]
    fn exactly_one_topology_and_no_brace_in_the_prefix() {
        let mut config = RedisConfig::standalone("redis://x");
        config.cluster = Some(vec!["redis://y".into()]);
        assert!(config.validate().is_err());
        let mut config = RedisConfig::standalone("redis://x");
        config.prefix = "a{b".into();
        assert!(config.validate().is_err());
    }

    /// A memory-only build refuses every Redis store when its config is
    /// read, naming the field and the feature, password unshown.
    #[cfg(not(feature = "redis"))]
    #[test]
    fn without_the_redis_feature_every_redis_store_is_refused_by_name() {
        let sentinel = SentinelConfig {
            master: "mymaster".into(),
            nodes: vec!["redis://:hunter2@10.0.0.3:26379".into()],
        };
        let configs = [
            (
                RedisConfig::standalone("redis://:hunter2@10.0.0.1:6379"),
                "store.redis.url",
            ),
            (
                RedisConfig::cluster(["redis://10.0.0.2:7000"]),
                "store.redis.cluster",
            ),
            (
                RedisConfig {
                    sentinel: Some(sentinel),
                    ..RedisConfig::empty()
                },
                "store.redis.sentinel.nodes",
            ),
        ];
        for (config, field) in configs {
            let fault = config.check().expect_err("no Redis store in this build");
            assert_eq!(fault.field, field);
            assert_eq!(fault.reason, NO_REDIS);
            let message = config.validate().expect_err("refused").to_string();
            assert!(message.contains("`redis` feature"), "{message}");
            assert!(!message.contains("hunter2"), "{message}");
        }
    }
}
