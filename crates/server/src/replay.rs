//! `tollgate replay`: decide a trace at its own times through the limiter
//! (the memory store, or Redis's scripts with each event's time passed to
//! them), streaming line by line so a trace of any length runs in constant
//! memory (beyond the store's own bounded keys).

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, BufRead, Write};
use std::sync::Arc;

use thiserror::Error;
use tollgate_core::{Decision, ManualClock, PolicySet};
use tollgate_limiter::{
    Backend, Check, Decided, Limiter, OnStoreFailure, Plan, RedisConfig, RedisStore, StoreError,
};
use tollgate_store::PrefixHolds;

use crate::metrics::Metrics;

mod event;

use event::{Event, Item, parse_event};

/// A longer line is refused rather than buffered without bound.
const MAX_LINE_BYTES: usize = 1 << 20;
/// How many decisions pass between sweeps of the memory store's idle keys.
const SWEEP_EVERY: u64 = 65_536;
/// The prefix `serve` writes under unless its config says otherwise.
const SERVE_PREFIX: &str = "tollgate";
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
#[derive(Debug, Clone, Default)]
pub struct ReplayStore {
    /// `memory` (or none), or a `redis://` / `rediss://` URL.
    pub store: Option<String>,
    /// The Redis key prefix ([`REPLAY_PREFIX`] when none).
    pub prefix: Option<String>,
    /// Write into a prefix that holds keys no replay wrote, or into
    /// `serve`'s default prefix: the operator says they mean it.
    pub write_live_keys: bool,
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

/// Per policy, by name: events offered, admitted and rejected, each with
/// its summed cost.
#[derive(Debug, Default)]
pub struct Summary(BTreeMap<String, Tally>);

#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    admitted: u64,
    admitted_cost: u64,
    rejected: u64,
    rejected_cost: u64,
    refunds: u64,
    refunded_units: u64,
}

impl Summary {
    fn count(&mut self, policy: &str, cost: u64, allowed: bool) {
        let tally = match self.0.get_mut(policy) {
            Some(t) => t,
            None => self.0.entry(policy.to_owned()).or_default(),
        };
        if allowed {
            tally.admitted += 1;
            tally.admitted_cost = tally.admitted_cost.saturating_add(cost);
        } else {
            tally.rejected += 1;
            tally.rejected_cost = tally.rejected_cost.saturating_add(cost);
        }
    }

    fn refund(&mut self, policy: &str, units: u64) {
        let tally = match self.0.get_mut(policy) {
            Some(t) => t,
            None => self.0.entry(policy.to_owned()).or_default(),
        };
        tally.refunds += 1;
        tally.refunded_units = tally.refunded_units.saturating_add(units);
    }
}

