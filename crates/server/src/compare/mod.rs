//! `tollgate compare`: one trace through several policies side by side,
//! or through two configs (`--against`, the old one) to see what the new
//! one would admit and reject that the old did not, and whom it would
//! newly reject. Every decision is a replay's ([`crate::replay`]): the
//! same limiter at each event's time, shadow policies as `serve` decides
//! them. The trace is streamed: memory holds the stores' keys, each
//! policy's identities active within one span, and the names of the
//! identities whose decisions changed (at most [`MAX_NAMED`] a list).

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::PathBuf;

use thiserror::Error;
use tollgate_core::{Decision, Identity};

use crate::config::{ConfigLoadError, ServeConfig};
use crate::explain::{SpanBound, describe_policy, span_bound};
use crate::plot::Plot;
use crate::replay::{
    Decider, Event, Fault, MAX_LINE_BYTES, ReplayError, ReplayPolicy, ReplayStore, Seen, SpanWatch,
    Tally, Verdict, parse_event, replay_policies,
};

mod against;
mod names;
mod report;

use against::against;

/// The most identities named in one list; the rest are counted.
pub const MAX_NAMED: usize = 10_000;

/// What `tollgate compare` was asked.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// The config (the new one, with `against`).
    pub config: PathBuf,
    /// The trace, JSON lines as `replay` reads them.
    pub trace: PathBuf,
    /// The old config, to compare the new one against.
    pub against: Option<PathBuf>,
    /// Only these policies (all of the config's when empty).
    pub policies: Vec<String>,
    /// Whether to draw the picture too.
    pub plot: bool,
    /// The memory store's most keys, each config's.
    pub max_keys: usize,
}

/// Why a comparison was not made.
#[derive(Debug, Error)]
pub enum CompareError {
    /// A config did not load.
    #[error(transparent)]
    Config(#[from] ConfigLoadError),
    /// `--policies` names a policy no config has.
    #[error("--policies: no policy named {name:?}; the config's policies: {known}")]
    UnknownPolicy {
        /// The name given.
        name: String,
        /// The policies there are.
        known: String,
    },
    /// The trace could not be opened or read.
    #[error("--trace {path}: {source}")]
    Trace {
        /// The trace file.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// A trace line is malformed, or could not be decided.
    #[error("--trace {path}: {source}")]
    Replay {
        /// The trace file.
        path: String,
        /// The line and its fault.
        source: ReplayError,
    },
    /// A changed identity could not be named without showing it raw.
    #[error("{0}")]
    Names(String),
}

/// One side of a policy's row: its policy, totals and worst span.
#[derive(Debug)]
pub struct Side {
    /// `name: algorithm …`, as `validate` describes it.
    pub limits: String,
    /// Decided in shadow mode.
    pub shadow: bool,
    /// Offered, admitted, rejected, with their costs.
    pub tally: Tally,
    /// Its bound over a span of its length (none for concurrency).
    pub bound: Option<SpanBound>,
    /// The most one identity was admitted in any such span.
    pub worst: u64,
    watch: Option<SpanWatch>,
}

impl Side {
    /// Admissions of identities the worst span did not follow, beyond
    /// the most it follows at once ([`crate::replay::MAX_WATCHED`]).
    pub fn not_followed(&self) -> u64 {
        self.watch.as_ref().map_or(0, |w| w.overflowed)
    }
}

impl Side {
    fn new(policy: &ReplayPolicy) -> Self {
        let bound = span_bound(policy.limits());
        Self {
            limits: describe_policy(&policy.policy),
            shadow: policy.shadow,
            tally: Tally::default(),
            bound,
            worst: 0,
            watch: bound.as_ref().map(SpanWatch::new),
        }
    }

    /// Counts one decided check; `spent` when its whole request was
    /// admitted.
    fn count(&mut self, identity: &Identity, t_ms: u64, cost: u64, verdict: Verdict, spent: bool) {
        self.tally.count(cost, verdict);
        if let (Some(watch), true) = (&mut self.watch, spent && verdict.admitted()) {
            watch.admit(identity, t_ms, cost);
            self.worst = watch.worst();
        }
    }
}

/// What the new config decided differently, for one policy.
#[derive(Debug, Clone, Default)]
pub struct Change {
    /// Checks the new rejects that the old admitted, and their cost.
    pub newly_rejected: (u64, u64),
    /// Checks the new admits that the old rejected, and their cost.
    pub newly_admitted: (u64, u64),
    /// The identities of the first, hashed, in order.
    pub rejected_identities: BTreeSet<String>,
    /// The identities of the second, hashed, in order.
    pub admitted_identities: BTreeSet<String>,
    /// Identities changed beyond [`MAX_NAMED`] a list, not named.
    pub left_out: u64,
}

/// One policy compared.
#[derive(Debug)]
pub struct Row {
    /// The policy's name.
    pub policy: String,
    /// Side by side: the policy; with `--against`: the new config's.
    pub side: Option<Side>,
    /// With `--against`: the old config's.
    pub before: Option<Side>,
    /// With `--against`: what changed.
    pub change: Option<Change>,
}

/// A comparison made.
#[derive(Debug)]
pub struct Compared {
    /// What was compared with what.
    pub options: CompareOptions,
    /// One row a policy.
    pub rows: Vec<Row>,
    /// The picture, when asked for.
    pub svg: Option<String>,
}

/// Runs the comparison `options` asks for.
pub fn compare(options: &CompareOptions) -> Result<Compared, CompareError> {
    let new = ServeConfig::load_policies(&options.config)?;
    let old = match &options.against {
        Some(path) => Some(ServeConfig::load_policies(path)?),
        None => None,
    };
    let file = File::open(&options.trace).map_err(|source| CompareError::Trace {
        path: options.trace.display().to_string(),
        source,
    })?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| CompareError::Trace {
            path: options.trace.display().to_string(),
            source,
        })?;
    let input = BufReader::new(file);
    let (rows, svg) = match old {
        None => runtime.block_on(side_by_side(options, &new, input))?,
        Some(old) => runtime.block_on(against(options, &old, &new, input))?,
    };
    Ok(Compared {
        options: options.clone(),
        rows,
        svg,
    })
}

/// The policies `names` picks of `all` (all when empty), or the first
/// name none of them has.
fn pick(all: &[ReplayPolicy], names: &[String]) -> Result<Vec<ReplayPolicy>, CompareError> {
    if names.is_empty() {
        return Ok(all.to_vec());
    }
    names
        .iter()
        .map(|name| {
            all.iter()
                .find(|p| p.name() == name)
                .cloned()
                .ok_or_else(|| CompareError::UnknownPolicy {
                    name: name.clone(),
                    known: all
                        .iter()
                        .map(|p| p.name().to_owned())
                        .collect::<Vec<_>>()
                        .join(", "),
                })
        })
        .collect()
}

/// Every check of the trace offered to each picked policy alone, at its
/// time, on one store (each policy keys its own state); a refund line
/// is passed over, its policy being the trace's, not these.
async fn side_by_side(
    options: &CompareOptions,
    config: &ServeConfig,
    input: impl BufRead,
) -> Result<(Vec<Row>, Option<String>), CompareError> {
    let picked = pick(&replay_policies(config), &options.policies)?;
    let target = memory(options);
    let decider = Decider::open(&picked, &target)
        .await
        .map_err(|source| replay_error(options, source))?;
    let mut sides: Vec<Side> = picked.iter().map(Side::new).collect();
    let mut plot = options.plot.then(|| Plot::new(&picked));
    let mut events = Events::new(input);
    while let Some((number, event)) = events.next().map_err(|e| replay_error(options, e))? {
        if event.refund {
            continue;
        }
        for item in event.items() {
            let identity = item
                .key
                .identity()
                .map_err(|fault| line_error(options, number, fault))?;
            for (policy, side) in picked.iter().zip(&mut sides) {
                let (decision, verdict) = decider
                    .decide_one(policy.name(), event.t_ms, &identity, item.cost)
                    .await
                    .map_err(|fault| fault_error(options, number, fault))?;
                side.count(&identity, event.t_ms, item.cost, verdict, true);
                if let Some(plot) = plot.as_mut() {
                    let seen = seen(policy.name(), event.t_ms, &identity, item.cost, &decision);
                    plot.see(&Seen {
                        verdict,
                        request_admitted: verdict.admitted(),
                        ..seen
                    });
                }
            }
        }
        if number.is_multiple_of(65_536) {
            decider.sweep();
        }
    }
    let rows = picked
        .iter()
        .zip(sides)
        .map(|(policy, side)| Row {
            policy: policy.name().to_owned(),
            side: Some(side),
            before: None,
            change: None,
        })
        .collect();
    Ok((rows, plot.map(|p| p.svg())))
}

/// A decided check as a picture sees it, admitted when `decision` is
/// (a caller sets the verdict of a shadow or batched check).
fn seen<'a>(
    policy: &'a str,
    t_ms: u64,
    identity: &'a Identity,
    cost: u64,
    decision: &'a Decision,
) -> Seen<'a> {
    let verdict = if decision.allowed {
        Verdict::Admitted
    } else {
        Verdict::Rejected
    };
    Seen {
        t_ms,
        policy,
        identity,
        cost,
        decision,
        verdict,
        request_admitted: verdict.admitted(),
        refunded: None,
    }
}

