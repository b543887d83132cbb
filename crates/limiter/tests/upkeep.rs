//! The limiter's upkeep renews each lease when its clock says it is due,
//! and stops when its handle is dropped: no renewal after. Driven on
//! tokio's paused time and a manual clock, moved together.

use std::sync::Arc;
use std::time::Duration;

use tollgate_limiter::{
    Backend, Clock, KeptPlans, Lease, Leased, Limiter, LimiterMetrics, Limits, ManualClock, Plan,
    Policy, Rate, Registry,
};

const RENEW_MS: u64 = 500;

/// One leased plan, its ledger on store 0 (a memory store keeps none:
/// each renewal is scheduled, then fails, which the upkeep shrugs off).
struct OnePlan(Plan);

impl KeptPlans for OnePlan {
    fn plans(&self) -> Vec<&Plan> {
        vec![&self.0]
    }

    fn ledger(&self) -> Option<usize> {
        Some(0)
    }
}

/// Moves both clocks `ms` forward together, a millisecond at a time,
/// letting the upkeep run at each.
async fn run_for(clock: &ManualClock, ms: u64) {
    for _ in 0..ms {
        clock.advance(1);
        tokio::time::advance(Duration::from_millis(1)).await;
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_upkeep_renews_no_lease_after() {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let mut registry = Registry::default();
    let metrics = Arc::new(LimiterMetrics::register(&mut registry, clock.clone()));
    let limiter = Arc::new(Limiter::new(
        vec![Backend::memory(1_000, clock.clone())],
        Arc::clone(&metrics),
        clock.clone(),
    ));
    let policy = Policy::new(
        "api",
        Limits::TokenBucket(Rate::new(100, 100, 1_000).expect("rate")),
    );
    let terms = Leased {
        term_ms: 2_000,
        renew_ms: RENEW_MS,
        rest_ms: 1_000,
        floor_percent: 50,
        floors: vec![("eu".into(), 25), ("us".into(), 25)],
        spare: 50,
        max_identities: 10,
    };
    let lease = Arc::new(Lease::new(&policy, &terms, "eu", &metrics));
    let kept = Arc::new(OnePlan(Plan::new(policy, 0).with_lease(Arc::clone(&lease))));
    let started_ms = clock.monotonic_ms();

    let upkeep = limiter.upkeep(move || Arc::clone(&kept));
    // Its first turn, before either clock moves.
    tokio::task::yield_now().await;
    // Due at once, then every period: renewed at 0, 500, 1000 and 1500 ms.
    run_for(&clock, 1_700).await;
    assert_eq!(lease.next_due_ms(), started_ms + 2_000);

    drop(upkeep);
    run_for(&clock, 3_000).await;
    assert_eq!(
        lease.next_due_ms(),
        started_ms + 2_000,
        "no renewal after the handle was dropped"
    );
    assert!(lease.due(clock.monotonic_ms()));
}
