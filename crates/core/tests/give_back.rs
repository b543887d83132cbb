//! Giving back units consumed ahead of their use (a hot-lease block):
//! exact figures for each algorithm. The property that a give-back leaves
//! the state that never consumed them is in properties.rs.

use tollgate_core::{Limits, Rate, State, Taken, Window};

const T0: u64 = 1_700_000_000_000;

fn bucket(limits: Limits) -> (Limits, Option<State>, Taken) {
    let mut state = None;
    // Capacity 10, 1 token a second: a block of 6 leaves 4 and is whole
    // again in 6 s.
    let take = limits.decide(&mut state, T0, 6);
    assert!(take.allowed);
    assert_eq!(take.reset_after_ms, 6_000);
    (limits, state, Taken::new(T0, &take))
}

#[test]
fn a_bucket_takes_back_what_could_not_have_refilled_since() {
    for limits in [
        Limits::TokenBucket(Rate::new(10, 1, 1_000).expect("a rate")),
        Limits::Gcra(Rate::new(10, 1, 1_000).expect("a rate")),
    ] {
        let (limits, mut state, taken) = bucket(limits);
        // At +1 s: 5 tokens of refill fit before the block's state could
        // have been whole (6 s − 1 ms − 1 s = 4.999 s: 4 tokens).
        assert_eq!(limits.give_back(&mut state, T0 + 1_000, 5, taken), 4);
        let now = limits.decide(&mut state.clone(), T0 + 1_000, 0);
        assert_eq!(now.remaining, 9, "{limits:?}");
        // Later, little is left to give back; past whole, nothing.
        let (limits, mut state, taken) = bucket(limits);
        assert_eq!(limits.give_back(&mut state, T0 + 5_000, 5, taken), 0);
        let (limits, mut state, taken) = bucket(limits);
        assert_eq!(limits.give_back(&mut state, T0 + 4_000, 5, taken), 1);
        assert_eq!(limits.give_back(&mut state, T0 + 9_000, 5, taken), 0);
    }
}

#[test]
fn a_window_takes_back_only_while_the_window_it_was_counted_in_counts() {
    let fixed = Limits::FixedWindow(Window::new(100, 60_000).expect("a window"));
    let start = T0 - T0 % 60_000;
    let mut state = None;
    let take = fixed.decide(&mut state, start + 10, 30);
    let taken = Taken::new(start + 10, &take);
    assert_eq!(fixed.give_back(&mut state, start + 59_999, 20, taken), 20);
    assert_eq!(
        fixed
            .decide(&mut state.clone(), start + 59_999, 0)
            .remaining,
        90
    );
    assert_eq!(fixed.give_back(&mut state, start + 60_000, 10, taken), 0);

    let sliding = Limits::SlidingWindow(Window::new(100, 60_000).expect("a window"));
    let mut state = None;
    let take = sliding.decide(&mut state, start + 10, 30);
    let taken = Taken::new(start + 10, &take);
    // In the next window the count is the previous one, still weighted.
    assert_eq!(sliding.give_back(&mut state, start + 90_000, 20, taken), 20);
    // At half the next window: 10 weighted by half.
    assert_eq!(
        sliding
            .decide(&mut state.clone(), start + 90_000, 0)
            .remaining,
        95
    );
    assert_eq!(sliding.give_back(&mut state, start + 120_000, 10, taken), 0);

    let log = Limits::SlidingLog(Window::new(100, 60_000).expect("a window"));
    let mut state = None;
    log.decide(&mut state, start + 10, 5);
    let take = log.decide(&mut state, start + 20, 30);
    let taken = Taken::new(start + 20, &take);
    assert_eq!(log.give_back(&mut state, start + 100, 40, taken), 30);
    assert_eq!(log.decide(&mut state.clone(), start + 100, 0).remaining, 95);
    assert_eq!(log.give_back(&mut state, start + 100, 1, taken), 0);
}

#[test]
fn no_state_or_another_algorithms_state_takes_nothing() {
    let fixed = Limits::FixedWindow(Window::new(100, 60_000).expect("a window"));
    let bucket = Limits::TokenBucket(Rate::new(10, 1, 1_000).expect("a rate"));
    let taken = Taken {
        at_ms: T0,
        full_at_ms: T0 + 10_000,
    };
    assert_eq!(fixed.give_back(&mut None, T0, 5, taken), 0);
    let mut state = None;
    bucket.decide(&mut state, T0, 5);
    let kept = state.clone();
    assert_eq!(fixed.give_back(&mut state, T0, 5, taken), 0);
    assert_eq!(state, kept);
}

