//! `tollgate replay`: decide a trace at its own times through the memory
//! store, streaming line by line so a trace of any length runs in constant
//! memory (beyond the store's own bounded keys).

use std::io::{self, BufRead, Write};
use std::sync::Arc;

use serde::Deserialize;
use thiserror::Error;
use tollgate_core::{Decision, Identity, ManualClock, PolicySet};
use tollgate_store::{Check, MemoryStore, MemoryStoreConfig};

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

/// Replays every event of `input`, writing one decision a line to `output`.
/// Returns how many events were decided.
pub fn run(
    policies: &PolicySet,
    max_keys: usize,
    mut input: impl BufRead,
    mut output: impl Write,
) -> Result<u64, ReplayError> {
    let clock = Arc::new(ManualClock::new(0));
    let store = MemoryStore::new(
        clock.clone(),
        MemoryStoreConfig {
            max_keys,
            ..MemoryStoreConfig::default()
        },
    );
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
        let policy = policies
            .get(&event.policy)
            .ok_or_else(|| ReplayError::Line {
                line: number,
                fault: format!("unknown policy {:?}", event.policy),
            })?;
        clock.set(event.t_ms);
        let identity = Identity::value(&event.key);
        let decision = store.decide_now(Check {
            policy,
            identity: &identity,
            cost: event.cost,
        });
        text.clear();
        write_decision(&mut text, &decision);
        output
            .write_all(text.as_bytes())
            .map_err(ReplayError::Output)?;
        decided += 1;
        if decided.is_multiple_of(65_536) {
            store.sweep();
        }
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
