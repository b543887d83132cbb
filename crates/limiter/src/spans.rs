//! Trace spans of a decided request, for an exporter the embedding program
//! installs (the server's OTLP export, a service's own OpenTelemetry
//! layer). They are made only after [`set_spans`] turned them on, and are
//! declared under one target, [`SPANS`], for the program's filter. Off (the
//! default), a span is `Span::none()`: a decision pays one atomic load.
//!
//! - `tollgate.decide`: one per decided request — its policies, outcome,
//!   path (which of the store or a failure mode decided) and request id.
//!   Identities are never recorded.
//! - `tollgate.store`: a child per store call — the store's role and
//!   region, and the error kind when it failed.

use std::sync::atomic::{AtomicBool, Ordering};

use tracing::Span;
use tracing::field::Empty;

use tollgate_store::{GuardedDecisions, Replay, RequestId};
use tracing::Instrument;

use crate::plan::Check;
use crate::stores::StoreName;

/// The target every span of this crate is declared under.
pub const SPANS: &str = "tollgate::spans";

/// Whether spans are made, for the whole process.
static SPANS_ON: AtomicBool = AtomicBool::new(false);

/// Turns the spans of every decision (and of the doors that ask
/// [`spans_on`]) on or off for the whole process: on only in a program
/// that exports them, since building one costs a decision hundreds of
/// instructions even when no subscriber wants it.
pub fn set_spans(on: bool) {
    SPANS_ON.store(on, Ordering::Relaxed);
}

/// Whether [`set_spans`] turned spans on.
pub fn spans_on() -> bool {
    SPANS_ON.load(Ordering::Relaxed)
}

/// Awaits `$future` inside `$span` — wrapped only when the span is
/// enabled: wrapping moves the whole future into the wrapper, a copy of
/// hundreds of bytes a decision pays even for a disabled span. For the
/// doors' spans too.
#[macro_export]
macro_rules! within_span {
    ($span:expr, $future:expr) => {
        if $span.is_disabled() {
            $future.await
        } else {
            tracing::Instrument::instrument($future, $span.clone()).await
        }
    };
}

/// `decided` awaited inside the span of its request (`checks`, under
/// `id`), its outcome recorded there. Called only while spans are on, and
/// boxed by the caller, so the untraced path carries no span.
pub(crate) async fn decide_within(
    checks: &[Check<'_>],
    id: Option<&RequestId>,
    decided: impl Future<Output = GuardedDecisions>,
) -> GuardedDecisions {
    let span = decide(checks, id);
    let decided = decided.instrument(span.clone()).await;
    record(&span, &decided);
    decided
}

/// `call` awaited inside the span of one call to the store `name`.
pub(crate) async fn store_within(
    name: Option<&StoreName>,
    call: impl Future<Output = GuardedDecisions>,
) -> GuardedDecisions {
    let span = store(name);
    let decided = call.instrument(span.clone()).await;
    record_store(&span, &decided);
    decided
}

/// The span of one decided request, its outcome still to be recorded.
fn decide(checks: &[Check<'_>], id: Option<&RequestId>) -> Span {
    let span = tracing::info_span!(
        target: SPANS,
        "tollgate.decide",
        policies = Empty,
        checks = checks.len(),
        request_id = Empty,
        outcome = Empty,
        path = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    let mut policies = String::new();
    for check in checks {
        if !policies.is_empty() {
            policies.push(',');
        }
        policies.push_str(check.plan.policy().name());
    }
    span.record("policies", policies.as_str());
    if let Some(id) = id {
        span.record("request_id", id.as_str());
    }
    span
}

/// Records what `decided` answered on its request's span: `allowed`,
/// `rejected`, `replayed` (answered from a retry's record), `mismatch` (an
/// id reused on another request) or `unanswered` (no store could decide
/// and no failure mode answered).
fn record(span: &Span, decided: &GuardedDecisions) {
    if span.is_disabled() {
        return;
    }
    let outcome = match decided.replay {
        Replay::Mismatch => "mismatch",
        Replay::Replayed => "replayed",
        Replay::Fresh if decided.decisions.is_empty() => "unanswered",
        Replay::Fresh if decided.decisions.iter().all(|d| d.allowed) => "allowed",
        Replay::Fresh => "rejected",
    };
    span.record("outcome", outcome);
    span.record("path", decided.by.name());
}

/// The span of one call to `store`.
fn store(name: Option<&StoreName>) -> Span {
    let span = tracing::info_span!(
        target: SPANS,
        "tollgate.store",
        store = Empty,
        region = Empty,
        error = Empty,
    );
    if let Some(name) = name.filter(|_| !span.is_disabled()) {
        span.record("store", name.role.as_str());
        if let Some(region) = &name.region {
            span.record("region", region.as_str());
        }
    }
    span
}

/// Records a store call's error kind on its span.
fn record_store(span: &Span, decided: &GuardedDecisions) {
    if let Some(error) = decided.error.as_ref().filter(|_| !span.is_disabled()) {
        span.record("error", error.kind());
    }
}
