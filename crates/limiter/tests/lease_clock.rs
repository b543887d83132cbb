//! A leased plan's grant runs a term from when its renewal was sent, on the
//! monotonic clock: a wall clock stepped back mid-lease does not stretch
//! it. Driven through the limiter with an injected clock; the grant comes
//! from a settled renewal, the renewals after it fail (a memory store
//! keeps no ledger), as a region cut off from its global Redis would see.

use std::sync::Arc;

use prometheus_client::registry::Registry;
use tollgate_core::{Clock, Identity, Limits, ManualClock, Policy, Rate};
use tollgate_limiter::{Backend, Check, Lease, Leased, Limiter, LimiterMetrics, Plan};
use tollgate_store::{LeaseGrant, LeaseLimit};

const TERM_MS: u64 = 2_000;

fn leased_bucket() -> (Policy, Leased) {
    let policy = Policy::new(
        "api",
        Limits::TokenBucket(Rate::new(100, 100, 1_000).expect("rate")),
    );
    let terms = Leased {
        term_ms: TERM_MS,
        renew_ms: 500,
        rest_ms: 1_000,
        floor_percent: 50,
        floors: vec![("eu".into(), 25), ("us".into(), 25)],
        spare: 50,
        max_identities: 10,
    };
    (policy, terms)
}

/// The limit the limiter decides `api` under now: the region's share.
async fn share_decided(limiter: &Limiter, plan: &Plan, who: &Identity) -> u64 {
    let decided = limiter.decide(&[Check::new(plan, who, 0)]).await;
    decided.decisions[0].limit
}

#[tokio::test]
async fn a_wall_clock_stepped_back_mid_lease_stops_the_grant_a_term_after_its_renewal_was_sent() {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let mut registry = Registry::default();
    let metrics = Arc::new(LimiterMetrics::register(&mut registry, clock.clone()));
    let limiter = Limiter::new(
        vec![Backend::memory(1_000, clock.clone())],
        Arc::clone(&metrics),
        clock.clone(),
    );
    let (policy, terms) = leased_bucket();
    let lease = Arc::new(Lease::new(&policy, &terms, "eu", &metrics));
    let plan = Plan::new(policy, 0).with_lease(Arc::clone(&lease));
    let who = Identity::value("tenant-a");

    // tenant-a is turned away by its floor of 25, so its lease asks for
    // more; a renewal sent now is granted 40 units above the floor.
    let turned_away = limiter.decide(&[Check::new(&plan, &who, 26)]).await;
    assert!(!turned_away.decisions[0].allowed);
    let sent_ms = clock.monotonic_ms();
    let wanting = lease.begin(sent_ms);
    assert_eq!(wanting.len(), 1);
    assert_eq!((&wanting[0].identity, wanting[0].demand), (&who, 26));
    let grant = LeaseGrant {
        units: 40,
        target: 40,
        limit: LeaseLimit::Target,
        granted_at_ms: 1_000_000,
        unleased: 10,
    };
    lease.settle(&wanting, sent_ms, clock.monotonic_ms(), &Ok(vec![grant]));
    let other = Identity::value("tenant-b");
    assert_eq!(
        share_decided(&limiter, &plan, &other).await,
        25,
        "tenant-b keeps its own floor"
    );
    assert_eq!(share_decided(&limiter, &plan, &who).await, 65);

    // The wall clock steps back 30 s; every renewal from now on fails.
    clock.set(clock.now_ms() - 30_000);
    limiter.renew(&lease, 0).await;
    assert_eq!(
        share_decided(&limiter, &plan, &who).await,
        65,
        "the grant still runs"
    );

    // A term after the send, on the monotonic clock, the grant is gone,
    // though the wall clock reads 28 s before the send.
    clock.set(clock.now_ms() + TERM_MS - 1);
    limiter.renew(&lease, 0).await;
    assert_eq!(
        share_decided(&limiter, &plan, &who).await,
        65,
        "1 ms before the term ends"
    );
    clock.advance(1);
    assert_eq!(
        share_decided(&limiter, &plan, &who).await,
        25,
        "a term after the renewal was sent, only the floor is spent"
    );
    assert!(
        clock.now_ms() < 1_000_000,
        "the wall clock is still behind the send"
    );
}
