//! A reconnecting link to one Redis server (standalone, or the master
//! Sentinel names) that sends a prelude on every connection it opens.
//!
//! Why not redis-rs's `ConnectionManager`: it reconnects silently, so a
//! server restarted empty (no scripts, no gcra scale registries) was only
//! noticed by the first decision, which then paid NOSCRIPT and a resend,
//! and over a far link its timeout. Here a connection is published only
//! after its prelude ([`super::prelude`]) has loaded every script and
//! registered every known scale, in one round trip: a decision on it costs
//! one round trip too.
//!
//! A connection is opened by a spawned task, never inside a caller's
//! future: a caller that times out does not cancel the opening, so the next
//! call finds it done instead of starting again (over a far link the
//! opening alone can take most of a store timeout).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;

use parking_lot::Mutex;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::SentinelClient;
use redis::{AsyncConnectionConfig, Client, Cmd, ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::sync::watch;

use super::prelude::Prelude;

/// Where a link connects: a fixed server, or whichever master Sentinel
/// names when a connection opens (so a failover is followed at the next
/// connection).
pub enum Source {
    Fixed(Client),
    Sentinel(tokio::sync::Mutex<SentinelClient>),
}

/// An opening's outcome, for every caller waiting on it: the connection
/// and its number (which call closes which connection).
type Opened = Option<Result<(u64, MultiplexedConnection), RedisError>>;

enum State {
    Closed,
    Opening(watch::Receiver<Opened>),
    Open(u64, MultiplexedConnection),
}

pub struct Link {
    source: Source,
    config: AsyncConnectionConfig,
    prelude: Arc<Prelude>,
    state: Mutex<State>,
    /// Connections opened so far: the next one's number.
    opened: AtomicU64,
}

impl Link {
    pub fn new(source: Source, config: AsyncConnectionConfig, prelude: Arc<Prelude>) -> Self {
        Self {
            source,
            config,
            prelude,
            state: Mutex::new(State::Closed),
            opened: AtomicU64::new(0),
        }
    }

    /// One command; an error reply comes back as `Err`. An error that says
    /// the connection is gone (or, for Sentinel, that the master moved)
    /// closes it, and a new one starts opening at once.
    ///
    /// A connection found closed before the command could be queued (the
    /// server restarted, or dropped it while it sat idle) sent nothing, so
    /// the command goes once more on a fresh connection: a restart costs no
    /// decision on each connection that was idle through it.
    pub async fn query(self: &Arc<Self>, cmd: &Cmd) -> Result<Value, RedisError> {
        let (number, connection) = self.connection().await?;
        let reply = match send(connection, cmd).await {
            Sent::Unsent(_) => {
                self.close(number);
                let (number, connection) = self.connection().await?;
                return self.answered(number, send(connection, cmd).await.reply());
            }
            sent => sent.reply(),
        };
        self.answered(number, reply)
    }

    /// Passes `reply` on, first closing connection `number` when the
    /// error says it is gone (and opening the next one at once).
    fn answered(
        self: &Arc<Self>,
        number: u64,
        reply: Result<Value, RedisError>,
    ) -> Result<Value, RedisError> {
        if let Err(e) = &reply
            && gone(e)
        {
            self.close(number);
            drop(self.opening());
        }
        reply
    }

    /// Sends the prelude again on the open connection (after NOSCRIPT: the
    /// server lost its scripts under a live connection, SCRIPT FLUSH).
    pub async fn reload(self: &Arc<Self>) -> Result<(), RedisError> {
        let (_, mut connection) = self.connection().await?;
        self.prelude.send(&mut connection).await
    }

    /// The open connection, or the one being opened once it is.
    async fn connection(self: &Arc<Self>) -> Result<(u64, MultiplexedConnection), RedisError> {
        let mut opened = self.opening();
        let outcome = opened.wait_for(Option::is_some).await.map(|o| o.clone());
        match outcome {
            Ok(Some(outcome)) => outcome,
            // The opening task's runtime ended before it finished.
            _ => {
                let mut state = self.state.lock();
                if let State::Opening(current) = &*state
                    && current.same_channel(&opened)
                {
                    *state = State::Closed;
                }
                Err(RedisError::from((
                    ErrorKind::Io,
                    "a Redis connection's opening stopped",
                )))
            }
        }
    }

    /// Starts opening a connection unless one is open or opening; the
    /// receiver says when it is done (at once when one is open).
    pub fn opening(self: &Arc<Self>) -> watch::Receiver<Opened> {
        let mut state = self.state.lock();
        match &*state {
            State::Open(number, connection) => {
                return watch::channel(Some(Ok((*number, connection.clone())))).1;
            }
            State::Opening(opened) => return opened.clone(),
            State::Closed => {}
        }
        let (done, opened) = watch::channel(None);
        *state = State::Opening(opened.clone());
        drop(state);
        let link = Arc::clone(self);
        tokio::spawn(async move {
            let number = link.opened.fetch_add(1, Ordering::Relaxed);
            let outcome = link.open().await.map(|c| (number, c));
            *link.state.lock() = match &outcome {
                Ok((number, connection)) => State::Open(*number, connection.clone()),
                Err(e) => {
                    tracing::debug!(error = %e, "cannot open a Redis connection");
                    State::Closed
                }
            };
            done.send_replace(Some(outcome));
        });
        opened
    }

    /// Connects, then sends the prelude: the connection is usable only
    /// once the server holds every script and known scale.
    async fn open(&self) -> Result<MultiplexedConnection, RedisError> {
        let client = match &self.source {
            Source::Fixed(client) => client.clone(),
            Source::Sentinel(sentinel) => sentinel.lock().await.async_get_client().await?,
        };
        let mut connection = client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        if let Err(e) = self.prelude.send(&mut connection).await {
            // A server that wants a password closes an unauthenticated
            // connection on the prelude's long scripts (a broken pipe):
            // a fresh connection's PING says why (NOAUTH).
            if let Ok(mut probe) = client
                .get_multiplexed_async_connection_with_config(&self.config)
                .await
                && let Err(why) = redis::cmd("PING").query_async::<Value>(&mut probe).await
            {
                return Err(why);
            }
            return Err(e);
        }
        Ok(connection)
    }

    /// Forgets connection `number` if it is still the open one.
    fn close(&self, number: u64) {
        let mut state = self.state.lock();
        if matches!(&*state, State::Open(open, _) if *open == number) {
            *state = State::Closed;
        }
    }
}

/// What became of a command given to a connection.
enum Sent {
    /// The connection had already closed: the command never left.
    Unsent(RedisError),
    /// The command was queued; this is the reply, or why there is none.
    Queued(Result<Value, RedisError>),
}

impl Sent {
    fn reply(self) -> Result<Value, RedisError> {
        match self {
            Self::Unsent(e) => Err(e),
            Self::Queued(reply) => reply,
        }
    }
}

/// Sends `cmd` on `connection`. A connection whose driver has ended
/// (the server closed it) refuses the command on the first poll, before
/// anything is queued. An error after that first poll may follow a
/// command the server ran, so it is never sent again.
async fn send(mut connection: MultiplexedConnection, cmd: &Cmd) -> Sent {
    let mut call = std::pin::pin!(connection.req_packed_command(cmd));
    let first = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await;
    match first {
        Poll::Ready(Err(e)) if e.is_connection_dropped() => Sent::Unsent(e),
        Poll::Ready(reply) => Sent::Queued(reply.and_then(Value::extract_error)),
        Poll::Pending => Sent::Queued(call.await.and_then(Value::extract_error)),
    }
}

/// An error after which the connection cannot be trusted: it dropped, or
/// (Sentinel) the server became a replica.
fn gone(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}
