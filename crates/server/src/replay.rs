//! `tollgate replay`: decide a trace at its own times through the limiter
//! (the memory store, or Redis's scripts with each event's time passed to
//! them), streaming line by line so a trace of any length runs in constant
//! memory (beyond the store's own bounded keys).

use std::fmt;
use std::io::{self, BufRead, Write};

use thiserror::Error;
use tollgate_core::{Decision, Identity};
use tollgate_limiter::StoreError;

mod decide;
mod event;
mod policies;
mod span_watch;
mod store;
mod summary;

pub use decide::Verdict;
pub(crate) use decide::{Decider, Fault, Outcome};
pub(crate) use event::{Event, Item, parse_event};
pub use policies::{ReplayPolicy, replay_policies};
pub use span_watch::{MAX_WATCHED, SpanWatch};
pub use summary::{Summary, Tally};

/// A longer line is refused rather than buffered without bound.
pub(crate) const MAX_LINE_BYTES: usize = 1 << 20;
/// How many decisions pass between sweeps of the memory store's idle keys.
const SWEEP_EVERY: u64 = 65_536;
/// The prefix `serve` writes under unless its config says otherwise.
pub(crate) const SERVE_PREFIX: &str = "tollgate";
/// The memory store's keys when `--max-keys` is not given.
pub const DEFAULT_MAX_KEYS: usize = 10_000_000;
/// A replay's own prefix when it is given none.
pub const REPLAY_PREFIX: &str = "tollgate-replay";

/// Why a replay stopped.
#[derive(Debug, Error)]
pub enum ReplayError {
    /// A trace line is malformed, or the store failed deciding it.
    #[error("line {line}: {fault}")]
    Line {
        /// The line's number, from 1.
        line: u64,
        /// What is wrong with it.
        fault: String,
    },
    /// The trace could not be read.
    #[error("reading the trace: {0}")]
    Input(io::Error),
    /// The decisions could not be written.
    #[error("writing decisions: {0}")]
    Output(io::Error),
    /// The store could not be opened (or `--store` names none).
    #[error("store: {0}")]
    Store(StoreError),
}

/// What one output line holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReplayFormat {
    /// The decision alone, as the shipped vectors' `expected.jsonl` spells it.
    #[default]
    Decision,
    /// The event's `t_ms`, `policy` and `key`, then the decision.
    Full,
}

/// Where a replay decides: the memory store, or a Redis under a prefix of
/// its own, never a serving tollgate's keys unless told.
#[derive(Debug, Clone)]
pub struct ReplayStore {
    /// The most keys the memory store keeps before evicting.
    pub max_keys: usize,
    /// `memory` (or none), or a `redis://` / `rediss://` URL.
    pub store: Option<String>,
    /// The Redis key prefix ([`REPLAY_PREFIX`] when none).
    pub prefix: Option<String>,
    /// Write into a prefix that holds keys no replay wrote, or into
    /// `serve`'s default prefix: the operator says they mean it.
    pub write_live_keys: bool,
}

impl Default for ReplayStore {
    /// The memory store, with room for [`DEFAULT_MAX_KEYS`].
    fn default() -> Self {
        Self {
            max_keys: DEFAULT_MAX_KEYS,
            store: None,
            prefix: None,
            write_live_keys: false,
        }
    }
}

/// How a replay reads and writes.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplayOptions {
    /// What each output line holds.
    pub format: ReplayFormat,
    /// Report a bad line on the error stream and go on, instead of stopping.
    pub skip_bad_lines: bool,
    /// Flush the output after every line, for a reader following along.
    pub line_buffered: bool,
}

/// What a replay did.
#[derive(Debug, Default)]
pub struct Replayed {
    /// Events decided.
    pub decided: u64,
    /// Bad lines reported and passed over (`skip_bad_lines`).
    pub skipped: u64,
    /// Per-policy totals.
    pub summary: Summary,
}

/// One check as a replay decided it, for a reader watching alongside
/// the output (`--plot`, `compare`).
pub struct Seen<'a> {
    /// The event's time.
    pub t_ms: u64,
    /// The check's policy.
    pub policy: &'a str,
    /// Its identity (a capture's is the keyed hash `serve` wrote).
    pub identity: &'a Identity,
    /// Its cost (a refund's: the units asked back).
    pub cost: u64,
    /// The decision; a refund's look at the state it left.
    pub decision: &'a Decision,
    /// Admitted, rejected, or a shadow policy's verdict.
    pub verdict: Verdict,
    /// Whether the whole request was admitted, and so spent: a check that
    /// admits alone spends nothing in a request another check rejected.
    pub request_admitted: bool,
    /// A refund's units given back (`None` for a decided check).
    pub refunded: Option<u64>,
}