/// The memory store, as both configs decide on it.
fn memory(options: &CompareOptions) -> ReplayStore {
    ReplayStore {
        max_keys: options.max_keys,
        ..ReplayStore::default()
    }
}

fn replay_error(options: &CompareOptions, source: ReplayError) -> CompareError {
    CompareError::Replay {
        path: options.trace.display().to_string(),
        source,
    }
}

fn line_error(options: &CompareOptions, line: u64, fault: String) -> CompareError {
    replay_error(options, ReplayError::Line { line, fault })
}

fn fault_error(options: &CompareOptions, line: u64, fault: Fault) -> CompareError {
    match fault {
        Fault::Line(fault) | Fault::Store(fault) => line_error(options, line, fault),
    }
}

/// The trace's events, one at a time, with their line numbers; a bad
/// line stops the comparison.
struct Events<R> {
    input: R,
    line: Vec<u8>,
    number: u64,
}

impl<R: BufRead> Events<R> {
    fn new(input: R) -> Self {
        Self {
            input,
            line: Vec::with_capacity(256),
            number: 0,
        }
    }

    fn next(&mut self) -> Result<Option<(u64, Event)>, ReplayError> {
        loop {
            self.line.clear();
            let read = io::Read::take(&mut self.input, MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut self.line)
                .map_err(ReplayError::Input)?;
            if read == 0 {
                return Ok(None);
            }
            self.number += 1;
            let fault = |fault: String| ReplayError::Line {
                line: self.number,
                fault,
            };
            if self.line.len() > MAX_LINE_BYTES {
                return Err(fault(format!("longer than {MAX_LINE_BYTES} bytes")));
            }
            let trimmed = self.line.trim_ascii();
            if trimmed.is_empty() {
                continue;
            }
            let event = parse_event(trimmed).map_err(fault)?;
            return Ok(Some((self.number, event)));
        }
    }
}
