//! A reload that changes a policy's `shards` carries what each identity
//! spent over: the plan built for the new config reads the old layout's
//! states too (`Plan::with_carry_over`, as a server's reload builds it),
//! so an exhausted identity is still exhausted after 1 → 4 and 4 → 1, on
//! all five algorithms, on the memory store (an injected clock: exact
//! decisions) and on a real redis-server (Redis's clock).

use std::sync::Arc;

use prometheus_client::registry::Registry;
use tollgate_core::{Clock, Decision, Identity, Limits, ManualClock, Policy, Rate, Window};
use tollgate_limiter::{Backend, Check, Limiter, LimiterMetrics, Plan};
use tollgate_limiter::{RedisConfig, RedisStore};
use tollgate_testkit::RedisServer;

/// A day boundary, so a fixed window of a day starts here.
const T0: u64 = 1_700_006_400_000;
const HOUR: u64 = 3_600_000;
const DAY: u64 = 24 * HOUR;

/// Each algorithm at 12 a day: 3 a shard over 4 shards, and nothing
/// comes back within a test.
fn twelve_a_day() -> Vec<Policy> {
    let rate = || Rate::new(12, 12, DAY).expect("valid");
    let window = || Window::new(12, DAY).expect("valid");
    vec![
        Policy::new("bucket", Limits::TokenBucket(rate())),
        Policy::new("gcra", Limits::Gcra(rate())),
        Policy::new("fixed", Limits::FixedWindow(window())),
        Policy::new("sliding", Limits::SlidingWindow(window())),
        Policy::new("log", Limits::SlidingLog(window())),
    ]
}

fn limiter(backend: Backend, clock: Arc<dyn Clock>) -> Limiter {
    let mut registry = Registry::default();
    let metrics = Arc::new(LimiterMetrics::register(&mut registry, clock.clone()));
    Limiter::new(vec![backend], metrics, clock)
}

async fn decide(limiter: &Limiter, plan: &Plan, who: &Identity) -> Decision {
    let decided = limiter.decide(&[Check::new(plan, who, 1)]).await;
    assert!(!decided.by.is_degraded(), "{decided:?}");
    decided.decisions[0]
}

/// Spends `who`'s whole limit under `plan`: 12 admitted, then rejected.
async fn exhaust(limiter: &Limiter, plan: &Plan, who: &Identity) {
    let name = plan.policy().name();
    for i in 0..12 {
        let d = decide(limiter, plan, who).await;
        assert!(d.allowed, "{name}: unit {i}: {d:?}");
    }
    let d = decide(limiter, plan, who).await;
    assert!(!d.allowed, "{name}: a 13th: {d:?}");
    assert_eq!(d.remaining, 0, "{name}");
}

/// `policy` with `from` shards exhausted for a tenant, then each reload in
/// `to` (the plan replacing the one before, carrying it over); after each
/// the tenant's next request is rejected with nothing remaining. Returns
/// each of those rejections.
async fn reload_exhausted(
    limiter: &Limiter,
    policy: &Policy,
    from: u16,
    to: &[u16],
) -> Vec<Decision> {
    let who = Identity::value(&format!("tenant-{from}"));
    let mut plan = Plan::new(policy.clone(), 0).with_shards(from);
    exhaust(limiter, &plan, &who).await;
    let mut rejections = Vec::new();
    for &shards in to {
        plan = Plan::new(policy.clone(), 0)
            .with_shards(shards)
            .with_carry_over(&plan);
        let d = decide(limiter, &plan, &who).await;
        assert!(
            !d.allowed,
            "{}: {from} → {shards}: the exhausted tenant got a fresh budget: {d:?}",
            policy.name()
        );
        assert_eq!(d.remaining, 0, "{}: {from} → {shards}", policy.name());
        rejections.push(d);
    }
    rejections
}

/// The rejection of one more unit at T0 for an identity whose 12 a day
/// (or, sharded, 3 a shard) were spent at T0, under a plan whose own
/// limit is `limit`: every layout's wait is the old one's.
fn rejected(policy: &Policy, limit: u64, old_shards: u64) -> Decision {
    // One unit back (the bucket algorithms): a day over the old layout's
    // key's capacity; everything back: a day.
    let one_back = DAY / (12 / old_shards);
    let (retry, reset) = match policy.name() {
        "bucket" | "gcra" => (one_back, DAY),
        "fixed" | "log" => (DAY, DAY),
        // All spent in the current window: one fits once the share of the
        // next window that rolls off makes room (L·W − prev·(W − e) ≥ W).
        "sliding" => (DAY + one_back, 2 * DAY),
        other => panic!("no expectation for {other}"),
    };
    Decision {
        allowed: false,
        limit,
        remaining: 0,
        retry_after_ms: Some(retry),
        reset_after_ms: reset,
        permit: None,
    }
}

