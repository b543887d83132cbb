//! The RateLimit fields' text (draft-ietf-httpapi-ratelimit-headers), the
//! one writer for every protocol: HTTP puts the two values in its response
//! headers, Envoy's RLS hands them to Envoy to add. Plain strings here, so
//! neither protocol's header types leak into the other.

use tollgate_core::{Decision, Limits, Policy};

/// The one place the RateLimit fields' draft is pinned. Moving to the RFC
/// (or a later draft) is a change here and in docs/http-api.md.
pub mod ratelimit_draft {
    /// draft-ietf-httpapi-ratelimit-headers-11 (23 May 2026), still a draft.
    pub const VERSION: &str = "draft-ietf-httpapi-ratelimit-headers-11";
    /// The policy field's name, lower-case.
    pub const POLICY_FIELD: &str = "ratelimit-policy";
    /// The state field's name, lower-case.
    pub const STATE_FIELD: &str = "ratelimit";
}

/// The values of `RateLimit-Policy` and `RateLimit` for one answer.
pub struct RateLimitFields {
    /// The `RateLimit-Policy` value.
    pub policy: String,
    /// The `RateLimit` value.
    pub state: String,
}

/// The two fields for the decided policies, in order; `None` when there
/// are none. Each decision comes with its policy's `RateLimit-Policy` item
/// ([`policy_item`]), precomputed once per config load where it can be.
pub fn ratelimit_fields<'a, Item: AsRef<str>>(
    decided: impl Iterator<Item = (Item, &'a Policy, &'a Decision)>,
) -> Option<RateLimitFields> {
    let mut policy_field = String::with_capacity(64);
    let mut state_field = String::with_capacity(64);
    for (policy_item_text, policy, decision) in decided {
        if !policy_field.is_empty() {
            policy_field.push_str(", ");
            state_field.push_str(", ");
        }
        policy_field.push_str(policy_item_text.as_ref());
        state_item(&mut state_field, policy, decision);
    }
    (!policy_field.is_empty()).then_some(RateLimitFields {
        policy: policy_field,
        state: state_field,
    })
}

/// `"name";q=20;w=4`: a quota a client can use, and the window it is stated
/// over. Computed once per policy per config load.
pub fn policy_item(policy: &Policy) -> String {
    let (quota, window_seconds) = quota_and_window(policy.limits());
    // Policy names are validated to [A-Za-z0-9._-], so the sf-string needs no escapes.
    format!("\"{}\";q={quota};w={window_seconds}", policy.name())
}

/// `q` and `w` (docs/http-api.md, "The RateLimit fields"): a quota that a
/// client spreading it evenly over every `w` seconds always gets, so never
/// more than the policy admits there. A bucket of capacity C refilling R a
/// second: when R < C, C over the time to refill it from empty (a burst of C
/// each `w` fits too); when R ≥ C (a fast bucket), R a second rounded down,
/// since "C per second" would hold a client to a fraction of its limit.
/// Windows: what the whole windows within `w` admit, so a window below a
/// second is not stated as its limit per second either. Permits: N over
/// the lease.
fn quota_and_window(limits: &Limits) -> (u64, u64) {
    match limits {
        Limits::TokenBucket(r) | Limits::Gcra(r) => {
            let per_second = u128::from(r.tokens()) * 1000;
            let per = u128::from(r.per_ms());
            if per_second >= u128::from(r.capacity()) * per {
                (u64::try_from(per_second / per).unwrap_or(u64::MAX), 1)
            } else {
                (r.capacity(), limits.window_ms().div_ceil(1000).max(1))
            }
        }
        Limits::FixedWindow(w) | Limits::SlidingLog(w) => {
            whole_windows(u128::from(w.limit()), u128::from(w.window_ms()))
        }
        Limits::SlidingWindow(w) => sliding_counter(w.limit(), w.window_ms()),
        // Permits, not a rate: N in flight at once, and a holder keeps its
        // own at most a lease, so N per lease always fits.
        Limits::Concurrency(p) => (p.limit(), p.lease_ms().div_ceil(1000).max(1)),
    }
}

/// `per_window` in each whole window within `w`, the window rounded up to
/// seconds. A fixed window admits its limit from each window's start, and
/// any `w` seconds hold ⌊1000·w / W⌋ starts; a sliding log admits it again
/// W after it was spent; spread evenly, that many never put more than the
/// limit in one window. A window that does not divide whole seconds loses
/// less than one window a `w`: more than half the rate is stated.
fn whole_windows(per_window: u128, window_ms: u128) -> (u64, u64) {
    let w = window_ms.div_ceil(1000).max(1);
    let windows = w * 1000 / window_ms.max(1);
    let quota = per_window.saturating_mul(windows);
    (
        u64::try_from(quota).unwrap_or(u64::MAX),
        u64::try_from(w).unwrap_or(u64::MAX),
    )
}

/// The sliding window counter weights the previous window as if its count
/// had been spread evenly but counts the request being decided whole, so a
/// client spreading L a window evenly is refused about once a window, and
/// the millisecond clock can cost a unit more: ⌊(L − 1)·W / (W + 1)⌋ a
/// window (L − 2 unless L > W + 1) always fits. That leaves nothing for a
/// limit of 1 or 2, which the previous and current windows must then hold
/// together: L every two windows.
fn sliding_counter(limit: u64, window_ms: u64) -> (u64, u64) {
    let (limit, window_ms) = (u128::from(limit), u128::from(window_ms));
    if limit < 3 {
        return whole_windows(limit, 2 * window_ms);
    }
    whole_windows((limit - 1) * window_ms / (window_ms + 1), window_ms)
}

/// `"name";r=1;t=4`: what is left and when it is fully restored.
fn state_item(out: &mut String, policy: &Policy, decision: &Decision) {
    let mut number = itoa::Buffer::new();
    out.push('"');
    out.push_str(policy.name());
    out.push_str("\";r=");
    out.push_str(number.format(decision.remaining.max(0)));
    out.push_str(";t=");
    out.push_str(number.format(decision.reset_after_ms.div_ceil(1000)));
}

/// One policy's `RateLimit` value alone, in a string exactly its length
/// (so it becomes a header value's buffer without another allocation).
#[cfg(feature = "request")]
pub(crate) fn state_field(policy: &Policy, decision: &Decision) -> String {
    let (mut remaining, mut reset) = (itoa::Buffer::new(), itoa::Buffer::new());
    let remaining = remaining.format(decision.remaining.max(0));
    let reset = reset.format(decision.reset_after_ms.div_ceil(1000));
    let name = policy.name();
    let mut out = String::with_capacity(name.len() + remaining.len() + reset.len() + 8);
    out.push('"');
    out.push_str(name);
    out.push_str("\";r=");
    out.push_str(remaining);
    out.push_str(";t=");
    out.push_str(reset);
    out
}

/// Whole seconds rounded up, for `Retry-After` (never 0, never early).
pub fn retry_after_seconds(ms: u64) -> u64 {
    ms.div_ceil(1000).max(1)
}

#[cfg(test)]
mod tests;
