//! One handle to Redis, whatever its topology: a standalone server, a
//! Cluster, or a master found through Sentinel. Every handle multiplexes
//! concurrent calls over its connections and reconnects by itself.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Client, Cmd, ErrorKind, IntoConnectionInfo, RedisError, ServerErrorKind, Value};

use super::config::{RedisConfig, redact_url};
use super::script::{At, By, Item, Lua, Once, command};
use crate::StoreError;

#[derive(Clone)]
pub enum Connection {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(Arc<SentinelLink>),
}

impl Connection {
    /// Connects as `config` says. A standalone or Sentinel connection is
    /// made lazily, so a server can start while Redis is down; a Cluster
    /// needs one seed node up to learn its slots.
    pub async fn open(config: &RedisConfig) -> Result<Self, StoreError> {
        config.validate()?;
        let timeout = Duration::from_millis(config.timeout_ms);
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(2)
            // Quick reconnects: a refused or unresolvable store then says
            // so within a call's budget instead of timing out.
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(500));
        if let Some(url) = &config.url {
            let client =
                Client::open(with_credentials(url, config)?).map_err(|e| bad_url(url, &e))?;
            let manager = ConnectionManager::new_lazy_with_config(client, manager_config)
                .map_err(unavailable)?;
            return Ok(Self::Standalone(manager));
        }
        if let Some(nodes) = &config.cluster {
            let mut builder = ClusterClientBuilder::new(
                nodes
                    .iter()
                    .map(|url| {
                        url.as_str()
                            .into_connection_info()
                            .map_err(|e| bad_url(url, &e))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            )
            .connection_timeout(timeout)
            .response_timeout(timeout)
            // Retries follow MOVED/ASK and reconnect. A call retried after
            // its connection dropped may have run already: its cost is then
            // consumed twice, which never admits more (docs/redis.md).
            .retries(2);
            if let Some(username) = &config.username {
                builder = builder.username(username);
            }
            if let Some(password) = &config.password {
                builder = builder.password(password);
            }
            let client = builder.build().map_err(unavailable)?;
            let connection = tokio::time::timeout(timeout, client.get_async_connection())
                .await
                .map_err(|_| StoreError::Timeout {
                    timeout_ms: config.timeout_ms,
                })?
                .map_err(unavailable)?;
            return Ok(Self::Cluster(connection));
        }
        if let Some(sentinel) = &config.sentinel {
            let mut redis_info = redis::RedisConnectionInfo::default();
            if let Some(username) = &config.username {
                redis_info = redis_info.set_username(username);
            }
            if let Some(password) = &config.password {
                redis_info = redis_info.set_password(password);
            }
            let node_info =
                SentinelNodeConnectionInfo::default().set_redis_connection_info(redis_info);
            let client = SentinelClient::build(
                sentinel.nodes.clone(),
                sentinel.master.clone(),
                Some(node_info),
                SentinelServerType::Master,
            )
            .map_err(unavailable)?;
            return Ok(Self::Sentinel(Arc::new(SentinelLink {
                client: tokio::sync::Mutex::new(client),
                current: RwLock::new(None),
                config: manager_config,
            })));
        }
        Err(StoreError::Config(
            "store.redis: set exactly one of url, cluster, sentinel".into(),
        ))
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// One command; an error reply comes back as `Err`.
    pub async fn query(&self, cmd: &Cmd) -> Result<Value, RedisError> {
        self.send(cmd).await.and_then(Value::extract_error)
    }

    async fn send(&self, cmd: &Cmd) -> Result<Value, RedisError> {
        match self {
            Self::Standalone(manager) => manager.clone().send_packed_command(cmd).await,
            Self::Cluster(cluster) => {
                use redis::aio::ConnectionLike;
                cluster.clone().req_packed_command(cmd).await
            }
            Self::Sentinel(link) => link.query(cmd).await,
        }
    }

    /// Runs the script that `command` names by SHA1; after NOSCRIPT (a
    /// restarted or failed-over server) runs it by its text, which also
    /// caches it there again. Only NOSCRIPT is retried: the script certainly
    /// did not run. Any other failure may have happened after the script
    /// ran, and running it again could consume twice.
    pub async fn evaluate(
        &self,
        command: impl Fn(By) -> Result<Cmd, StoreError>,
    ) -> Result<Result<Value, RedisError>, StoreError> {
        Ok(match self.query(&command(By::Sha)?).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.query(&command(By::Body)?).await
            }
            other => other,
        })
    }

