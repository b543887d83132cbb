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
    pub const POLICY_FIELD: &str = "ratelimit-policy";
    pub const STATE_FIELD: &str = "ratelimit";
}

/// The values of `RateLimit-Policy` and `RateLimit` for one answer.
pub struct RateLimitFields {
    pub policy: String,
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

/// `q` and `w` (docs/http-api.md, "The RateLimit fields"): a quota that can
/// be consumed within any window of `w` seconds, never more than the policy
/// delivers there. A window algorithm: its limit over its window. A bucket
/// of capacity C refilling R a second: when R < C, the capacity over the
/// time to refill it from empty (a burst of C each `w` always fits); when
/// R ≥ C (a fast bucket), R a second rounded down, since "C per second"
/// would hold a client to a fraction of its limit.
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
        Limits::FixedWindow(_) | Limits::SlidingWindow(_) | Limits::SlidingLog(_) => {
            (limits.limit(), limits.window_ms().div_ceil(1000).max(1))
        }
    }
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

/// Whole seconds rounded up, for `Retry-After` (never 0, never early).
pub fn retry_after_seconds(ms: u64) -> u64 {
    ms.div_ceil(1000).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::{Rate, Window};

    #[test]
    fn retry_after_rounds_up_and_is_never_zero() {
        assert_eq!(retry_after_seconds(0), 1);
        assert_eq!(retry_after_seconds(1), 1);
        assert_eq!(retry_after_seconds(400), 1);
        assert_eq!(retry_after_seconds(1000), 1);
        assert_eq!(retry_after_seconds(1001), 2);
    }

    fn policy(name: &str, limit: u64, window_ms: u64) -> Policy {
        let window = Window::new(limit, window_ms).unwrap_or_else(|| unreachable!());
        Policy::new(name, Limits::FixedWindow(window))
    }

    fn decision(remaining: i64, reset_after_ms: u64) -> Decision {
        Decision {
            allowed: true,
            limit: 0,
            remaining,
            retry_after_ms: Some(0),
            reset_after_ms,
        }
    }

    #[test]
    fn items_join_in_order_and_state_rounds_reset_up() {
        let (a, b) = (policy("a", 20, 4_000), policy("b", 5, 500));
        let (item_a, item_b) = (policy_item(&a), policy_item(&b));
        let (da, db) = (decision(19, 200), decision(-3, 1_001));
        let fields =
            ratelimit_fields([(item_a.as_str(), &a, &da), (item_b.as_str(), &b, &db)].into_iter());
        let Some(fields) = fields else {
            panic!("two decided policies write both fields");
        };
        assert_eq!(fields.policy, "\"a\";q=20;w=4, \"b\";q=5;w=1");
        assert_eq!(fields.state, "\"a\";r=19;t=1, \"b\";r=0;t=2");
    }

    fn bucket(name: &str, capacity: u64, tokens: u64, per_ms: u64) -> Policy {
        let rate = Rate::new(capacity, tokens, per_ms).unwrap_or_else(|| unreachable!());
        Policy::new(name, Limits::Gcra(rate))
    }

    #[test]
    fn a_slow_bucket_states_its_capacity_over_its_refill_time() {
        assert_eq!(
            policy_item(&bucket("write-api", 20, 5, 1_000)),
            "\"write-api\";q=20;w=4"
        );
        // 20 at 3/s refills in 6.67 s: w rounds up, so the quota is conservative.
        assert_eq!(policy_item(&bucket("b", 20, 3, 1_000)), "\"b\";q=20;w=7");
    }

    #[test]
    fn a_fast_bucket_states_its_refill_per_second() {
        assert_eq!(
            policy_item(&bucket("per-ip", 50, 1000, 1_000)),
            "\"per-ip\";q=1000;w=1"
        );
        // 100 per 300 ms is 333.3 a second: rounded down.
        assert_eq!(policy_item(&bucket("f", 10, 100, 300)), "\"f\";q=333;w=1");
        // Refill equal to the capacity: both readings agree.
        assert_eq!(policy_item(&bucket("e", 50, 50, 1_000)), "\"e\";q=50;w=1");
    }

    #[test]
    fn no_decided_policy_writes_no_field() {
        assert!(ratelimit_fields(std::iter::empty::<(&str, &Policy, &Decision)>()).is_none());
    }
}
