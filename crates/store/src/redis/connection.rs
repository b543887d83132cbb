//! One handle to Redis, whatever its topology: a standalone server, a
//! Cluster, or a master found through Sentinel. Every handle multiplexes
//! concurrent calls over its connections and reconnects by itself, and
//! every server it opens a connection to is sent the prelude (every script
//! loaded, every known gcra scale registered) before a decision goes there.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ErrorKind, IntoConnectionInfo, RedisError, ServerErrorKind,
    Value,
};

use super::errors::from_redis;
use super::link::{Link, Source};
use super::prelude::Prelude;
use super::scales::Scales;
use super::script::{At, By, Item, Lua, Once, command};
use crate::StoreError;
use crate::redis_config::{RedisConfig, redact_url};

#[derive(Clone)]
pub struct Connection {
    to: To,
    prelude: Arc<Prelude>,
    /// Script calls sent, shared by every connection of a store.
    script_calls: Arc<AtomicU64>,
}

#[derive(Clone)]
enum To {
    /// A standalone server, or the master Sentinel names.
    Server(Arc<Link>),
    Cluster(ClusterConnection),
}

impl Connection {
    /// Connects as `config` says. A standalone or Sentinel connection
    /// starts opening at once but is not waited for, so a server can start
    /// while Redis is down (see [`Connection::ready`]); a Cluster needs one
    /// seed node up to learn its slots.
    pub async fn open(
        config: &RedisConfig,
        scales: Arc<Scales>,
        script_calls: Arc<AtomicU64>,
    ) -> Result<Self, StoreError> {
        config.validate()?;
        let prelude = Arc::new(Prelude::new(
            scales,
            config.prefix.clone(),
            config.ttl_margin_ms,
        ));
        let timeout = Duration::from_millis(config.timeout_ms);
        let link_config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        let server = |source| {
            let link = Arc::new(Link::new(source, link_config, Arc::clone(&prelude)));
            drop(link.opening());
            To::Server(link)
        };
        let to = if let Some(url) = &config.url {
            let client =
                Client::open(with_credentials(url, config)?).map_err(|e| bad_url(url, &e))?;
            server(Source::Fixed(client))
        } else if let Some(nodes) = &config.cluster {
            To::Cluster(open_cluster(nodes, config, timeout).await?)
        } else if let Some(sentinel) = &config.sentinel {
            // No CLIENT SETINFO round trip (see `with_credentials`).
            let mut redis_info = redis::RedisConnectionInfo::default().set_skip_set_lib_name();
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
            server(Source::Sentinel(tokio::sync::Mutex::new(client)))
        } else {
            return Err(StoreError::Config(
                "store.redis: set exactly one of url, cluster, sentinel".into(),
            ));
        };
        let connection = Self {
            to,
            prelude,
            script_calls,
        };
        if let To::Cluster(cluster) = &connection.to {
            connection.prelude.send_each(cluster).await;
        }
        Ok(connection)
    }

    /// Waits until the connection opening now is open (its prelude sent),
    /// or has failed: a store connected this way answers its first decision
    /// in one round trip. A Cluster is ready once opened.
    pub async fn ready(&self) -> Result<(), StoreError> {
        let To::Server(link) = &self.to else {
            return Ok(());
        };
        let mut opened = link.opening();
        match opened.wait_for(Option::is_some).await.map(|o| o.clone()) {
            Ok(Some(Ok(_))) => Ok(()),
            Ok(Some(Err(e))) => Err(from_redis(e)),
            _ => Err(StoreError::Unavailable(
                "a Redis connection's opening stopped".into(),
            )),
        }
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self.to, To::Cluster(_))
    }

    /// One command; an error reply comes back as `Err`.
    pub async fn query(&self, cmd: &Cmd) -> Result<Value, RedisError> {
        match &self.to {
            To::Server(link) => link.query(cmd).await,
            To::Cluster(cluster) => {
                use redis::aio::ConnectionLike;
                cluster
                    .clone()
                    .req_packed_command(cmd)
                    .await
                    .and_then(Value::extract_error)
            }
        }
    }

    /// Runs the script that `command` names by SHA1; after NOSCRIPT runs
    /// it by its text, which also caches it there again, and sends the
    /// prelude again in the background so the other scripts are back too.
    ///
    /// Only NOSCRIPT is retried: a server answers it before running
    /// anything, so the script certainly did not run and sending it again
    /// cannot charge twice. NOSCRIPT under a live connection means the
    /// server lost its scripts after the prelude (SCRIPT FLUSH; a restart
    /// breaks the connection, and the next one sends the prelude first).
    /// Any other failure may have happened after the script ran, and
    /// running it again could consume twice.
    pub async fn evaluate(
        &self,
        command: impl Fn(By) -> Result<Cmd, StoreError>,
    ) -> Result<Result<Value, RedisError>, StoreError> {
        self.script_calls.fetch_add(1, Ordering::Relaxed);
        Ok(match self.query(&command(By::Sha)?).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.reload();
                self.script_calls.fetch_add(1, Ordering::Relaxed);
                self.query(&command(By::Body)?).await
            }
            other => other,
        })
    }

    /// Sends the prelude again in the background, one reload at a time.
    fn reload(&self) {
        if !self.prelude.begin_reload() {
            return;
        }
        let connection = self.clone();
        tokio::spawn(async move {
            match &connection.to {
                To::Server(link) => {
                    if let Err(e) = link.reload().await {
                        tracing::debug!(error = %e, "cannot load the scripts again");
                    }
                }
                To::Cluster(cluster) => connection.prelude.send_each(cluster).await,
            }
            connection.prelude.reloaded();
        });
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

/// A Cluster connection, having learnt its slots from a seed node.
async fn open_cluster(
    nodes: &[String],
    config: &RedisConfig,
    timeout: Duration,
) -> Result<ClusterConnection, StoreError> {
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
    tokio::time::timeout(timeout, client.get_async_connection())
        .await
        .map_err(|_| StoreError::Timeout {
            timeout_ms: config.timeout_ms,
        })?
        .map_err(unavailable)
}

fn with_credentials(url: &str, config: &RedisConfig) -> Result<redis::ConnectionInfo, StoreError> {
    let info = url.into_connection_info().map_err(|e| bad_url(url, &e))?;
    // No CLIENT SETINFO on connecting: it is a round trip of its own before
    // the prelude (over a far link, one more before the first decision) for
    // a name in CLIENT LIST that Redis before 7.2 refuses anyway.
    let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
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
