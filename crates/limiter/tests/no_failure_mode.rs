//! A plan built without a failure mode never fails open: when its store
//! cannot decide, a request it enforces is left unanswered (no decisions,
//! the store's error said), for its door to answer an error; a declared
//! mode answers as declared.

// The guarded Redis store's nested futures need a deeper layout query.

use std::sync::Arc;

use tollgate_limiter::{
    Backend, Check, DecidedBy, Identity, Limiter, LimiterMetrics, Limits, ManualClock,
    OnStoreFailure, Plan, Policy, Rate, RedisConfig, RedisStore, Registry,
};
use tollgate_testkit::free_port;

/// A limiter whose one store is a Redis nobody listens for (a refused
/// port): every call fails at once.
async fn dead_redis() -> Limiter {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let mut registry = Registry::default();
    let metrics = Arc::new(LimiterMetrics::register(&mut registry, clock.clone()));
    let port = free_port().expect("a free port");
    let config = RedisConfig::standalone(format!("redis://127.0.0.1:{port}"));
    let store = RedisStore::connect(&config).await.expect("connects lazily");
    Limiter::new(vec![Backend::redis(store, clock.clone())], metrics, clock)
}

fn policy() -> Policy {
    Policy::new(
        "api",
        Limits::TokenBucket(Rate::new(10, 10, 1_000).expect("rate")),
    )
}

#[tokio::test]
async fn a_plan_without_a_failure_mode_on_a_dead_store_admits_nothing() {
    let limiter = dead_redis().await;
    let plan = Plan::new(policy(), 0);
    let acme = Identity::value("acme");
    let decided = limiter.decide(&[Check::new(&plan, &acme, 1)]).await;
    assert_eq!(decided.decisions.as_slice(), []);
    assert_eq!(decided.error.as_ref().map(|e| e.kind()), Some("refused"));
    // The path that would have stood in: the store's fault, not a verdict.
    assert_eq!(decided.by, DecidedBy::FailOpen);
}

#[tokio::test]
async fn a_declared_failure_mode_on_a_dead_store_answers_as_declared() {
    let limiter = dead_redis().await;
    let acme = Identity::value("acme");
    let open = Plan::new(policy(), 0).with_failure_mode(OnStoreFailure::FailOpen);
    let decided = limiter.decide(&[Check::new(&open, &acme, 1)]).await;
    assert_eq!(decided.by, DecidedBy::FailOpen);
    let allowed: Vec<bool> = decided.decisions.iter().map(|d| d.allowed).collect();
    assert_eq!(allowed, vec![true]);
    let closed = Plan::new(policy(), 0).with_failure_mode(OnStoreFailure::FailClosed);
    let decided = limiter.decide(&[Check::new(&closed, &acme, 1)]).await;
    assert_eq!(decided.by, DecidedBy::FailClosed);
    let allowed: Vec<bool> = decided.decisions.iter().map(|d| d.allowed).collect();
    assert_eq!(allowed, vec![false]);
}