/// Replays on the store `target` names: `memory` (or none), or a
/// `redis://` / `rediss://` URL under a prefix that is empty or a
/// replay's. The limiter's clock is set to each event's time; the memory
/// store reads it, and Redis is handed it. Bad lines, when skipped, are
/// reported on `errors`; `watch` sees every decided check.
pub fn replay_trace(
    policies: &[ReplayPolicy],
    target: &ReplayStore,
    options: ReplayOptions,
    input: impl BufRead,
    output: impl Write,
    errors: impl Write,
    watch: &mut dyn FnMut(&Seen<'_>),
) -> Result<Replayed, ReplayError> {
    // One thread: the trace is read, decided and written in order.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ReplayError::Input)?;
    runtime.block_on(async {
        let decider = Decider::open(policies, target).await?;
        replay(&decider, options, input, output, errors, watch).await
    })
}

/// Replays every event of `input` through `limiter`, its clock set to each
/// event's time, writing one decision a line to `output`.
async fn replay(
    decider: &Decider,
    options: ReplayOptions,
    mut input: impl BufRead,
    mut output: impl Write,
    mut errors: impl Write,
    watch: &mut dyn FnMut(&Seen<'_>),
) -> Result<Replayed, ReplayError> {
    let mut line = Vec::with_capacity(256);
    let mut text = String::with_capacity(256);
    let mut number = 0u64;
    let mut replayed = Replayed::default();
    loop {
        line.clear();
        let read = io::Read::take(&mut input, MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(ReplayError::Input)?;
        if read == 0 {
            break;
        }
        number += 1;
        let event = if line.len() > MAX_LINE_BYTES {
            if options.skip_bad_lines {
                skip_rest_of_line(&mut input, &mut line)?;
            }
            Err(format!("longer than {MAX_LINE_BYTES} bytes"))
        } else {
            let trimmed = line.trim_ascii();
            if trimmed.is_empty() {
                continue;
            }
            parse_event(trimmed)
        };
        let decided = match event {
            Ok(event) => decider.decide(&event).await.map(|outcome| (event, outcome)),
            Err(fault) => Err(Fault::Line(fault)),
        };
        let (event, outcome) = match decided {
            Ok(decided) => decided,
            Err(Fault::Line(fault)) if options.skip_bad_lines => {
                writeln!(errors, "tollgate: line {number}: {fault} (skipped)")
                    .map_err(ReplayError::Output)?;
                replayed.skipped += 1;
                continue;
            }
            Err(Fault::Line(fault)) | Err(Fault::Store(fault)) => {
                return Err(ReplayError::Line {
                    line: number,
                    fault,
                });
            }
        };
        text.clear();
        record(
            &event,
            &outcome,
            options.format,
            &mut text,
            &mut replayed.summary,
            watch,
        );
        output
            .write_all(text.as_bytes())
            .map_err(ReplayError::Output)?;
        if options.line_buffered {
            output.flush().map_err(ReplayError::Output)?;
        }
        replayed.decided += 1;
        if replayed.decided.is_multiple_of(SWEEP_EVERY) {
            decider.sweep();
        }
    }
    output.flush().map_err(ReplayError::Output)?;
    Ok(replayed)
}

/// Reads and drops what is left of an overlong line, up to its newline.
fn skip_rest_of_line(input: &mut impl BufRead, buffer: &mut Vec<u8>) -> Result<(), ReplayError> {
    while buffer.last() != Some(&b'\n') {
        buffer.clear();
        let read = io::Read::take(&mut *input, MAX_LINE_BYTES as u64)
            .read_until(b'\n', buffer)
            .map_err(ReplayError::Input)?;
        if read == 0 {
            break;
        }
    }
    Ok(())
}

/// Writes `event`'s decided checks to `text`, counts them in `summary`
/// and shows them to `watch`.
fn record(
    event: &Event,
    outcome: &Outcome,
    format: ReplayFormat,
    text: &mut String,
    summary: &mut Summary,
    watch: &mut dyn FnMut(&Seen<'_>),
) {
    let checks = event
        .items()
        .iter()
        .zip(&outcome.decisions)
        .zip(&outcome.verdicts)
        .zip(&outcome.identities);
    let request_admitted = outcome.verdicts.iter().all(|v| v.admitted());
    for (((item, decision), verdict), identity) in checks {
        write_line(
            text,
            format,
            event.t_ms,
            item,
            decision,
            *verdict,
            outcome.refunded,
        );
        match outcome.refunded {
            Some(units) => summary.refund(&item.policy, units),
            None => summary.count(&item.policy, item.cost, *verdict),
        }
        watch(&Seen {
            t_ms: event.t_ms,
            policy: &item.policy,
            identity,
            cost: item.cost,
            decision,
            verdict: *verdict,
            request_admitted,
            refunded: outcome.refunded,
        });
    }
}

/// The output line of one decided check, newline included; a shadow
/// policy's is admitted, its figures the would-be decision's, and ends
/// with `"shadow": true, "would_allow": …` as `serve` answers it; a
/// refund's line ends with the units it gave back.
fn write_line(
    out: &mut String,
    format: ReplayFormat,
    t_ms: u64,
    item: &Item,
    decision: &Decision,
    verdict: Verdict,
    refunded: Option<u64>,
) {
    // A refund's answer is a look at the state, a shadow policy's too.
    let mut decision_text = match (verdict, refunded) {
        (Verdict::Shadow { would_allow }, None) => {
            let admitted = Decision {
                allowed: true,
                ..*decision
            };
            let mut line = admitted.vector_line();
            line.pop();
            let _ = fmt::Write::write_fmt(
                &mut line,
                format_args!(", \"shadow\": true, \"would_allow\": {would_allow}}}"),
            );
            line
        }
        _ => decision.vector_line(),
    };
    if let Some(units) = refunded {
        decision_text.pop();
        let _ = fmt::Write::write_fmt(
            &mut decision_text,
            format_args!(", \"refunded\": {units}}}"),
        );
    }
    match format {
        ReplayFormat::Decision => out.push_str(&decision_text),
        ReplayFormat::Full => {
            // serde_json quotes and escapes the strings; the decision's own
            // fields follow, in the vectors' spelling.
            let quoted = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "null".into());
            let _ = fmt::Write::write_fmt(
                out,
                format_args!(
                    "{{\"t_ms\": {}, \"policy\": {}, \"key\": {}, {}",
                    t_ms,
                    quoted(&item.policy),
                    item.key.to_json(),
                    decision_text.strip_prefix('{').unwrap_or(&decision_text)
                ),
            );
        }
    }
    out.push('\n');
}
