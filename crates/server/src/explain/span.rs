//! What a policy admits over a span of time, wherever the span starts, for
//! `explain`: a window's count is exact per window but a span across a
//! boundary sees more; a log is exact over any span; a bucket admits its
//! burst then its rate. A span of T holds the times t with s ≤ t < s + T
//! (whole milliseconds); a bucket's figure is for an instant and T later,
//! both included, where it is exact.

use serde_json::{Value, json};
use tollgate_core::{Limits, Permits, Rate, Window, format_duration_ms};

use crate::config::{Deployment, ServePolicy};
use tollgate_config::Scope;

/// The span bound of `serve`'s limit in words and JSON: for the policy
/// (shares and leases sum to it), or for each instance or region that
/// decides alone.
pub(super) fn span(serve: &ServePolicy, deployment: &Deployment) -> (String, Value) {
    let limits = serve.declared.limits();
    let (mut text, mut json) = match limits {
        Limits::FixedWindow(w) => fixed_window(w),
        Limits::SlidingWindow(w) => sliding_window(w),
        Limits::SlidingLog(w) => sliding_log(w),
        Limits::TokenBucket(r) | Limits::Gcra(r) => bucket(r),
        Limits::Concurrency(p) => permits(p),
    };
    // A block is counted when taken and spent within its term; a fixed
    // window's never past its window, so its figures stand.
    if let Some(rule) = serve.hot_lease {
        let term = format_duration_ms(rule.term_ms);
        let shifted = match limits {
            // Refused at config load: a permit is no block of units.
            Limits::FixedWindow(_) | Limits::Concurrency(_) => None,
            Limits::SlidingWindow(_) | Limits::SlidingLog(_) => Some(format!(
                " With hot_lease an instance admits a block's units up to {term} after the store \
                 counted them: these figures are the store's count, and admissions can come up to \
                 {term} later."
            )),
            Limits::TokenBucket(r) | Limits::Gcra(r) => Some(format!(
                " With hot_lease an instance admits a block's units up to {term} after the store \
                 counted them: from any instant to T later, at most {} + ⌊{} × (T + {term}) / {}⌋.",
                r.capacity(),
                r.tokens(),
                format_duration_ms(r.per_ms()),
            )),
        };
        if let Some(shifted) = shifted {
            text.push_str(&shifted);
            json["admitted_up_to_ms_after_counted"] = json!(rule.term_ms);
        }
    }
    let (applies_to, noun, count, listed) = match &serve.scope {
        Scope::Instance => (
            "each instance",
            "process",
            deployment.instances(),
            "instances",
        ),
        Scope::Region => {
            let regions = deployment.regions.len() as u64;
            (
                "each region",
                "region",
                (regions > 0).then_some(regions),
                "regions",
            )
        }
        Scope::Split { .. } | Scope::Leased(_) | Scope::Global => {
            json["applies_to"] = json!("the policy");
            json["text"] = json!(text);
            return (text, json);
        }
    };
    json["applies_to"] = json!(applies_to);
    json["times"] = json!(count);
    let text = match count {
        Some(n) => format!(
            "each {noun}: {text} Across the {n} {listed} `regions:` lists, {n} × each figure."
        ),
        None if noun == "process" => {
            format!("each {noun}: {text} For N tollgate processes, N × each figure.")
        }
        None => format!("each {noun}: {text} For R regions, R × each figure."),
    };
    json["text"] = json!(text);
    (text, json)
}

/// What a policy admits per identity over a span of its own length, in
/// `explain`'s figures: what a picture draws as the bound and `compare`
/// measures against. `None` for concurrency, which bounds no span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanBound {
    /// The span: a window's length, or a bucket's refill period.
    pub span_ms: u64,
    /// Whether the span holds both its ends (a bucket's, from an instant
    /// to T later), or only its start (a window's, s ≤ t < s + T).
    pub both_ends: bool,
    /// The most any such span can see.
    pub at_most: u64,
    /// A window's limit per epoch-aligned window, or a bucket's burst.
    pub per_window: u64,
}

/// `limits`' [`SpanBound`], read from the figures `explain` states.
pub fn span_bound(limits: &Limits) -> Option<SpanBound> {
    let figure = |json: &Value, field: &str| json[field].as_u64();
    match limits {
        Limits::FixedWindow(w) | Limits::SlidingWindow(w) | Limits::SlidingLog(w) => {
            let (_, json) = match limits {
                Limits::FixedWindow(_) => fixed_window(w),
                Limits::SlidingWindow(_) => sliding_window(w),
                _ => sliding_log(w),
            };
            Some(SpanBound {
                span_ms: figure(&json, "window_ms")?,
                both_ends: false,
                at_most: figure(&json, "any_window_span_at_most")?,
                per_window: figure(&json, "per_window_at_most")?,
            })
        }
        Limits::TokenBucket(r) | Limits::Gcra(r) => {
            let (_, json) = bucket(r);
            Some(SpanBound {
                span_ms: figure(&json, "refill_per_ms")?,
                both_ends: true,
                at_most: figure(&json, "within_refill_period_at_most")?,
                per_window: figure(&json, "burst")?,
            })
        }
        Limits::Concurrency(_) => None,
    }
}

