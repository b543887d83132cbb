//! The breaker in front of a real Redis counts only calls that reached
//! it: a rejection answered from the rejected-until cache is neither a
//! success nor a failure, so a client that keeps retrying a rejected key
//! cannot hold the circuit to a dead Redis closed, nor close it by taking
//! the half-open probe.

use std::sync::Arc;

use tollgate_core::{Identity, Limits, ManualClock, Policy, Rate};
use tollgate_store::{
    BreakerConfig, Check, CircuitState, Decide, DecidedBy, Guarded, GuardedCheck, GuardedDecisions,
    OnStoreFailure, RedisConfig, RedisStore,
};
use tollgate_testkit::RedisServer;

const T0: u64 = 1_700_000_000_000;
const OPEN_FOR_MS: u64 = 60_000;

async fn decide(store: &Guarded<RedisStore>, policy: &Policy, who: &str) -> GuardedDecisions {
    let identity = Identity::value(who);
    let check = GuardedCheck {
        check: Check {
            policy,
            identity: &identity,
            cost: 1,
        },
        on_failure: OnStoreFailure::FailOpen,
        local_policy: None,
    };
    Decide::decide(store, &[check], None).await
}

#[tokio::test]
async fn cached_rejections_neither_hold_the_circuit_closed_nor_take_its_probe() {
    let mut redis = RedisServer::start().expect("redis-server starts");
    let mut config = RedisConfig::standalone(redis.url());
    config.timeout_ms = 2_000;
    let shared = RedisStore::connect(&config).await.expect("connects");
    let clock = Arc::new(ManualClock::new(T0));
    let breaker = BreakerConfig {
        failures_to_open: 3,
        open_for_ms: OPEN_FOR_MS,
    };
    let store = Guarded::new(shared, breaker, clock.clone(), 1_000);
    let policy = Policy::new(
        "hourly",
        Limits::TokenBucket(Rate::new(1, 1, 3_600_000).expect("rate")),
    );

    assert!(decide(&store, &policy, "acme").await.decisions[0].allowed);
    let rejected = decide(&store, &policy, "acme").await;
    assert_eq!(
        (rejected.by, rejected.decisions[0].allowed),
        (DecidedBy::Shared, false)
    );

    redis.kill().expect("redis-server stops");
    // Each fresh identity's call fails; acme's standing rejection, asked
    // between them, is answered from the cache and resets nothing.
    for n in 0..3 {
        let fresh = decide(&store, &policy, &format!("fresh-{n}")).await;
        assert_eq!(fresh.by, DecidedBy::FailOpen, "call {n} fails open");
        assert!(fresh.error.is_some());
        if n < 2 {
            let cached = decide(&store, &policy, "acme").await;
            assert_eq!(
                (cached.by, cached.decisions[0].allowed),
                (DecidedBy::Shared, false)
            );
            assert_eq!(cached.store_us, None, "no call reached the store");
        }
    }
    assert_eq!(store.circuit(), CircuitState::Open);
    // Open, the store is skipped: acme too is decided by its failure mode.
    let skipped = decide(&store, &policy, "acme").await;
    assert_eq!(
        (skipped.by, skipped.decisions[0].allowed),
        (DecidedBy::FailOpen, true)
    );

    // The cool-down over, the probe goes to a call that reaches the store:
    // acme's cached answer hands it back unused; the next call fails it.
    clock.advance(OPEN_FOR_MS);
    let cached = decide(&store, &policy, "acme").await;
    assert_eq!(
        (cached.by, cached.decisions[0].allowed),
        (DecidedBy::Shared, false)
    );
    assert_ne!(store.circuit(), CircuitState::Closed);
    let probe = decide(&store, &policy, "fresh-probe").await;
    assert_eq!(probe.by, DecidedBy::FailOpen);
    assert!(probe.error.is_some(), "the probe reached the dead store");
    assert_eq!(store.circuit(), CircuitState::Open);
}