/// Each algorithm with a limit of 10, for refunds.
fn tens() -> [Limits; 5] {
    [
        Limits::TokenBucket(Rate::new(10, 1, 1_000).expect("a rate")),
        Limits::Gcra(Rate::new(10, 1, 1_000).expect("a rate")),
        Limits::FixedWindow(Window::new(10, 60_000).expect("a window")),
        Limits::SlidingWindow(Window::new(10, 60_000).expect("a window")),
        Limits::SlidingLog(Window::new(10, 60_000).expect("a window")),
    ]
}

#[test]
fn a_refund_restores_exactly_the_units_refunded() {
    // T0 is 20 s into its minute: every window stays current.
    for limits in tens() {
        let mut state = None;
        assert!(limits.decide(&mut state, T0, 3).allowed);
        assert!(limits.decide(&mut state, T0 + 10, 4).allowed);
        assert_eq!(
            limits.give_back(&mut state, T0 + 20, 2, Taken::REFUND),
            2,
            "{limits:?}"
        );
        let after = limits.decide(&mut state.clone(), T0 + 20, 0);
        // 10 − 7 + 2, as no refill fits in 20 ms.
        assert_eq!(after.remaining, 5, "{limits:?}");
    }
}

#[test]
fn a_refund_never_lifts_a_state_past_full_or_a_count_below_empty() {
    for limits in tens() {
        let mut state = None;
        assert!(limits.decide(&mut state, T0, 3).allowed);
        // Refunding 5 of a take of 3: 3 go back, the state is whole.
        assert_eq!(
            limits.give_back(&mut state, T0, 5, Taken::REFUND),
            3,
            "{limits:?}"
        );
        assert_eq!(
            limits.decide(&mut state.clone(), T0, 0).remaining,
            10,
            "{limits:?}"
        );
        // Whole already: nothing more.
        assert_eq!(
            limits.give_back(&mut state, T0, 5, Taken::REFUND),
            0,
            "{limits:?}"
        );
        // A key never charged takes nothing back.
        let mut fresh = None;
        assert_eq!(
            limits.give_back(&mut fresh, T0, 5, Taken::REFUND),
            0,
            "{limits:?}"
        );
        assert_eq!(fresh, None);
    }
}

#[test]
fn a_window_refund_takes_only_from_the_current_window_and_a_log_from_its_newest() {
    let w = 60_000;
    let start = T0 - T0 % w;
    for limits in [
        Limits::FixedWindow(Window::new(10, w).expect("a window")),
        Limits::SlidingWindow(Window::new(10, w).expect("a window")),
    ] {
        let mut state = None;
        assert!(limits.decide(&mut state, start + 1, 6).allowed);
        // Next window: the earlier count is not the current one.
        assert_eq!(
            limits.give_back(&mut state, start + w + 1, 6, Taken::REFUND),
            0,
            "{limits:?}"
        );
    }
    // A log gives back from its newest entries first, while they count.
    let limits = Limits::SlidingLog(Window::new(10, w).expect("a window"));
    let mut state = None;
    assert!(limits.decide(&mut state, T0, 4).allowed);
    assert!(limits.decide(&mut state, T0 + 30_000, 3).allowed);
    assert_eq!(
        limits.give_back(&mut state, T0 + 30_001, 5, Taken::REFUND),
        5
    );
    // What is left: 2 units logged at T0, which age out at T0 + W.
    let left = limits.decide(&mut state.clone(), T0 + 30_001, 0);
    assert_eq!((left.remaining, left.reset_after_ms), (8, 29_999));
    // Past T0 + W nothing counts: nothing to give back.
    assert_eq!(limits.give_back(&mut state, T0 + w, 5, Taken::REFUND), 0);
}

#[test]
fn a_bucket_refund_after_some_refill_fills_it_back_to_full() {
    // 2 a burst, 2 an hour: a token is 1_800_000 units, 1 a ms.
    for limits in [
        Limits::TokenBucket(Rate::new(2, 2, 3_600_000).expect("a rate")),
        Limits::Gcra(Rate::new(2, 2, 3_600_000).expect("a rate")),
    ] {
        let mut state = None;
        assert_eq!(limits.decide(&mut state, T0, 1).remaining, 1);
        // 3 ms of refill arrived: a whole token does not fit, the room
        // does, and the bucket is full again.
        assert_eq!(
            limits.give_back(&mut state, T0 + 3, 1, Taken::REFUND),
            1,
            "{limits:?}"
        );
        let after = limits.decide(&mut state.clone(), T0 + 3, 0);
        assert_eq!(
            (after.remaining, after.reset_after_ms),
            (2, 0),
            "{limits:?}"
        );
    }
}