#[tokio::test]
async fn an_exhausted_identity_stays_exhausted_across_shard_reloads_on_the_memory_store() {
    let clock = Arc::new(ManualClock::new(T0));
    let limiter = limiter(Backend::memory(10_000, clock.clone()), clock.clone());
    for policy in &twelve_a_day() {
        // 1 → 4: the old key (12) is empty; the new shard's limit is 3.
        // Then 4 → 1: the 1-layout is read still (and was spent on).
        let one_four = reload_exhausted(&limiter, policy, 1, &[4, 1]).await;
        assert_eq!(one_four, [rejected(policy, 3, 1), rejected(policy, 12, 1)]);
        // 4 → 1: each old shard (3) is empty; then 1 → 4 again.
        let four_one = reload_exhausted(&limiter, policy, 4, &[1, 4]).await;
        assert_eq!(four_one, [rejected(policy, 12, 4), rejected(policy, 3, 4)]);
        // Any N → M: 2 → 3.
        reload_exhausted(&limiter, policy, 2, &[3]).await;
    }
}

#[tokio::test]
async fn an_exhausted_identity_stays_exhausted_across_shard_reloads_on_redis() {
    let server = RedisServer::start().expect("redis-server starts");
    let mut config = RedisConfig::standalone(server.url());
    config.timeout_ms = 10_000;
    let store = RedisStore::connect(&config).await.expect("connects");
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
    let limiter = limiter(Backend::redis(store, clock.clone()), clock);
    for policy in &twelve_a_day() {
        let limits: Vec<u64> = reload_exhausted(&limiter, policy, 1, &[4, 1])
            .await
            .iter()
            .map(|d| d.limit)
            .collect();
        assert_eq!(limits, [3, 12]);
        reload_exhausted(&limiter, policy, 4, &[1, 4]).await;
        reload_exhausted(&limiter, policy, 2, &[3]).await;
    }
}

#[tokio::test]
async fn the_old_layout_is_read_for_the_policys_rest_then_dropped() {
    let clock = Arc::new(ManualClock::new(T0));
    let limiter = limiter(Backend::memory(10_000, clock.clone()), clock.clone());
    let policy = Policy::new(
        "bucket",
        Limits::TokenBucket(Rate::new(12, 12, HOUR).expect("valid")),
    );
    let who = Identity::value("tenant");
    let old = Plan::new(policy.clone(), 0);
    exhaust(&limiter, &old, &who).await;
    let new = Plan::new(policy.clone(), 0)
        .with_shards(4)
        .with_carry_over(&old);
    assert_eq!(new.carries_layouts(), 1);
    // The first decision starts the rest (an hour: the bucket's refill).
    assert!(!decide(&limiter, &new, &who).await.allowed);
    // Half an hour: 6 back on the old key; each new shard is full (3), so
    // the old key decides: 6 admitted, then none.
    clock.advance(HOUR / 2);
    let mut admitted = 0;
    for _ in 0..12 {
        admitted += u64::from(decide(&limiter, &new, &who).await.allowed);
    }
    assert_eq!(admitted, 6);
    // The rest over, the new layout alone decides. Its shards (3 each, 3
    // an hour) spent 2, 2, 1, 1 half an hour ago: 2.5, 2.5, 3, 3 now, so
    // 10 whole units. One bucket would have 6: a bucket's stated bound
    // (docs/config.md, Shards), at most the limit less what the old layout
    // held at the reload, and only for an identity that spent through the
    // whole rest; never more than the new layout's own limit.
    clock.advance(HOUR / 2);
    let mut admitted = 0;
    for _ in 0..24 {
        admitted += u64::from(decide(&limiter, &new, &who).await.allowed);
    }
    assert_eq!(admitted, 10);
    // Same layout again: nothing to carry.
    let same = Plan::new(policy, 0).with_shards(4).with_carry_over(&new);
    assert_eq!(same.carries_layouts(), 0);
}

#[tokio::test]
async fn an_operators_reset_forgets_the_carried_layout_too() {
    let clock = Arc::new(ManualClock::new(T0));
    let limiter = limiter(Backend::memory(10_000, clock.clone()), clock.clone());
    let who = Identity::value("tenant");
    for policy in &twelve_a_day() {
        let old = Plan::new(policy.clone(), 0);
        exhaust(&limiter, &old, &who).await;
        let new = Plan::new(policy.clone(), 0)
            .with_shards(4)
            .with_carry_over(&old);
        assert!(!decide(&limiter, &new, &who).await.allowed);
        assert!(limiter.forget(&new, &who).await.expect("reset"));
        // Afresh on every layout: the new one's 3 a shard, 12 in all.
        let mut admitted = 0;
        for _ in 0..16 {
            admitted += u64::from(decide(&limiter, &new, &who).await.allowed);
        }
        assert_eq!(admitted, 12, "{}", policy.name());
    }
}
