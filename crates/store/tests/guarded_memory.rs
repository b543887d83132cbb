//! `Guarded` is generic over the store contract: over the memory store it
//! decides exactly as the store does (by the shared store, never degraded),
//! and its blocks, admin and stats are the store's.

use std::sync::Arc;

use tollgate_core::{Identity, Limits, ManualClock, Policy, Rate};
use tollgate_store::{
    Admin, Blocks, BreakerConfig, Check, CircuitState, Decide, DecidedBy, Guarded, GuardedCheck,
    MemoryStore, MemoryStoreConfig, OnStoreFailure, StoreStats,
};

const T0: u64 = 1_700_000_000_000;

fn guarded() -> Guarded<MemoryStore> {
    let clock = Arc::new(ManualClock::new(T0));
    let shared = MemoryStore::new(clock.clone(), MemoryStoreConfig::default());
    Guarded::new(shared, BreakerConfig::default(), clock, 1_000)
}

#[tokio::test]
async fn a_guarded_memory_store_decides_as_the_store_itself() {
    let store = guarded();
    let policy = Policy::new(
        "api",
        Limits::TokenBucket(Rate::new(3, 1, 1_000).expect("rate")),
    );
    let acme = Identity::value("acme");
    let check = GuardedCheck {
        check: Check {
            policy: &policy,
            identity: &acme,
            cost: 1,
        },
        on_failure: OnStoreFailure::FailClosed,
        local_policy: None,
    };
    let mut remaining = Vec::new();
    for _ in 0..4 {
        let decided = Decide::decide(&store, &[check], None).await;
        assert_eq!(decided.by, DecidedBy::Shared);
        assert!(decided.error.is_none());
        remaining.push((decided.decisions[0].allowed, decided.decisions[0].remaining));
    }
    assert_eq!(remaining, [(true, 2), (true, 1), (true, 0), (false, 0)]);
    assert!(Blocks::trusted(&store));
    assert_eq!(store.circuit(), CircuitState::Closed);
    assert_eq!(
        Admin::stats(&store),
        StoreStats {
            keys: 0,
            evictions: 0,
            circuit: 0,
            answered_locally: 0,
            script_calls: 0,
        }
    );
    assert!(
        Admin::forget(&store, &policy, &acme)
            .await
            .expect("forgets")
    );
    assert_eq!(store.shared().key_count(), 0);
    let decided = Decide::decide(&store, &[check], None).await;
    assert_eq!(decided.decisions[0].remaining, 2);
}

/// A caller that read the store's own clock hands the store its reading
/// (`decide_guarded_at`): the same decisions, one check or a batch, as
/// a store reading a clock at those times itself, a full store's failure
/// modes included.
#[test]
fn a_memory_store_handed_its_clocks_reading_decides_as_reading_it() {
    let config = MemoryStoreConfig {
        max_keys: 2,
        shards: 1,
    };
    let given_clock: Arc<dyn tollgate_core::Clock> = Arc::new(ManualClock::new(T0));
    let given = MemoryStore::new(Arc::clone(&given_clock), config);
    let read_clock = Arc::new(ManualClock::new(T0));
    let read = MemoryStore::new(read_clock.clone(), config);
    assert!(given.keeps_time_by(&given_clock));
    assert!(!given.keeps_time_by(&(read_clock.clone() as Arc<dyn tollgate_core::Clock>)));
    let policy = Policy::new(
        "api",
        Limits::TokenBucket(Rate::new(2, 1, 1_000).expect("rate")),
    );
    let ids: Vec<Identity> = ["acme", "bob", "carol"].map(Identity::value).into();
    let check = |i: usize, cost: u64| GuardedCheck {
        check: Check {
            policy: &policy,
            identity: &ids[i],
            cost,
        },
        on_failure: OnStoreFailure::FailOpen,
        local_policy: None,
    };
    // (ms after T0, the checks), two a second refilled one a second:
    // acme spent, refused, refilled by one; a batch over acme and bob;
    // carol finding the store full of limiting states (fail_open
    // answers); a second on, acme no longer limiting makes room for her.
    let steps: Vec<(u64, Vec<GuardedCheck<'_>>)> = vec![
        (0, vec![check(0, 2)]),
        (0, vec![check(0, 1)]),
        (999, vec![check(0, 1)]),
        (1_000, vec![check(0, 1)]),
        (1_000, vec![check(1, 2), check(0, 1)]),
        (1_000, vec![check(1, 2)]),
        (1_000, vec![check(2, 1)]),
        (2_100, vec![check(1, 1), check(2, 1)]),
    ];
    let mut seen = Vec::new();
    for (after_ms, checks) in &steps {
        read_clock.set(T0 + after_ms);
        let by_hand = given.decide_guarded_at(checks, T0 + after_ms, T0 + after_ms);
        let by_reading = read.decide_guarded(checks, None);
        let verdicts = |d: &tollgate_store::GuardedDecisions| {
            let decisions: Vec<(bool, i64, Option<u64>)> = d
                .decisions
                .iter()
                .map(|d| (d.allowed, d.remaining, d.retry_after_ms))
                .collect();
            (decisions, d.by, d.error.is_some())
        };
        assert_eq!(
            verdicts(&by_hand),
            verdicts(&by_reading),
            "at +{after_ms} ms"
        );
        seen.push(verdicts(&by_hand));
    }
    // And the steps meant what they say.
    let outcome: Vec<(Vec<bool>, DecidedBy)> = seen
        .iter()
        .map(|(d, by, _)| (d.iter().map(|d| d.0).collect(), *by))
        .collect();
    assert_eq!(
        outcome,
        vec![
            (vec![true], DecidedBy::Shared),
            (vec![false], DecidedBy::Shared),
            (vec![false], DecidedBy::Shared),
            (vec![true], DecidedBy::Shared),
            (vec![true, false], DecidedBy::Shared),
            (vec![true], DecidedBy::Shared),
            (vec![true], DecidedBy::FailOpen),
            (vec![true, true], DecidedBy::Shared),
        ]
    );
}
