//! What the limiter records of a decision, written once for the awaited
//! path ([`Limiter::decide_request`]) and the path decided at once
//! (crate::now): a store call's outcome (a plan without a failure mode
//! left unanswered, the store's metrics, each plan's counters) and the
//! request's (its latency, the sampled log, the trace capture).

use tollgate_core::Identity;
use tollgate_store::{DecidedBy, Replay};

use crate::limiter::{Decided, Limiter};
use crate::plan::Check;

impl Limiter {
    /// A store call's `decided` for `checks` on store `store`, made at
    /// `now_ms`, recorded and answered: unanswered when a counted plan
    /// without a failure mode was decided without the store.
    pub(crate) fn record_store_call(
        &self,
        store: usize,
        checks: &[Check<'_>],
        mut decided: Decided,
        now_ms: u64,
    ) -> Decided {
        let replayed = decided.replay == Replay::Replayed;
        // Decided without the store, but a counted check's plan declares
        // no failure mode (fail_closed answers regardless): no verdict is
        // counted, only the store's fault. An enforced one makes the whole
        // request unanswered — no decisions, `by` the path that stood in,
        // `error` why — so a plan without a mode never fails open. A look
        // or a shadow limit never makes the answer an error: answered as
        // fail_open answers, it is a degraded decision.
        let without_mode = |c: &Check<'_>| c.counted && c.plan.on_failure().is_none();
        let unanswered = decided.by.is_degraded()
            && decided.by != DecidedBy::FailClosed
            && checks.iter().any(without_mode);
        if unanswered {
            let fault = Decided::new(DecidedBy::Shared, Vec::new())
                .with_error(decided.error.clone())
                .timed(decided.store_us);
            self.observe_store(store, &fault);
            if checks.iter().any(|c| without_mode(c) && !c.plan.shadow()) {
                decided.decisions.clear();
            }
            return decided;
        }
        self.observe_store(store, &decided);
        self.count(checks, &decided, replayed, now_ms);
        self.add_unspent_blocks(checks, &mut decided);
        decided
    }

    /// A request's `decided`, begun at `started_us` (monotonic) and, when
    /// a capture is on, `started_ms` (wall): its latency, the sampled log
    /// and the capture.
    pub(crate) fn record_request(
        &self,
        checks: &[Check<'_>],
        decided: &Decided,
        started_us: u64,
        started_ms: Option<u64>,
    ) {
        let took_us = self.clock.monotonic_us().saturating_sub(started_us);
        self.metrics.decision_seconds.observe_us(took_us);
        self.sampled_log
            .log_checks(checks, decided, took_us, &self.stores);
        // A retry answered from its record, or a refused id, spent nothing:
        // replaying it would.
        if let (Some(trace), Some(now_ms)) = (self.trace(), started_ms)
            && decided.replay == Replay::Fresh
        {
            let counted: Vec<(&str, &Identity, u64)> = checks
                .iter()
                .filter(|c| c.counted)
                .map(|c| (c.plan.policy().name(), c.identity, c.cost))
                .collect();
            trace.record(now_ms, &counted);
        }
    }
}
