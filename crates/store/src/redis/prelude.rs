//! What a store sends to a Redis server before its first decision there:
//! every script loaded (SCRIPT LOAD) and every gcra scale it knows
//! registered, in one round trip.
//!
//! Why: a server that has not seen a script answers NOSCRIPT, and the call
//! is sent again with the script's text; a scale not yet registered took
//! its own call before the decision. Over a 120 ms round trip that was four
//! round trips, past the store timeout, for a decision Redis then applied
//! anyway. With the prelude sent when a connection opens (and again when
//! NOSCRIPT shows a server lost its scripts under a live connection), a
//! decision costs one round trip. NOSCRIPT stays handled as a fallback
//! ([`super::connection::Connection::evaluate`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisError, Value};

use super::scales::{Scale, Scales, registration, tag_of};
use super::script::SCRIPTS;

/// Scales registered again by one prelude; any others are registered by
/// their next decision's background registration.
const MAX_SCALES: usize = 256;

pub struct Prelude {
    pub scales: Arc<Scales>,
    pub prefix: String,
    pub margin_ms: u64,
    /// A reload after NOSCRIPT is under way (one at a time).
    reloading: AtomicBool,
}

impl Prelude {
    pub fn new(scales: Arc<Scales>, prefix: String, margin_ms: u64) -> Self {
        Self {
            scales,
            prefix,
            margin_ms,
            reloading: AtomicBool::new(false),
        }
    }

    /// The prelude's commands: a SCRIPT LOAD a script, then a scale's
    /// registration (by SHA1: the loads before it put the script there)
    /// for each scale known.
    fn commands(&self) -> (Vec<Cmd>, Vec<(Arc<str>, Scale)>) {
        let known = self.scales.known(MAX_SCALES);
        let mut commands: Vec<Cmd> = SCRIPTS
            .all()
            .map(|lua| redis::cmd("SCRIPT").arg("LOAD").arg(lua.body).to_owned())
            .collect();
        commands.extend(
            known
                .iter()
                .map(|(policy, scale)| registration(&self.prefix, policy, *scale, self.margin_ms)),
        );
        (commands, known)
    }

    /// Sends the prelude over one connection as a pipeline. Only an error
    /// that says the connection failed is returned; a command refused
    /// (an ACL without SCRIPT, a registry of the wrong type) is logged, and
    /// the decisions fall back to sending the script's text.
    pub async fn send(&self, connection: &mut impl ConnectionLike) -> Result<(), RedisError> {
        let (commands, known) = self.commands();
        let mut pipe = redis::pipe();
        for cmd in &commands {
            pipe.add_command(cmd.clone());
        }
        let replies = connection
            .req_packed_commands(&pipe, 0, commands.len())
            .await?;
        self.answered(
            replies.into_iter().map(Value::extract_error).collect(),
            &known,
        );
        Ok(())
    }

    /// Sends the prelude command by command, concurrently: a Cluster routes
    /// each SCRIPT LOAD to every master, and each registration to its
    /// registry's node.
    pub async fn send_each(&self, connection: &(impl ConnectionLike + Clone + Send + 'static)) {
        let (commands, known) = self.commands();
        let mut calls = tokio::task::JoinSet::new();
        for (index, cmd) in commands.into_iter().enumerate() {
            let mut connection = connection.clone();
            calls.spawn(async move {
                let reply = connection.req_packed_command(&cmd).await;
                (index, reply.and_then(Value::extract_error))
            });
        }
        let mut replies = vec![Ok(Value::Nil); calls.len()];
        while let Some(Ok((index, reply))) = calls.join_next().await {
            replies[index] = reply;
        }
        self.answered(replies, &known);
    }

    /// Records the registrations' tags; logs what was refused.
    fn answered(&self, replies: Vec<Result<Value, RedisError>>, known: &[(Arc<str>, Scale)]) {
        let scripts = replies.len().saturating_sub(known.len());
        for reply in &replies[..scripts] {
            if let Err(e) = reply {
                tracing::warn!(error = %e, "cannot load a script; decisions will send its text");
            }
        }
        for ((policy, scale), reply) in known.iter().zip(&replies[scripts..]) {
            let tag = reply
                .clone()
                .map_err(super::errors::from_redis)
                .and_then(tag_of);
            self.scales.settle(policy, *scale, tag);
        }
    }

    /// Whether this caller should reload the scripts after NOSCRIPT: true
    /// for one caller until [`Prelude::reloaded`].
    pub fn begin_reload(&self) -> bool {
        !self.reloading.swap(true, Ordering::AcqRel)
    }

    pub fn reloaded(&self) {
        self.reloading.store(false, Ordering::Release);
    }
}
