//! `tollgate replay`: decide a trace at its own times through the limiter
//! (the memory store, or Redis's scripts with each event's time passed to
//! them), streaming line by line so a trace of any length runs in constant
//! memory (beyond the store's own bounded keys).

use std::io::{self, BufRead, Write};
use std::sync::Arc;

use serde::Deserialize;
use thiserror::Error;
use tollgate_core::{Identity, ManualClock, PolicySet};
use tollgate_store::{
    MemoryStore, MemoryStoreConfig, OnStoreFailure, RedisConfig, RedisStore, StoreError,
};

use crate::limiter::{Backend, Check, Limiter};
use crate::metrics::Metrics;

/// A longer line is refused rather than buffered without bound.
const MAX_LINE_BYTES: usize = 1 << 20;
/// How many decisions pass between sweeps of the memory store's idle keys.
const SWEEP_EVERY: u64 = 65_536;

#[derive(Debug, Error)]
pub enum ReplayError {
    #[error("line {line}: {fault}")]
    Line { line: u64, fault: String },
    #[error("reading the trace: {0}")]
    Input(io::Error),
    #[error("writing decisions: {0}")]
    Output(io::Error),
    #[error("store: {0}")]
    Store(StoreError),
}

/// Replays on the store `store` names: `memory` (or none), or a
/// `redis://` / `rediss://` URL. The limiter's clock is set to each event's
/// time; the memory store reads it, and Redis is handed it.
pub fn run_on(
    policies: &PolicySet,
    max_keys: usize,
    store: Option<&str>,
    input: impl BufRead,
    output: impl Write,
) -> Result<u64, ReplayError> {
    let clock = Arc::new(ManualClock::new(0));
    // One thread: the trace is read, decided and written in order.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ReplayError::Input)?;
    let backend = match store {
        None | Some("memory") => Backend::Memory(MemoryStore::new(
            clock.clone(),
            MemoryStoreConfig {
                max_keys,
                ..MemoryStoreConfig::default()
            },
        )),
        Some(url) if url.starts_with("redis://") || url.starts_with("rediss://") => {
            let mut config = RedisConfig::standalone(url);
            // A replay waits for its store rather than fail an event.
            config.timeout_ms = 10_000;
            let store = runtime
                .block_on(RedisStore::connect(&config))
                .map_err(ReplayError::Store)?;
            Backend::RedisAtClock(store)
        }
        Some(other) => {
            return Err(ReplayError::Store(StoreError::Config(format!(
                "--store {other:?}: expected memory or a redis:// URL"
            ))));
        }
    };
    let metrics = Arc::new(Metrics::new(clock.clone()));
    let limiter = Limiter::new(vec![backend], metrics, clock.clone());
    runtime.block_on(replay(policies, &limiter, &clock, input, output))
}

/// One line of a trace.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Event {
    t_ms: u64,
    policy: String,
    key: String,
    #[serde(default = "default_cost")]
    cost: u64,
}

/// An event's cost when the line leaves it out.
fn default_cost() -> u64 {
    1
}

/// Replays every event of `input` through `limiter`, its clock set to each
/// event's time, writing one decision a line to `output`. Returns how many
/// events were decided.
async fn replay(
    policies: &PolicySet,
    limiter: &Limiter,
    clock: &ManualClock,
    mut input: impl BufRead,
    mut output: impl Write,
) -> Result<u64, ReplayError> {
    let mut line = Vec::with_capacity(256);
    let mut number = 0u64;
    let mut decided = 0u64;
    loop {
        line.clear();
        let read = io::Read::take(&mut input, MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(ReplayError::Input)?;
        if read == 0 {
            break;
        }
        number += 1;
        if line.len() > MAX_LINE_BYTES {
            return Err(ReplayError::Line {
                line: number,
                fault: format!("longer than {MAX_LINE_BYTES} bytes"),
            });
        }
        let trimmed = line.trim_ascii();
        if trimmed.is_empty() {
            continue;
        }
        let event: Event = serde_json::from_slice(trimmed).map_err(|e| ReplayError::Line {
            line: number,
            fault: format!("not a trace event: {e}"),
        })?;
        // serde reads a struct from an array too; a trace line is an object.
        if trimmed.first() != Some(&b'{') {
            return Err(ReplayError::Line {
                line: number,
                fault: "not a trace event: expected a JSON object".into(),
            });
        }
        let policy = policies
            .get(&event.policy)
            .ok_or_else(|| ReplayError::Line {
                line: number,
                fault: format!("unknown policy {:?}", event.policy),
            })?;
        let identity = Identity::value(&event.key);
        clock.set(event.t_ms);
        let mut decided_now = limiter
            .decide(&[Check {
                policy,
                identity: &identity,
                cost: event.cost,
                // Unguarded: a replay stops at a store error (below).
                on_failure: OnStoreFailure::FailClosed,
                local: None,
                counters: None,
                store: 0,
            }])
            .await;
        if let Some(e) = decided_now.error {
            return Err(ReplayError::Line {
                line: number,
                fault: e.to_string(),
            });
        }
        let Some(decision) = decided_now.decisions.pop() else {
            return Err(ReplayError::Line {
                line: number,
                fault: "the store answered no decision".into(),
            });
        };
        let mut text = decision.vector_line();
        text.push('\n');
        output
            .write_all(text.as_bytes())
            .map_err(ReplayError::Output)?;
        decided += 1;
        if decided.is_multiple_of(SWEEP_EVERY) {
            limiter.sweep();
        }
    }
    output.flush().map_err(ReplayError::Output)?;
    Ok(decided)
}
