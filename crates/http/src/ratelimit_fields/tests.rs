use super::*;
use tollgate_core::{Rate, State, Window};

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
        permit: None,
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
    // 5 per 500 ms: two whole windows a second.
    assert_eq!(fields.policy, "\"a\";q=20;w=4, \"b\";q=10;w=1");
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

fn window(limit: u64, window_ms: u64) -> Window {
    Window::new(limit, window_ms).unwrap_or_else(|| unreachable!())
}

fn item(limits: Limits) -> String {
    policy_item(&Policy::new("p", limits))
}

#[test]
fn a_sub_second_fixed_window_or_log_states_the_whole_windows_of_a_second() {
    // 10 per 100 ms: ten windows a second, not "10 a second".
    assert_eq!(
        item(Limits::FixedWindow(window(10, 100))),
        "\"p\";q=100;w=1"
    );
    assert_eq!(item(Limits::SlidingLog(window(10, 100))), "\"p\";q=100;w=1");
    // 300 ms: a second holds three whole windows (the fourth is cut).
    assert_eq!(item(Limits::FixedWindow(window(10, 300))), "\"p\";q=30;w=1");
    assert_eq!(item(Limits::SlidingLog(window(10, 300))), "\"p\";q=30;w=1");
    // 600 ms: one whole window a second, above half the 16.7 a second.
    assert_eq!(item(Limits::FixedWindow(window(10, 600))), "\"p\";q=10;w=1");
    assert_eq!(item(Limits::FixedWindow(window(1, 1))), "\"p\";q=1000;w=1");
}

#[test]
fn a_window_of_whole_seconds_or_more_states_its_limit_over_it() {
    assert_eq!(
        item(Limits::FixedWindow(window(20, 4_000))),
        "\"p\";q=20;w=4"
    );
    assert_eq!(
        item(Limits::SlidingLog(window(5, 600_000))),
        "\"p\";q=5;w=600"
    );
    // 1.5 s rounds up to 2 s, which holds one whole window.
    assert_eq!(
        item(Limits::FixedWindow(window(10, 1_500))),
        "\"p\";q=10;w=2"
    );
    assert_eq!(
        item(Limits::FixedWindow(window(10, 1_001))),
        "\"p\";q=10;w=2"
    );
}

#[test]
fn a_sliding_window_counter_states_what_always_fits_its_weighting() {
    // L − 2 a window, in the windows w holds.
    assert_eq!(
        item(Limits::SlidingWindow(window(10, 100))),
        "\"p\";q=80;w=1"
    );
    assert_eq!(
        item(Limits::SlidingWindow(window(10, 300))),
        "\"p\";q=24;w=1"
    );
    assert_eq!(
        item(Limits::SlidingWindow(window(100, 60_000))),
        "\"p\";q=98;w=60"
    );
    assert_eq!(
        item(Limits::SlidingWindow(window(3, 1_000))),
        "\"p\";q=1;w=1"
    );
    // Above a unit a millisecond the clock costs more: ⌊4999·1000/1001⌋.
    assert_eq!(
        item(Limits::SlidingWindow(window(5_000, 1_000))),
        "\"p\";q=4994;w=1"
    );
    // A limit of 1 or 2: L every two windows.
    assert_eq!(
        item(Limits::SlidingWindow(window(1, 1_000))),
        "\"p\";q=1;w=2"
    );
    assert_eq!(item(Limits::SlidingWindow(window(1, 100))), "\"p\";q=5;w=1");
    assert_eq!(
        item(Limits::SlidingWindow(window(2, 60_000))),
        "\"p\";q=2;w=120"
    );
}

#[test]
fn extreme_windows_state_a_number_without_overflow() {
    assert_eq!(
        item(Limits::FixedWindow(window(u64::MAX, 1))),
        format!("\"p\";q={};w=1", u64::MAX)
    );
    let w = u64::MAX.div_ceil(1000);
    assert_eq!(
        item(Limits::FixedWindow(window(7, u64::MAX))),
        format!("\"p\";q=7;w={w}")
    );
    // Two windows of u64::MAX ms, in seconds, still fit a u64.
    let two = (2 * u128::from(u64::MAX)).div_ceil(1000);
    assert_eq!(
        item(Limits::SlidingWindow(window(1, u64::MAX))),
        format!("\"p\";q=1;w={two}")
    );
    assert_eq!(
        item(Limits::SlidingWindow(window(u64::MAX, 1))),
        format!("\"p\";q={};w=1", u64::MAX)
    );
}

