//! A leased plan's renewals on a real global redis-server: identities
//! within their floor cost the ledger nothing, those the floor turned away
//! are renewed together, 100 a script call, and no more of them than the
//! plan's bound (the rest spend their floor, counted).

use std::sync::Arc;

use prometheus_client::registry::Registry;
use tollgate_core::{Identity, Limits, ManualClock, Policy, Rate};
use tollgate_limiter::{Backend, Check, Lease, Leased, Limiter, LimiterMetrics, Plan};
use tollgate_limiter::{RedisConfig, RedisStore};
use tollgate_testkit::RedisServer;

fn leased_bucket(max_identities: usize) -> (Policy, Leased) {
    let policy = Policy::new(
        "api",
        Limits::TokenBucket(Rate::new(100, 100, 1_000).expect("rate")),
    );
    let terms = Leased {
        term_ms: 2_000,
        renew_ms: 500,
        rest_ms: 1_000,
        floor_percent: 50,
        floors: vec![("eu".into(), 25), ("us".into(), 25)],
        spare: 50,
        max_identities,
    };
    (policy, terms)
}

/// Script calls the server ran to the end (a NOSCRIPT answer, then the
/// body sent again, is one call).
fn script_calls(server: &RedisServer) -> u64 {
    let info = server.cli(&["info", "commandstats"]).expect("commandstats");
    let field = |line: &str, name: &str| -> u64 {
        line.split(&[':', ','][..])
            .find_map(|kv| kv.strip_prefix(name)?.parse().ok())
            .unwrap_or(0)
    };
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .map(|l| field(l, "calls=") - field(l, "failed_calls="))
        .sum()
}

/// A limiter deciding on a memory store (index 0, the region's), its
/// ledger on `global` (index 1), and a leased plan with `max_identities`.
async fn setup(global: &RedisServer, max_identities: usize) -> (Limiter, Plan, Arc<Lease>) {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let mut registry = Registry::default();
    let metrics = Arc::new(LimiterMetrics::register(&mut registry, clock.clone()));
    let mut config = RedisConfig::standalone(global.url());
    config.timeout_ms = 10_000;
    let store = RedisStore::connect(&config).await.expect("connects");
    let limiter = Limiter::new(
        vec![
            Backend::memory(10_000, clock.clone()),
            Backend::redis(store, clock.clone()),
        ],
        Arc::clone(&metrics),
        clock,
    );
    let (policy, terms) = leased_bucket(max_identities);
    let lease = Arc::new(Lease::new(&policy, &terms, "eu", &metrics));
    let plan = Plan::new(policy, 0).with_lease(Arc::clone(&lease));
    (limiter, plan, lease)
}

/// `count` tenants named `{prefix}{i}`, each sending one check of `cost`.
async fn send(limiter: &Limiter, plan: &Plan, prefix: &str, count: usize, cost: u64) {
    for i in 0..count {
        let who = Identity::value(&format!("{prefix}{i}"));
        limiter.decide(&[Check::new(plan, &who, cost)]).await;
    }
}

#[tokio::test]
async fn identities_within_their_floor_cost_the_ledger_nothing() {
    let global = RedisServer::start().expect("redis-server starts");
    let (limiter, plan, lease) = setup(&global, 1_000).await;
    // 200 tenants, each well within its floor of 25.
    send(&limiter, &plan, "small-", 200, 1).await;
    assert_eq!(lease.identities(), 0);
    limiter.renew(&lease, 1).await;
    assert_eq!(script_calls(&global), 0);
}

#[tokio::test]
async fn hot_identities_are_renewed_a_hundred_a_call() {
    let global = RedisServer::start().expect("redis-server starts");
    let (limiter, plan, lease) = setup(&global, 1_000).await;
    // 150 tenants turned away by the floor (26 > 25) beside 50 small ones.
    send(&limiter, &plan, "big-", 150, 26).await;
    send(&limiter, &plan, "small-", 50, 1).await;
    assert_eq!(lease.identities(), 150);
    limiter.renew(&lease, 1).await;
    assert_eq!(script_calls(&global), 2, "100 identities, then 50");
    // Each has a ledger entry of its own, beside the epoch.
    let keys = global
        .cli(&["--scan", "--pattern", "tollgate:lease:*"])
        .expect("scan");
    assert_eq!(keys.lines().count(), 151, "{keys}");
}

#[tokio::test]
async fn identities_past_the_bound_spend_their_floor_and_cost_nothing() {
    let global = RedisServer::start().expect("redis-server starts");
    let (limiter, plan, lease) = setup(&global, 120).await;
    send(&limiter, &plan, "big-", 150, 26).await;
    assert_eq!(lease.identities(), 120, "the bound");
    limiter.renew(&lease, 1).await;
    assert_eq!(script_calls(&global), 2, "100 identities, then 20");
    let keys = global
        .cli(&["--scan", "--pattern", "tollgate:lease:*"])
        .expect("scan");
    assert_eq!(keys.lines().count(), 121, "{keys}");
}
