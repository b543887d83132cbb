//! A sliding log's work per decision is bounded whatever its limit (issue
//! 23): a log holds each request exactly below LOG_EXACT_ENTRIES entries,
//! beyond that at the end of its bucket of q = ceil(W/64) ms. These hold
//! the bound (entries), the safety (never more than L in any span of W)
//! and the stated error (a unit counts at most q − 1 ms late).

use std::collections::VecDeque;

use proptest::prelude::*;
use tollgate_core::{
    Decision, LOG_EXACT_ENTRIES, LOG_MAX_ENTRIES, Limits, LogState, State, Taken, Window,
    log_bucket_ms,
};

const T0: u64 = 1_700_000_000_000;

fn log(limit: u64, window_ms: u64) -> Limits {
    Limits::SlidingLog(Window::new(limit, window_ms).expect("a window"))
}

fn entries(state: &Option<State>) -> &VecDeque<(u64, u64)> {
    match state {
        Some(State::SlidingLog(s)) => &s.entries,
        other => panic!("not a log: {other:?}"),
    }
}

#[test]
fn the_bucket_width_is_the_window_over_64_rounded_up() {
    assert_eq!(LOG_EXACT_ENTRIES, 64);
    assert_eq!(LOG_MAX_ENTRIES, 129);
    assert_eq!(log_bucket_ms(3_600_000), 56_250);
    assert_eq!(log_bucket_ms(60_000), 938);
    assert_eq!(log_bucket_ms(1_000), 16);
    assert_eq!(log_bucket_ms(64), 1);
    assert_eq!(log_bucket_ms(10), 1);
}

/// The attack of issue 23: ten thousand admissions at distinct ms against a
/// limit of 10,000 per hour. Every one is admitted (the log counts them all)
/// and the log holds 64 exact entries plus one per bucket end reached.
#[test]
fn fattening_a_sliding_log_to_its_limit_leaves_at_most_129_entries() {
    let limits = log(10_000, 3_600_000);
    let mut state = None;
    let mut most = 0;
    for i in 0..10_000u64 {
        // One request every 300 ms: 50 minutes of traffic, 54 buckets.
        let d = limits.decide(&mut state, T0 + i * 300, 1);
        assert!(d.allowed, "request {i}");
        assert_eq!(d.remaining, 10_000 - 1 - i as i64);
        most = most.max(entries(&state).len());
    }
    assert_eq!(entries(&state).len(), 118);
    assert_eq!(most, 118);
    // 64 exact entries and 54 bucket ends (T0 + 43750 + m·56250): the next
    // is rejected until the oldest exact entry ages out, and the newest
    // (T0 + 3025000) counts until an hour after its bucket's end.
    let d = limits.decide(&mut state, T0 + 3_000_000, 1);
    assert_eq!(
        d,
        Decision {
            allowed: false,
            limit: 10_000,
            remaining: 0,
            retry_after_ms: Some(600_000),
            reset_after_ms: 3_625_000,
            permit: None,
        }
    );
}

/// A bucketed unit counts until its bucket's end + W: q − 1 ms late at most.
#[test]
fn a_unit_beyond_64_entries_counts_to_the_end_of_its_bucket() {
    let limits = log(100, 64_000); // q = 1000 ms
    let mut state = None;
    let base = 1_700_000_000_000; // a multiple of 1000
    for i in 0..64 {
        assert!(limits.decide(&mut state, base + i, 1).allowed);
    }
    // The 65th, at base + 64, is logged at base + 1000.
    let d = limits.decide(&mut state, base + 64, 1);
    assert!(d.allowed);
    assert_eq!(d.reset_after_ms, 64_000 + 1_000 - 64);
    assert_eq!(entries(&state).back(), Some(&(base + 1_000, 1)));
    // Its neighbours in the same bucket merge into that entry.
    limits.decide(&mut state, base + 999, 2);
    assert_eq!(entries(&state).back(), Some(&(base + 1_000, 3)));
    assert_eq!(entries(&state).len(), 65);
    // At base + 64_999 only the three bucketed units still count.
    let d = limits.decide(&mut state, base + 64_999, 0);
    assert_eq!(d.remaining, 97);
    assert_eq!(entries(&state).len(), 1);
    // A short log again: an admission is logged at its ms, after the newest.
    limits.decide(&mut state, base + 64_999, 1);
    assert_eq!(
        entries(&state).iter().copied().collect::<Vec<_>>(),
        vec![(base + 1_000, 3), (base + 64_999, 1)]
    );
}

