//! A refund on a leased plan gives back under the share its identity is
//! decided by here, not the declared limit: a token bucket's state is
//! written in the share's units, which the declared rate does not read.

use std::sync::Arc;

use prometheus_client::registry::Registry;
use tollgate_core::{Identity, Limits, ManualClock, Policy, Rate};
use tollgate_limiter::{Backend, Check, Lease, Leased, Limiter, LimiterMetrics, Plan};

#[tokio::test]
async fn a_refund_on_a_leased_token_bucket_gives_back_under_the_identitys_share() {
    refund_under_share(Limits::TokenBucket).await;
}

#[tokio::test]
async fn a_refund_on_a_leased_gcra_gives_back_under_the_identitys_share() {
    refund_under_share(Limits::Gcra).await;
}

async fn refund_under_share(limits: fn(Rate) -> Limits) {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let mut registry = Registry::default();
    let metrics = Arc::new(LimiterMetrics::register(&mut registry, clock.clone()));
    let limiter = Limiter::new(
        vec![Backend::memory(1_000, clock.clone())],
        Arc::clone(&metrics),
        clock.clone(),
    );
    // 100 a second, eu's floor 25 of it: a bucket of 25 refilling 25 a
    // second, whose token is 40 units where the declared one's is 10.
    let policy = Policy::new("api", limits(Rate::new(100, 100, 1_000).expect("rate")));
    let terms = Leased {
        term_ms: 2_000,
        renew_ms: 500,
        rest_ms: 1_000,
        floor_percent: 50,
        floors: vec![("eu".into(), 25), ("us".into(), 25)],
        spare: 50,
        max_identities: 10,
    };
    let lease = Arc::new(Lease::new(&policy, &terms, "eu", &metrics));
    let plan = Plan::new(policy, 0).with_lease(lease);
    let who = Identity::value("tenant-a");
    let spent = limiter.decide(&[Check::new(&plan, &who, 10)]).await;
    assert_eq!(
        (spent.decisions[0].allowed, spent.decisions[0].remaining),
        (true, 15)
    );
    assert_eq!(
        limiter
            .refund(&Check::new(&plan, &who, 5))
            .await
            .expect("refunded"),
        5
    );
    let look = limiter.decide(&[Check::new(&plan, &who, 0)]).await;
    assert_eq!(
        (look.decisions[0].limit, look.decisions[0].remaining),
        (25, 20)
    );
}
