//! Batching: concurrent decisions gathered into fewer script calls.
//!
//! Each `decide` puts a job on a bounded queue. One task takes every job
//! waiting (up to `max_keys`) whenever fewer than `in_flight` script calls
//! are outstanding, and sends them as one call of the decide script, which
//! decides each key on its own, in order. Every decision stays exact: the
//! whole script runs atomically, so each key's transition sees every
//! earlier one, exactly as separate calls would. Under light load a job
//! leaves at once, alone; under heavy load the calls in flight give the
//! queue time to fill, and one call carries many decisions.
//!
//! A store has one batching task on the runtime that connected it, and one
//! more (a *lane*, with its own connection) on each single-threaded runtime
//! that decides through it, such as tollgate's HTTP workers: a decision,
//! its batch and its reply then stay on one thread, with no wake-ups across
//! cores.
//!
//! In a Cluster one script may only touch one slot, so a batch is split by
//! slot and its parts are sent concurrently (the connection routes each to
//! its node).
//!
//! Single checks under a request id are batched too, apart from the rest
//! (a batch holding any is split in two calls): `decide_each_once.lua`
//! decides each under its own id, with the same exactness.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::time::Instant;
use tollgate_core::Decision;

use super::Shared;
use super::connection::Connection;
use super::key::slot;
use super::script::{At, Item, Once, SCRIPTS, decision, decisions};
use crate::redis_config::BatchConfig;
use crate::{Replay, StoreError};

pub struct Job {
    pub item: Item,
    /// The check's request id, if it has one.
    pub once: Option<Once>,
    pub reply: oneshot::Sender<Result<(Decision, Replay), StoreError>>,
}

/// Runs until every sender is gone, calling Redis over `connection`.
pub async fn gather(
    mut queue: mpsc::Receiver<Job>,
    shared: Arc<Shared>,
    connection: Connection,
    config: BatchConfig,
) {
    let permits = Arc::new(Semaphore::new(config.in_flight));
    let mut jobs = Vec::with_capacity(config.max_keys);
    loop {
        // Wait for room first: meanwhile the queue fills, and the next call carries more.
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            return;
        };
        if queue.recv_many(&mut jobs, config.max_keys).await == 0 {
            return;
        }
        let batch = std::mem::replace(&mut jobs, Vec::with_capacity(config.max_keys));
        let (shared, connection) = (Arc::clone(&shared), connection.clone());
        tokio::spawn(async move {
            if connection.is_cluster() {
                send_by_slot(shared, connection, batch, permit).await;
            } else {
                send(&shared, &connection, batch).await;
                drop(permit);
            }
        });
    }
}

async fn send_by_slot(
    shared: Arc<Shared>,
    connection: Connection,
    batch: Vec<Job>,
    permit: OwnedSemaphorePermit,
) {
    let mut by_slot: HashMap<u16, Vec<Job>> = HashMap::new();
    for job in batch {
        by_slot.entry(slot(&job.item.key)).or_default().push(job);
    }
    let mut parts = tokio::task::JoinSet::new();
    for (_, jobs) in by_slot {
        let (shared, connection) = (Arc::clone(&shared), connection.clone());
        parts.spawn(async move { send(&shared, &connection, jobs).await });
    }
    while parts.join_next().await.is_some() {}
    drop(permit);
}

/// One script call for `jobs` (two when some carry a request id); every
/// job gets its own decision or the error.
async fn send(shared: &Shared, connection: &Connection, jobs: Vec<Job>) {
    if jobs.iter().any(|j| j.once.is_some()) {
        let (once, plain): (Vec<Job>, Vec<Job>) = jobs.into_iter().partition(|j| j.once.is_some());
        if !plain.is_empty() {
            send_plain(shared, connection, plain).await;
        }
        send_once(shared, connection, once).await;
    } else {
        send_plain(shared, connection, jobs).await;
    }
}

/// Jobs under request ids: `decide_each_once.lua`. A job whose id was
/// recorded for another request is refused ([`Replay::Mismatch`]).
async fn send_once(shared: &Shared, connection: &Connection, jobs: Vec<Job>) {
    let items: Vec<&Item> = jobs.iter().map(|j| &j.item).collect();
    let onces: Vec<&Once> = jobs.iter().filter_map(|j| j.once.as_ref()).collect();
    shared.batched_calls.fetch_add(1, Ordering::Relaxed);
    let answer = tokio::time::timeout(
        Duration::from_millis(shared.timeout_ms),
        shared.run(
            connection,
            &SCRIPTS.decide_each_once,
            &items,
            At::StoreClock,
            shared.margin_ms,
            None,
            &onces,
        ),
    )
    .await
    .unwrap_or(Err(StoreError::Timeout {
        timeout_ms: shared.timeout_ms,
    }))
    .and_then(super::Answer::integers)
    .and_then(|reply| {
        if reply.len() == items.len() * 5 {
            Ok(reply)
        } else {
            Err(StoreError::Protocol(format!(
                "a script answered {} integers for {} keys under request ids",
                reply.len(),
                items.len()
            )))
        }
    });
    let reply = match answer {
        Ok(reply) => reply,
        Err(e) => {
            for job in jobs {
                let _ = job.reply.send(Err(e.clone()));
            }
            return;
        }
    };
    for (job, d) in jobs.into_iter().zip(reply.chunks_exact(5)) {
        let answer = match d[4] {
            0 => decision(&job.item, &d[..4]).map(|d| (d, Replay::Fresh)),
            1 => decision(&job.item, &d[..4]).map(|d| (d, Replay::Replayed)),
            2 => Ok((refused(&job.item), Replay::Mismatch)),
            x => Err(StoreError::Protocol(format!("replay = {x}"))),
        };
        let _ = job.reply.send(answer);
    }
}

/// The placeholder decision of a refused job (the caller reads the replay).
fn refused(item: &Item) -> Decision {
    Decision {
        allowed: false,
        limit: item.limit,
        remaining: 0,
        retry_after_ms: None,
        reset_after_ms: 0,
        permit: None,
    }
}

/// Jobs without request ids: the decide scripts.
async fn send_plain(shared: &Shared, connection: &Connection, jobs: Vec<Job>) {
    let items: Vec<&Item> = jobs.iter().map(|j| &j.item).collect();
    let first = items[0].algorithm;
    // One algorithm: its own script, which defines nothing else.
    let lua = if items.iter().all(|i| i.algorithm == first) {
        SCRIPTS.for_algorithm(first)
    } else {
        &SCRIPTS.batch
    };
    shared.batched_calls.fetch_add(1, Ordering::Relaxed);
    let sent = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_millis(shared.timeout_ms),
        shared.run(
            connection,
            lua,
            &items,
            At::StoreClock,
            shared.margin_ms,
            None,
            &[],
        ),
    )
    .await
    .unwrap_or(Err(StoreError::Timeout {
        timeout_ms: shared.timeout_ms,
    }))
    .and_then(super::Answer::integers)
    .and_then(|reply| decisions(&items, &reply));
    let answered = Instant::now();
    match answer {
        Ok(decisions) => {
            for (job, decision) in jobs.into_iter().zip(decisions) {
                shared
                    .rejected
                    .remember(&job.item, &decision, sent, answered);
                // The caller may have timed out and gone: nothing to tell it.
                let _ = job.reply.send(Ok((decision, Replay::Fresh)));
            }
        }
        Err(e) => {
            for job in jobs {
                let _ = job.reply.send(Err(e.clone()));
            }
        }
    }
}