    /// Runs a decision script over `items` (see [`Connection::evaluate`]).
    pub async fn run(
        &self,
        lua: &Lua,
        items: &[&Item],
        at: At,
        margin_ms: u64,
        mode: Option<&str>,
        onces: &[&Once],
    ) -> Result<Reply, StoreError> {
        let reply = self
            .evaluate(|by| command(lua, by, items, at, margin_ms, mode, onces))
            .await?;
        match reply {
            Ok(value) => integers(value).map(Reply::Decided),
            Err(e) if e.code() == Some(UNRESOLVED_SCALES) => {
                unresolved(e.detail().unwrap_or_default(), items.len()).map(Reply::Unresolved)
            }
            Err(e) if e.code() == Some(ID_MISMATCH) => Ok(Reply::Mismatch),
            Err(e) => Err(from_redis(e)),
        }
    }
}

/// The error code of a call that met gcra states in scales it was not told.
const UNRESOLVED_SCALES: &str = "TOLLGATESCALE";
/// The error code of a call whose request id was recorded for another
/// request (decide_once.lua).
const ID_MISMATCH: &str = "TOLLGATEIDOTHER";

/// What a script call answered.
#[derive(Debug)]
pub enum Reply {
    /// Four integers a key.
    Decided(Vec<i64>),
    /// Nothing was decided or written: these keys (by index) hold gcra
    /// states in the scales tagged so, which the call must name.
    Unresolved(Vec<(usize, u16)>),
    /// Nothing was decided or written: the request id was recorded for
    /// another request.
    Mismatch,
}

/// `"0:3 2:5"` → `[(0, 3), (2, 5)]`, each index below `keys`.
fn unresolved(detail: &str, keys: usize) -> Result<Vec<(usize, u16)>, StoreError> {
    detail
        .split_ascii_whitespace()
        .map(|pair| {
            pair.split_once(':')
                .and_then(|(i, tag)| Some((i.parse().ok()?, tag.parse().ok()?)))
                .filter(|(i, _)| *i < keys)
                .ok_or_else(|| {
                    StoreError::Protocol(format!("a script named unresolved scales {detail:?}"))
                })
        })
        .collect()
}

/// A Sentinel-managed master: resolved on first use and again after an
/// error that suggests it moved (a dropped connection, READONLY).
pub struct SentinelLink {
    client: tokio::sync::Mutex<SentinelClient>,
    current: RwLock<Option<ConnectionManager>>,
    config: ConnectionManagerConfig,
}

impl SentinelLink {
    async fn query(&self, cmd: &Cmd) -> Result<Value, RedisError> {
        let known = self.current.read().clone();
        let mut manager = match known {
            Some(manager) => manager,
            None => self.resolve().await?,
        };
        let reply = manager
            .send_packed_command(cmd)
            .await
            .and_then(Value::extract_error);
        if let Err(e) = &reply
            && (e.is_io_error()
                || e.is_connection_dropped()
                || e.is_connection_refusal()
                || e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly))
        {
            *self.current.write() = None;
        }
        reply
    }

    async fn resolve(&self) -> Result<ConnectionManager, RedisError> {
        let client = self.client.lock().await.async_get_client().await?;
        let manager = ConnectionManager::new_lazy_with_config(client, self.config.clone())?;
        *self.current.write() = Some(manager.clone());
        Ok(manager)
    }
}

fn with_credentials(url: &str, config: &RedisConfig) -> Result<redis::ConnectionInfo, StoreError> {
    let info = url.into_connection_info().map_err(|e| bad_url(url, &e))?;
    let mut settings = info.redis_settings().clone();
    if let Some(username) = &config.username {
        settings = settings.set_username(username);
    }
    if let Some(password) = &config.password {
        settings = settings.set_password(password);
    }
    Ok(info.set_redis_settings(settings))
}

fn bad_url(url: &str, e: &RedisError) -> StoreError {
    StoreError::Config(format!("store.redis: {}: {e}", redact_url(url)))
}

fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// Errors that say Redis could not be reached or could not serve are
/// "unavailable" (the failure policy decides), told apart by why: nothing
/// listening, a name that does not resolve, credentials turned down.
/// Anything else is a fault.
pub fn from_redis(e: RedisError) -> StoreError {
    if e.is_connection_refusal() {
        return StoreError::Refused(e.to_string());
    }
    // std and tokio report a failed name lookup only in the message.
    if e.is_io_error() && e.to_string().contains("failed to lookup address") {
        return StoreError::Unresolved(e.to_string());
    }
    if e.kind() == ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
    {
        return StoreError::Auth(e.to_string());
    }
    let down = e.is_io_error()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.is_cluster_error()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
            )
        );
    if down {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Protocol(e.to_string())
    }
}

fn integers(value: Value) -> Result<Vec<i64>, StoreError> {
    match value {
        Value::Array(items) => items
            .into_iter()
            .map(|v| match v {
                Value::Int(x) => Ok(x),
                other => Err(StoreError::Protocol(format!(
                    "a script answered {other:?} where an integer belongs"
                ))),
            })
            .collect(),
        other => Err(StoreError::Protocol(format!(
            "a script answered {other:?} where a list belongs"
        ))),
    }
}
