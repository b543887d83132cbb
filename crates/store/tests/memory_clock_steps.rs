//! A wall clock that steps never makes the memory store forget a limiting
//! state: whether a state is at rest (or may be evicted) is judged on the
//! monotonic clock, so an hour's step forward, a sweep or a full shard's
//! eviction, then a step back leaves every exhausted identity exhausted,
//! on all five algorithms.

use std::sync::Arc;

use tollgate_core::{Decision, Identity, Limits, ManualClock, Policy, Rate, Window};
use tollgate_store::{Check, MemoryStore, MemoryStoreConfig};

/// A minute boundary, so a fixed window starts here.
const T0: u64 = 1_700_000_040_000;
const MINUTE: u64 = 60_000;
const HOUR: u64 = 60 * MINUTE;

/// Each algorithm at 5 a minute.
fn five_a_minute() -> Vec<Policy> {
    let rate = || Rate::new(5, 5, MINUTE).expect("valid");
    let window = || Window::new(5, MINUTE).expect("valid");
    vec![
        Policy::new("bucket", Limits::TokenBucket(rate())),
        Policy::new("gcra", Limits::Gcra(rate())),
        Policy::new("fixed", Limits::FixedWindow(window())),
        Policy::new("sliding", Limits::SlidingWindow(window())),
        Policy::new("log", Limits::SlidingLog(window())),
    ]
}

fn check<'a>(policy: &'a Policy, identity: &'a Identity, cost: u64) -> Check<'a> {
    Check {
        policy,
        identity,
        cost,
    }
}

/// Spends `identity`'s 5 under `policy` at the clock's time and returns
/// the rejection of a sixth.
fn exhaust(store: &MemoryStore, policy: &Policy, identity: &Identity) -> Decision {
    for i in 0..5 {
        let d = store.decide_now(check(policy, identity, 1)).expect("room");
        assert!(d.allowed, "{}: {i}: {d:?}", policy.name());
    }
    let d = store.decide_now(check(policy, identity, 1)).expect("room");
    assert!(!d.allowed, "{}: {d:?}", policy.name());
    d
}

/// The rejection every algorithm gives a sixth unit at T0 (5 at T0 spent).
fn rejected_at_t0(policy: &Policy) -> Decision {
    let (retry, reset) = match policy.name() {
        // One token back in 12 s; all five in a minute.
        "bucket" | "gcra" => (12_000, MINUTE),
        // The window ends in a minute.
        "fixed" => (MINUTE, MINUTE),
        // All 5 in the current window: one fits once a fifth of the next
        // window has passed (5·(W − e) + W ≤ 5·W); reset two windows.
        "sliding" => (MINUTE + 12_000, 2 * MINUTE),
        // The entries age out a minute after T0.
        "log" => (MINUTE, MINUTE),
        other => panic!("no expectation for {other}"),
    };
    Decision {
        allowed: false,
        limit: 5,
        remaining: 0,
        retry_after_ms: Some(retry),
        reset_after_ms: reset,
        permit: None,
    }
}

#[test]
fn a_wall_clock_stepped_an_hour_forward_then_back_leaves_every_algorithm_exhausted() {
    let clock = Arc::new(ManualClock::new(T0));
    let store = MemoryStore::new(clock.clone(), MemoryStoreConfig::default());
    let who = Identity::value("tenant-a");
    let policies = five_a_minute();
    for policy in &policies {
        assert_eq!(
            exhaust(&store, policy, &who),
            rejected_at_t0(policy),
            "{}",
            policy.name()
        );
    }
    clock.step(T0 + HOUR);
    assert_eq!(
        store.sweep(),
        0,
        "no state has rested: an hour went by on the wall alone"
    );
    assert_eq!(store.key_count(), 5);
    clock.step(T0);
    for policy in &policies {
        let d = store.decide_now(check(policy, &who, 1)).expect("room");
        assert_eq!(d, rejected_at_t0(policy), "{}", policy.name());
    }
}

#[test]
fn a_full_store_after_a_wall_clock_step_evicts_no_exhausted_state() {
    // One shard of 5 keys, each holding an exhausted identity.
    let clock = Arc::new(ManualClock::new(T0));
    let config = MemoryStoreConfig {
        max_keys: 5,
        shards: 1,
    };
    let store = MemoryStore::new(clock.clone(), config);
    let who = Identity::value("tenant-a");
    let policies = five_a_minute();
    for policy in &policies {
        exhaust(&store, policy, &who);
    }
    clock.step(T0 + HOUR);
    // A new identity finds only limiting states: it is refused room, and
    // nothing is evicted for it.
    let fresh = Identity::value("fresh");
    assert!(store.decide_now(check(&policies[0], &fresh, 1)).is_err());
    assert_eq!((store.evictions(), store.key_count()), (0, 5));
    clock.step(T0);
    for policy in &policies {
        let d = store.decide_now(check(policy, &who, 1)).expect("room");
        assert_eq!(d, rejected_at_t0(policy), "{}", policy.name());
    }
}

#[test]
fn states_still_rest_when_the_monotonic_time_has_passed() {
    let clock = Arc::new(ManualClock::new(T0));
    let store = MemoryStore::new(clock.clone(), MemoryStoreConfig::default());
    let who = Identity::value("tenant-a");
    for policy in &five_a_minute() {
        exhaust(&store, policy, &who);
    }
    // A minute on both clocks: every state but the sliding window's
    // (which weighs the previous window) is back to full or empty.
    clock.advance(MINUTE - 1);
    assert_eq!(store.sweep(), 0);
    clock.advance(1);
    assert_eq!(store.sweep(), 4);
    clock.advance(MINUTE);
    assert_eq!(store.sweep(), 1);
    assert_eq!(store.key_count(), 0);
}
