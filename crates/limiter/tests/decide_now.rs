//! Deciding now, without awaiting: a request whose checks are all on the
//! memory store is decided at once, as the awaited path decides it; one
//! with a check on Redis is not decided at all (`None`), for its caller to
//! await instead.

use std::sync::Arc;

use tollgate_limiter::{
    Backend, Check, DecidedBy, Decider, Identity, Limiter, LimiterMetrics, Limits, ManualClock,
    OnStoreFailure, Plan, Policy, Rate, RedisConfig, RedisStore, Registry,
};
use tollgate_testkit::free_port;

/// Store 0 the memory store, store 1 a Redis nobody listens for.
async fn memory_and_dead_redis() -> Limiter {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let mut registry = Registry::default();
    let metrics = Arc::new(LimiterMetrics::register(&mut registry, clock.clone()));
    let port = free_port().expect("a free port");
    let config = RedisConfig::standalone(format!("redis://127.0.0.1:{port}"));
    let store = RedisStore::connect(&config).await.expect("connects lazily");
    let backends = vec![
        Backend::memory(1_000, clock.clone()),
        Backend::redis(store, clock.clone()),
    ];
    Limiter::new(backends, metrics, clock)
}

fn plan(name: &str, store: usize) -> Plan {
    let rate = Rate::new(10, 10, 60_000).expect("rate");
    Plan::new(Policy::new(name, Limits::TokenBucket(rate)), store)
        .with_failure_mode(OnStoreFailure::FailClosed)
}

#[tokio::test]
async fn memory_checks_are_decided_now_as_the_awaited_path_decides_them() {
    let limiter = memory_and_dead_redis().await;
    let local = plan("local", 0);
    let acme = Identity::value("acme");
    let now = limiter.decide_now(&[Check::new(&local, &acme, 3)], None, None);
    let Some(now) = now else {
        panic!("a memory-only request is decided now");
    };
    assert_eq!(now.by, DecidedBy::Shared);
    let remaining: Vec<(bool, i64)> = now
        .decisions
        .iter()
        .map(|d| (d.allowed, d.remaining))
        .collect();
    assert_eq!(remaining, vec![(true, 7)]);
    // The same budget, spent by either path.
    let awaited = limiter.decide(&[Check::new(&local, &acme, 3)]).await;
    let remaining: Vec<i64> = awaited.decisions.iter().map(|d| d.remaining).collect();
    assert_eq!(remaining, vec![4]);
    let through_trait = Decider::decide_now(&limiter, &[Check::new(&local, &acme, 5)], None, None);
    let verdicts: Vec<(bool, i64)> = through_trait
        .map(|d| {
            d.decisions
                .iter()
                .map(|d| (d.allowed, d.remaining))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(verdicts, vec![(false, 4)]);
}

#[tokio::test]
async fn a_check_on_redis_is_not_decided_now_and_spends_nothing() {
    let limiter = memory_and_dead_redis().await;
    let (local, shared) = (plan("local", 0), plan("shared", 1));
    let acme = Identity::value("acme");
    let only_redis = limiter.decide_now(&[Check::new(&shared, &acme, 1)], None, None);
    assert!(only_redis.is_none());
    let both = [Check::new(&local, &acme, 4), Check::new(&shared, &acme, 1)];
    assert!(limiter.decide_now(&both, None, None).is_none());
    // The memory check of the request left undecided spent nothing.
    let look = limiter.decide_now(&[Check::new(&local, &acme, 0)], None, None);
    let remaining: Vec<i64> = look
        .map(|d| d.decisions.iter().map(|d| d.remaining).collect())
        .unwrap_or_default();
    assert_eq!(remaining, vec![10]);
}
