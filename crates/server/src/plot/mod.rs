//! `tollgate replay --plot` and `compare --plot`: a replay drawn as an SVG
//! picture, one chart a policy, each named by its policy: the units
//! offered and admitted over time, the busiest identity's admissions in
//! any span of the policy's length, its rejections each marked with how
//! long its retry-after says to wait, and the policy's bound in
//! `explain`'s figures. A trace of any length is drawn in a bounded
//! picture: time is cut into at most [`MAX_BINS`] bins, whose width
//! doubles (neighbours merged) whenever the trace outgrows them.

use std::collections::HashMap;

use tollgate_core::Policy;

use crate::explain::{SpanBound, span_bound};
use crate::replay::{ReplayPolicy, Seen, SpanWatch, Verdict};

mod draw;

/// The most bins a chart's time is cut into.
pub const MAX_BINS: usize = 400;

/// One time bin of a policy's chart.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Bin {
    /// Units offered (each check's cost).
    offered: u64,
    /// Units admitted.
    admitted: u64,
    /// Units rejected (or, for a shadow policy, it would have rejected).
    rejected: u64,
    /// The longest retry-after of those rejections; `None` when none
    /// said when (`Some(0)` is not used for a rejection).
    retry_after_ms: Option<u64>,
    /// A rejection whose cost can never be admitted (no retry-after).
    never: bool,
    /// The most one identity was admitted in a span ending in this bin.
    busiest: u64,
}

impl Bin {
    fn merge(&mut self, other: &Bin) {
        self.offered = self.offered.saturating_add(other.offered);
        self.admitted = self.admitted.saturating_add(other.admitted);
        self.rejected = self.rejected.saturating_add(other.rejected);
        self.retry_after_ms = self.retry_after_ms.max(other.retry_after_ms);
        self.never |= other.never;
        self.busiest = self.busiest.max(other.busiest);
    }
}

/// One policy's chart as the trace is decided.
struct Chart {
    /// What it is called where the policy's name alone is not enough
    /// (`old: api`), else the policy's name.
    label: String,
    policy: Policy,
    shadow: bool,
    bound: Option<SpanBound>,
    watch: Option<SpanWatch>,
    bins: Vec<Bin>,
}

/// A replay being drawn: fed every decided check, drawn at the end.
pub struct Plot {
    charts: Vec<Chart>,
    by_name: HashMap<String, usize>,
    /// The first event's time, where every chart's time starts.
    origin: Option<u64>,
    /// Every chart's bin width.
    width_ms: u64,
}

impl Plot {
    /// A picture of `policies`, one chart each in their order.
    pub fn new(policies: &[ReplayPolicy]) -> Self {
        Self::labeled(
            policies
                .iter()
                .map(|p| (p.name().to_owned(), p.clone()))
                .collect(),
        )
    }

    /// A picture of one chart a label, each of its policy, in order.
    pub fn labeled(charts: Vec<(String, ReplayPolicy)>) -> Self {
        let charts: Vec<Chart> = charts
            .into_iter()
            .map(|(label, p)| {
                let bound = span_bound(p.limits());
                Chart {
                    label,
                    policy: p.policy,
                    shadow: p.shadow,
                    bound,
                    watch: bound.as_ref().map(SpanWatch::new),
                    bins: Vec::new(),
                }
            })
            .collect();
        let by_name = charts
            .iter()
            .enumerate()
            .map(|(i, c)| (c.label.clone(), i))
            .collect();
        Self {
            charts,
            by_name,
            origin: None,
            width_ms: 1,
        }
    }

    /// Counts one decided check on its policy's chart; a refund is not
    /// drawn.
    pub fn see(&mut self, seen: &Seen<'_>) {
        self.see_as(seen.policy, seen);
    }

    /// Counts one decided check on the chart `label`.
    pub fn see_as(&mut self, label: &str, seen: &Seen<'_>) {
        if seen.refunded.is_some() {
            return;
        }
        let Some(&index) = self.by_name.get(label) else {
            return;
        };
        // An event dated before the first is drawn at the first's time.
        let origin = *self.origin.get_or_insert(seen.t_ms);
        let offset = seen.t_ms.saturating_sub(origin);
        while offset / self.width_ms >= MAX_BINS as u64 {
            self.widen();
        }
        let at = usize::try_from(offset / self.width_ms).unwrap_or(MAX_BINS - 1);
        let chart = &mut self.charts[index];
        if chart.bins.len() <= at {
            chart.bins.resize(at + 1, Bin::default());
        }
        let spent = seen.verdict.admitted() && seen.request_admitted;
        let busiest = match (&mut chart.watch, spent) {
            (Some(watch), true) => Some(watch.admit(seen.identity, seen.t_ms, seen.cost)),
            _ => None,
        };
        let bin = &mut chart.bins[at];
        bin.offered = bin.offered.saturating_add(seen.cost);
        if spent {
            bin.admitted = bin.admitted.saturating_add(seen.cost);
        }
        bin.busiest = bin.busiest.max(busiest.unwrap_or(0));
        let turned_away = match seen.verdict {
            Verdict::Rejected => true,
            Verdict::Shadow { would_allow } => !would_allow,
            Verdict::Admitted => false,
        };
        if turned_away {
            bin.rejected = bin.rejected.saturating_add(seen.cost);
            match seen.decision.retry_after_ms {
                Some(ms) => bin.retry_after_ms = bin.retry_after_ms.max(Some(ms)),
                None => bin.never = true,
            }
        }
    }

    /// Doubles the bin width, merging each pair of neighbours.
    fn widen(&mut self) {
        self.width_ms = self.width_ms.saturating_mul(2);
        for chart in &mut self.charts {
            let merged = chart
                .bins
                .chunks(2)
                .map(|pair| {
                    let mut bin = pair[0];
                    if let Some(second) = pair.get(1) {
                        bin.merge(second);
                    }
                    bin
                })
                .collect();
            chart.bins = merged;
        }
    }

    /// The picture as an SVG document.
    pub fn svg(&self) -> String {
        draw::svg(self)
    }
}