/// Windows and limits around the edges of the rules: below, at and above a
/// second, dividing it and not, limits 1 to 20.
const LIMITS: [u64; 7] = [1, 2, 3, 4, 5, 10, 20];
const WINDOWS_MS: [u64; 11] = [1, 100, 250, 300, 333, 600, 999, 1_000, 1_001, 1_500, 4_000];

fn window_algorithms(limit: u64, window_ms: u64) -> [Limits; 3] {
    let w = window(limit, window_ms);
    [
        Limits::FixedWindow(w),
        Limits::SlidingWindow(w),
        Limits::SlidingLog(w),
    ]
}

fn q_and_w(limits: &Limits) -> (u64, u64) {
    let (q, w) = quota_and_window(limits);
    assert!(q > 0, "{limits:?} states no quota");
    (q, w)
}

/// Starts away from 0 so windows are not aligned with the client's start.
const START_MS: u64 = 1_000_037;

#[test]
fn a_client_spreading_q_evenly_over_every_w_is_never_refused() {
    for (limit, window_ms) in LIMITS.iter().flat_map(|l| WINDOWS_MS.map(|w| (*l, w))) {
        for limits in window_algorithms(limit, window_ms) {
            let (q, w) = q_and_w(&limits);
            let span_ms = u128::from(w) * 1000;
            // Every phase of the spacing against the windows, to the ms.
            let spacing_ms = u64::try_from(span_ms.div_ceil(u128::from(q))).unwrap_or(u64::MAX);
            for phase in 0..spacing_ms.min(window_ms) {
                let mut state: Option<State> = None;
                for i in 0..4 * q {
                    let at = START_MS
                        + phase
                        + u64::try_from(u128::from(i) * span_ms / u128::from(q))
                            .unwrap_or(u64::MAX);
                    let decision = limits.decide(&mut state, at, 1);
                    assert!(
                        decision.allowed,
                        "{limits:?} stated q={q};w={w}, refused request {i} at +{} ms (phase {phase})",
                        at - START_MS
                    );
                }
            }
        }
    }
}

/// Units admitted each ms to a client asking for one unit at a time, as
/// many as are admitted, every ms for `span_ms`.
fn saturated(limits: &Limits, span_ms: u64) -> Vec<u64> {
    let mut state: Option<State> = None;
    (0..span_ms)
        .map(|t| {
            let mut admitted = 0;
            while limits.decide(&mut state, START_MS + t, 1).allowed {
                admitted += 1;
            }
            admitted
        })
        .collect()
}

#[test]
fn a_client_that_keeps_asking_is_admitted_at_least_q_in_every_w() {
    for (limit, window_ms) in LIMITS.iter().flat_map(|l| WINDOWS_MS.map(|w| (*l, w))) {
        for limits in window_algorithms(limit, window_ms) {
            let (q, w) = q_and_w(&limits);
            let span = usize::try_from(w * 1000).unwrap_or(usize::MAX);
            // The counter's first burst is weighted into the next window:
            // it reaches its pace two windows in. The others from the start.
            let from = match limits {
                Limits::SlidingWindow(_) => usize::try_from(2 * window_ms).unwrap_or(0),
                _ => 0,
            };
            let admitted = saturated(&limits, (from + 4 * span) as u64);
            // Sums over every span of w seconds, sliding one ms at a time.
            let mut sum: u64 = admitted[from..from + span].iter().sum();
            let mut least = Some(sum);
            for (entering, leaving) in admitted[from + span..].iter().zip(&admitted[from..]) {
                sum = sum + entering - leaving;
                least = least.min(Some(sum));
            }
            assert!(
                least.is_some_and(|least| least >= q),
                "{limits:?} stated q={q};w={w}, admitted {least:?} in some {w} s"
            );
        }
    }
}

#[cfg(feature = "request")]
#[test]
fn one_state_value_is_allocated_at_its_exact_length() {
    let orders = policy("orders", 100, 60_000);
    let state = state_field(&orders, &decision(42, 59_001));
    assert_eq!(state, "\"orders\";r=42;t=60");
    // Exactly its length: the header value keeps this buffer, no
    // reallocation on the way there.
    assert_eq!(state.capacity(), state.len());
}