/// A state written before logs were bounded (an exact entry per request)
/// is read as it is, then coalesced into bucket ends: later, never earlier.
#[test]
fn an_old_long_log_is_coalesced_into_bucket_ends_on_its_next_decision() {
    let limits = log(10_000, 3_600_000);
    let old: VecDeque<(u64, u64)> = (0..5_000u64).map(|i| (T0 + i * 7, 1)).collect();
    let last_ms = T0 + 4_999 * 7;
    let mut state = Some(State::SlidingLog(LogState {
        entries: old,
        counted: 5_000,
        last_ms,
    }));
    let d = limits.decide(&mut state, last_ms + 1, 0);
    assert_eq!(d.remaining, 5_000);
    assert!(d.allowed);
    // T0 = 30222222·56250 + 12500: its bucket ends at T0 + 43750, after
    // the newest old entry (T0 + 34993), so all 5,000 merge into one.
    assert_eq!(
        entries(&state).iter().copied().collect::<Vec<_>>(),
        vec![(T0 + 43_750, 5_000)]
    );
    assert_eq!(d.reset_after_ms, 43_750 + 3_600_000 - 4_999 * 7 - 1);
}

/// A full log, whatever wrote it (here 129 exact entries), is coalesced
/// before an admission could take it past LOG_MAX_ENTRIES.
#[test]
fn a_full_log_is_coalesced_before_an_admission_could_pass_the_bound() {
    let limits = log(10_000, 3_600_000);
    let last_ms = T0 + 128 * 10;
    let mut state = Some(State::SlidingLog(LogState {
        entries: (0..129u64).map(|i| (T0 + i * 10, 1)).collect(),
        counted: 129,
        last_ms,
    }));
    let d = limits.decide(&mut state, last_ms + 1, 1);
    assert!(d.allowed);
    assert_eq!(d.remaining, 10_000 - 130);
    // All in the bucket ending at T0 + 43750; the admission, logged never
    // before the newest entry, merges into it.
    assert_eq!(
        entries(&state).iter().copied().collect::<Vec<_>>(),
        vec![(T0 + 43_750, 130)]
    );
}

/// A take logged at its bucket's end is given back from that entry.
#[test]
fn a_bucketed_take_is_given_back_from_its_bucket_entry() {
    let limits = log(1_000, 64_000);
    let base = 1_700_000_000_000;
    let mut state = None;
    for i in 0..64 {
        limits.decide(&mut state, base + i, 1);
    }
    let take = limits.decide(&mut state, base + 100, 10);
    let taken = Taken::new(base + 100, &take);
    assert_eq!(entries(&state).back(), Some(&(base + 1_000, 10)));
    assert_eq!(limits.give_back(&mut state, base + 200, 4, taken), 4);
    assert_eq!(entries(&state).back(), Some(&(base + 1_000, 6)));
    assert_eq!(
        limits.decide(&mut state, base + 200, 0).remaining,
        1_000 - 64 - 6
    );
    assert_eq!(limits.give_back(&mut state, base + 200, 10, taken), 6);
    assert_eq!(entries(&state).len(), 64);
}

fn long_log() -> impl Strategy<Value = Limits> {
    (
        prop_oneof![Just(100u64), 200u64..=2_000, Just(10_000)],
        prop_oneof![Just(1_000u64), 64u64..=5_000, Just(60_000), Just(3_600_000)],
    )
        .prop_map(|(l, w)| log(l, w))
}

/// Arrivals: mostly a few ms apart (the fattening), now and then a gap of
/// part of the window, and clocks stepping back.
fn arrivals(w: u64) -> impl Strategy<Value = Vec<(i64, u64)>> {
    let w = w as i64;
    let step = prop_oneof![
        200 => 0i64..=5,
        6 => 0..=w / 8 + 1,
        1 => 0..=2 * w,
        2 => -w..0,
    ];
    let cost = prop_oneof![1 => Just(0u64), 8 => Just(1), 1 => 1u64..=40];
    prop::collection::vec((step, cost), 1..1_500)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Never more than L admitted within any span of W (each admission at
    /// the clock it was decided on: a clock never runs back), and never
    /// more than LOG_MAX_ENTRIES entries after a decision.
    #[test]
    fn a_long_log_stays_bounded_and_never_admits_more_than_the_limit(
        (limits, steps) in long_log().prop_flat_map(|l| (Just(l), arrivals(l.window_ms())))
    ) {
        let (limit, w) = (limits.limit(), limits.window_ms());
        let mut state = None;
        let mut clock = 0;
        let mut t = T0;
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        for (dt, cost) in steps {
            t = t.saturating_add_signed(dt);
            clock = clock.max(t);
            let d = limits.decide(&mut state, t, cost);
            prop_assert!(entries(&state).len() <= LOG_MAX_ENTRIES, "{} entries", entries(&state).len());
            if d.allowed && cost > 0 {
                admitted.push((clock, cost));
            }
        }
        // Two pointers: the sum over every span [t_i − W + 1, t_i].
        let (mut start, mut sum) = (0, 0u64);
        for &(t_i, c) in &admitted {
            sum += c;
            while admitted[start].0 + w <= t_i {
                sum -= admitted[start].1;
                start += 1;
            }
            prop_assert!(sum <= limit, "{sum} admitted in the {w} ms ending at {t_i}");
        }
    }
}