/// Exact per epoch-aligned window; a span of a window's length across a
/// boundary holds the end of one window and the start of the next.
fn fixed_window(w: &Window) -> (String, Value) {
    let (limit, window) = (w.limit(), format_duration_ms(w.window_ms()));
    let (text, across) = if w.window_ms() >= 2 {
        (
            format!(
                "exact per window (windows aligned to the Unix epoch), yet any {window} span can \
                 see up to {}: {limit} either side of a boundary.",
                limit.saturating_mul(2)
            ),
            limit.saturating_mul(2),
        )
    } else {
        (
            format!("exact per window; any {window} span is one window: at most {limit}."),
            limit,
        )
    };
    (text, window_json(w, across, false))
}

/// At most L per aligned window, and the previous window weighted as if
/// spread evenly: L admitted in a window's last ms leave the next window
/// ⌊L·e/W⌋ by its elapsed e, so a span of W starting that last ms sees
/// L + ⌊L·(W−2)/W⌋, and none sees more (design.md §3, sliding_window).
fn sliding_window(w: &Window) -> (String, Value) {
    let (limit, window) = (w.limit(), format_duration_ms(w.window_ms()));
    let next = if w.window_ms() >= 2 {
        let (l, ms) = (u128::from(limit), u128::from(w.window_ms()));
        u64::try_from(l * (ms - 2) / ms).unwrap_or(limit)
    } else {
        0
    };
    let across = limit.saturating_add(next);
    let text = if next > 0 {
        format!(
            "at most {limit} per window (windows aligned to the Unix epoch); the previous window \
             counts as if spread evenly, so any {window} span can see up to {across}: {limit} in \
             a window's last ms, {next} in the next."
        )
    } else {
        format!(
            "at most {limit} per window (windows aligned to the Unix epoch); any {window} span: \
             at most {limit}."
        )
    };
    (text, window_json(w, across, false))
}

/// Never more than L in any span of W, wherever it starts (a long log's
/// buckets only count a unit later: design.md §3, sliding_log).
fn sliding_log(w: &Window) -> (String, Value) {
    let (limit, window) = (w.limit(), format_duration_ms(w.window_ms()));
    let text =
        format!("exact over any span: any {window} span sees at most {limit}, wherever it starts.");
    (text, window_json(w, limit, true))
}

/// A bucket full at an instant admits its burst then what refills, to the
/// unit (no fraction is lost): C + ⌊N·T/P⌋ from that instant to T later.
fn bucket(r: &Rate) -> (String, Value) {
    let (burst, tokens) = (r.capacity(), r.tokens());
    let per = format_duration_ms(r.per_ms());
    let one_period = burst.saturating_add(tokens);
    let text = format!(
        "a burst, then a rate: from any instant to T later (both included), at most \
         {burst} + ⌊{tokens} × T / {per}⌋, the full burst then the refill: {one_period} within \
         {per}."
    );
    let json = json!({
        "burst": burst,
        "refill_tokens": tokens,
        "refill_per_ms": r.per_ms(),
        "any_span_at_most": "burst + floor(refill_tokens × T / refill_per_ms), T in ms",
        "within_refill_period_at_most": one_period,
    });
    (text, json)
}

/// Not a rate: at most L held at any instant, whatever the span. A permit
/// is held from acquire to release, or to its lease's end when no release
/// comes (its holder died): only the lease bounds what a dead holder keeps.
fn permits(p: &Permits) -> (String, Value) {
    let (limit, lease) = (p.limit(), format_duration_ms(p.lease_ms()));
    let text = format!(
        "at most {limit} in flight at any instant, whatever the span; a holder that dies before \
         releasing keeps its permit until its lease ({lease}) ends. Released only by a door that \
         sees the request end: the tower layer, or /v1/check then /v1/release."
    );
    let json = json!({
        "in_flight": limit,
        "lease_ms": p.lease_ms(),
        "dead_holder_keeps_permit_ms_at_most": p.lease_ms(),
    });
    (text, json)
}

/// A window's bound as `--json` states it: the window, its limit, the most
/// any span of its length can see, and whether that is exact.
fn window_json(w: &Window, any_span: u64, exact: bool) -> Value {
    json!({
        "window_ms": w.window_ms(),
        "per_window_at_most": w.limit(),
        "any_window_span_at_most": any_span,
        "exact_over_any_span": exact,
    })
}