/// One line a policy, in name order: `fw: offered 3 (cost 4), admitted 2
/// (cost 3), rejected 1 (cost 1)` — checks counted, their costs summed —
/// and `, refunded 1 (units 2)` after a policy that had refunds.
impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, t) in &self.0 {
            write!(
                f,
                "{name}: offered {} (cost {}), admitted {} (cost {}), rejected {} (cost {})",
                t.admitted + t.rejected,
                t.admitted_cost.saturating_add(t.rejected_cost),
                t.admitted,
                t.admitted_cost,
                t.rejected,
                t.rejected_cost
            )?;
            if t.refunds > 0 {
                write!(f, ", refunded {} (units {})", t.refunds, t.refunded_units)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// Replays on the store `target` names: `memory` (or none), or a
/// `redis://` / `rediss://` URL under a prefix that is empty or a
/// replay's. The limiter's clock is set to each event's time; the memory
/// store reads it, and Redis is handed it. Bad lines, when skipped, are
/// reported on `errors`.
pub fn replay_trace(
    policies: &PolicySet,
    max_keys: usize,
    target: &ReplayStore,
    options: ReplayOptions,
    input: impl BufRead,
    output: impl Write,
    errors: impl Write,
) -> Result<Replayed, ReplayError> {
    let clock = Arc::new(ManualClock::new(0));
    // One thread: the trace is read, decided and written in order.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ReplayError::Input)?;
    let backend = match target.store.as_deref() {
        None | Some("memory") => Backend::memory(max_keys, clock.clone()),
        Some(url) if url.starts_with("redis://") || url.starts_with("rediss://") => {
            let store = runtime.block_on(open_redis(url, target))?;
            Backend::redis_at_clock(store, clock.clone())
        }
        Some(other) => {
            return Err(ReplayError::Store(StoreError::Config(format!(
                "--store {:?}: expected memory or a redis:// URL",
                tollgate_store::redact_url(other)
            ))));
        }
    };
    let metrics = Metrics::new(clock.clone());
    let limiter = Limiter::new(vec![backend], Arc::clone(&metrics.limiter), clock.clone());
    // One plan a policy, on the one store. Unguarded: a replay stops at a
    // store error (below).
    let plans: BTreeMap<&str, Plan> = policies
        .iter()
        .map(|p| {
            let plan = Plan::new(p.clone(), 0).with_failure_mode(OnStoreFailure::FailClosed);
            (p.name(), plan)
        })
        .collect();
    runtime.block_on(replay(
        &plans, &limiter, &clock, options, input, output, errors,
    ))
}

/// A Redis store under the replay's prefix, once it is known to hold no
/// live keys (or the operator said to write there anyway), marked as a
/// replay's.
async fn open_redis(url: &str, target: &ReplayStore) -> Result<RedisStore, ReplayError> {
    let mut config = RedisConfig::standalone(url);
    config.prefix = target
        .prefix
        .clone()
        .unwrap_or_else(|| REPLAY_PREFIX.to_owned());
    // A replay waits for its store rather than fail an event.
    config.timeout_ms = 10_000;
    config.validate().map_err(ReplayError::Store)?;
    let refuse = |why: String| {
        Err(ReplayError::Store(StoreError::Config(format!(
            "{why}: a replay would spend or reset live limits there; choose another --prefix, or pass --write-live-keys to write there anyway"
        ))))
    };
    let prefix = config.prefix.clone();
    if prefix == SERVE_PREFIX && !target.write_live_keys {
        return refuse(format!(
            "--prefix {prefix:?} is where `serve` keeps its keys by default"
        ));
    }
    let store = RedisStore::connect(&config)
        .await
        .map_err(ReplayError::Store)?;
    match store.prefix_holds().await.map_err(ReplayError::Store)? {
        PrefixHolds::Live if !target.write_live_keys => {
            return refuse(format!(
                "a serving tollgate marks {prefix:?} as its own ({prefix}:live, refreshed while it serves), whatever a replay left there"
            ));
        }
        PrefixHolds::Other { key } if !target.write_live_keys => {
            return refuse(format!(
                "keys under {prefix:?} were not written by a replay (one is {key:?})"
            ));
        }
        _ => {}
    }
    store
        .mark_replay_prefix()
        .await
        .map_err(ReplayError::Store)?;
    Ok(store)
}

/// Replays every event of `input` through `limiter`, its clock set to each
/// event's time, writing one decision a line to `output`.
async fn replay(
    plans: &BTreeMap<&str, Plan>,
    limiter: &Limiter,
    clock: &ManualClock,
    options: ReplayOptions,
    mut input: impl BufRead,
    mut output: impl Write,
    mut errors: impl Write,
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
            Ok(event) => decide(plans, limiter, clock, &event)
                .await
                .map(|outcome| (event, outcome)),
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
        for (item, decision) in event.items().iter().zip(&outcome.decisions) {
            write_line(
                &mut text,
                options.format,
                event.t_ms,
                item,
                decision,
                outcome.refunded,
            );
            match outcome.refunded {
                Some(units) => replayed.summary.refund(&item.policy, units),
                None => replayed
                    .summary
                    .count(&item.policy, item.cost, decision.allowed),
            }
        }
        output
            .write_all(text.as_bytes())
            .map_err(ReplayError::Output)?;
        if options.line_buffered {
            output.flush().map_err(ReplayError::Output)?;
        }
        replayed.decided += 1;
        if replayed.decided.is_multiple_of(SWEEP_EVERY) {
            limiter.sweep();
        }
    }
    output.flush().map_err(ReplayError::Output)?;
    Ok(replayed)
}

/// Why an event was not decided: its line (skippable), or the store.
enum Fault {
    Line(String),
    Store(String),
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

/// An event decided by the limiter at its own time: each check's
/// decision, all or nothing across them (one store, one call), or a
/// refund's look at the state it left with the units it gave back.
async fn decide(
    plans: &BTreeMap<&str, Plan>,
    limiter: &Limiter,
    clock: &ManualClock,
    event: &Event,
) -> Result<Outcome, Fault> {
    let plan_of = |item: &Item| {
        plans
            .get(item.policy.as_str())
            .ok_or_else(|| Fault::Line(format!("unknown policy {:?}", item.policy)))
    };
    // One check, the common line, is decided without building lists.
    if let [item] = event.items() {
        let plan = plan_of(item)?;
        let identity = item.key.identity().map_err(Fault::Line)?;
        clock.set(event.t_ms);
        let mut cost = item.cost;
        let mut refunded = None;
        if event.refund {
            let check = Check::new(plan, &identity, item.cost);
            let given = limiter.refund(&check).await;
            refunded = Some(given.map_err(|e| Fault::Store(e.to_string()))?);
            cost = 0;
        }
        let decided = limiter
            .decide(&[Check::new(plan, &identity, cost).uncounted()])
            .await;
        return outcome(decided, 1, refunded);
    }
    let mut identities = Vec::with_capacity(event.items().len());
    for item in event.items() {
        identities.push((plan_of(item)?, item.key.identity().map_err(Fault::Line)?));
    }
    clock.set(event.t_ms);
    let checks: Vec<Check<'_>> = identities
        .iter()
        .zip(event.items())
        .map(|((plan, identity), item)| Check::new(plan, identity, item.cost).uncounted())
        .collect();
    let decided = limiter.decide(&checks).await;
    outcome(decided, checks.len(), None)
}

/// A decided event's outcome: `expected` decisions, or the store's fault.
fn outcome(decided: Decided, expected: usize, refunded: Option<u64>) -> Result<Outcome, Fault> {
    if let Some(e) = decided.error {
        return Err(Fault::Store(e.to_string()));
    }
    if decided.decisions.len() != expected {
        return Err(Fault::Store(
            "the store answered another number of decisions".into(),
        ));
    }
    Ok(Outcome {
        decisions: decided.decisions,
        refunded,
    })
}

/// What an event came to.
struct Outcome {
    /// One a check, in the line's order.
    decisions: Vec<Decision>,
    /// The units a refund gave back (none for a decided event).
    refunded: Option<u64>,
}

/// The output line of one decided check, newline included; a refund's
/// line ends with the units it gave back.
fn write_line(
    out: &mut String,
    format: ReplayFormat,
    t_ms: u64,
    item: &Item,
    decision: &Decision,
    refunded: Option<u64>,
) {
    let mut decision_text = decision.vector_line();
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
