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
