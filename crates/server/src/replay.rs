//! `tollgate replay`: decide a trace at its own times through a store (the
//! memory store, or Redis's scripts with each event's time passed to
//! them), streaming line by line so a trace of any length runs in constant
//! memory (beyond the store's own bounded keys).

use std::io::{self, BufRead, Write};
use std::sync::Arc;

use serde::Deserialize;
use thiserror::Error;
use tollgate_core::{Decision, Identity, ManualClock, PolicySet};
use tollgate_store::{Check, MemoryStore, MemoryStoreConfig, RedisConfig, RedisStore, StoreError};

/// A longer line is refused rather than buffered without bound.
const MAX_LINE_BYTES: usize = 1 << 20;

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

/// A store that decides at a given time: what a replay runs on.
pub trait ReplayStore {
    fn decide_at(&mut self, check: Check<'_>, t_ms: u64) -> Result<Decision, StoreError>;
    /// Called every so often with the count decided so far.
    fn tidy(&mut self, _decided: u64) {}
}

/// The memory store on a clock set to each event's time.
pub struct MemoryReplay {
    clock: Arc<ManualClock>,
    store: MemoryStore,
}

impl MemoryReplay {
    pub fn new(max_keys: usize) -> Self {
        let clock = Arc::new(ManualClock::new(0));
        let store = MemoryStore::new(
            clock.clone(),
            MemoryStoreConfig {
                max_keys,
                ..MemoryStoreConfig::default()
            },
        );
        Self { clock, store }
    }
}

impl ReplayStore for MemoryReplay {
    fn decide_at(&mut self, check: Check<'_>, t_ms: u64) -> Result<Decision, StoreError> {
        self.clock.set(t_ms);
        Ok(self.store.decide_now(check))
    }

    fn tidy(&mut self, decided: u64) {
        if decided.is_multiple_of(65_536) {
            self.store.sweep();
        }
    }
}

/// Redis's scripts, each event's time passed to them (not Redis's clock).
pub struct RedisReplay {
    runtime: tokio::runtime::Runtime,
    store: RedisStore,
}

impl RedisReplay {
    pub fn connect(config: &RedisConfig) -> Result<Self, ReplayError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ReplayError::Input)?;
        let store = runtime
            .block_on(RedisStore::connect(config))
            .map_err(ReplayError::Store)?;
        Ok(Self { runtime, store })
    }
}

impl ReplayStore for RedisReplay {
    fn decide_at(&mut self, check: Check<'_>, t_ms: u64) -> Result<Decision, StoreError> {
        self.runtime.block_on(self.store.decide_at(check, t_ms))
    }
}

/// Replays on the store `store` names: `memory` (or none), or a
/// `redis://` / `rediss://` URL.
pub fn run_on(
    policies: &PolicySet,
    max_keys: usize,
    store: Option<&str>,
    input: impl BufRead,
    output: impl Write,
) -> Result<u64, ReplayError> {
    match store {
        None | Some("memory") => {
            run_with(policies, &mut MemoryReplay::new(max_keys), input, output)
        }
        Some(url) if url.starts_with("redis://") || url.starts_with("rediss://") => {
            let mut config = RedisConfig::standalone(url);
            config.timeout_ms = 10_000;
            run_with(policies, &mut RedisReplay::connect(&config)?, input, output)
        }
        Some(other) => Err(ReplayError::Store(StoreError::Config(format!(
            "--store {other:?}: expected memory or a redis:// URL"
        )))),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Event {
    t_ms: u64,
    policy: String,
    key: String,
    #[serde(default = "one")]
    cost: u64,
}

fn one() -> u64 {
    1
}

/// Replays every event of `input` through the memory store, writing one
/// decision a line to `output`. Returns how many events were decided.
pub fn run(
    policies: &PolicySet,
    max_keys: usize,
    input: impl BufRead,
    output: impl Write,
) -> Result<u64, ReplayError> {
    run_with(policies, &mut MemoryReplay::new(max_keys), input, output)
}

/// Replays every event of `input` through `store`.
pub fn run_with(
    policies: &PolicySet,
    store: &mut impl ReplayStore,
    mut input: impl BufRead,
    mut output: impl Write,
) -> Result<u64, ReplayError> {
    let mut line = Vec::with_capacity(256);
    let mut number = 0u64;
    let mut decided = 0u64;
    let mut text = String::with_capacity(128);
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
        let check = Check {
            policy,
            identity: &identity,
            cost: event.cost,
        };
        let decision = store
            .decide_at(check, event.t_ms)
            .map_err(|e| ReplayError::Line {
                line: number,
                fault: e.to_string(),
            })?;
        text.clear();
        write_decision(&mut text, &decision);
        output
            .write_all(text.as_bytes())
            .map_err(ReplayError::Output)?;
        decided += 1;
        store.tidy(decided);
    }
    output.flush().map_err(ReplayError::Output)?;
    Ok(decided)
}

/// One decision a line, in the vectors' own spelling.
fn write_decision(out: &mut String, d: &Decision) {
    use std::fmt::Write as _;
    let retry = d
        .retry_after_ms
        .map_or_else(|| "null".to_owned(), |r| r.to_string());
    let _ = writeln!(
        out,
        r#"{{"allowed": {}, "limit": {}, "remaining": {}, "retry_after_ms": {}, "reset_after_ms": {}}}"#,
        d.allowed, d.limit, d.remaining, retry, d.reset_after_ms
    );
}
