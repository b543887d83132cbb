//! A hot identity far over its limit, through the limiter on the memory
//! store and a manual clock (docs/config.md, `hot_lease`): once the store
//! refuses it a block, the instance rejects it locally until the store's
//! own wait for a block has passed, so it costs the store about what it
//! costs under its limit, and never admits beyond the limit.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tollgate_core::{Clock, Identity, Limits, ManualClock, Policy, Rate};
use tollgate_limiter::{
    Backend, Check, HotLeaseRule, HotLeases, Limiter, LimiterMetrics, Plan, REFUSED_FLOOR_MS,
};

const T0: u64 = 1_700_000_000_000;

/// Capacity 3000, refilling 700 a second (7 units of a tenth of a token a
/// ms); hot above 100 decisions a second, blocks of at most 300 for 200 ms.
fn setup() -> (Arc<ManualClock>, Arc<LimiterMetrics>, Limiter, Plan) {
    let clock = Arc::new(ManualClock::new(T0));
    let mut registry = Registry::default();
    let metrics = Arc::new(LimiterMetrics::register(&mut registry, clock.clone()));
    let limiter = Limiter::new(
        vec![Backend::memory(1_000, clock.clone())],
        Arc::clone(&metrics),
        clock.clone(),
    );
    let policy = Policy::new(
        "api",
        Limits::TokenBucket(Rate::new(3_000, 700, 1_000).expect("rate")),
    );
    let rule = HotLeaseRule {
        above: 100,
        term_ms: 200,
        max_block: 300,
        windowed: false,
    };
    let hot = HotLeases::new(rule, Counter::default(), Counter::default());
    let plan = Plan::new(policy, 0).with_hot_lease(Arc::new(hot));
    (clock, metrics, limiter, plan)
}

/// `per_ms` decisions of cost 1 each ms for `ms` ms; admissions.
async fn hammer(limiter: &Limiter, plan: &Plan, clock: &ManualClock, per_ms: u64, ms: u64) -> u64 {
    let who = Identity::value("attacker");
    let mut admitted = 0;
    for _ in 0..ms {
        for _ in 0..per_ms {
            let decided = limiter.decide(&[Check::new(plan, &who, 1)]).await;
            admitted += u64::from(decided.decisions[0].allowed);
        }
        clock.advance(1);
    }
    admitted
}

#[tokio::test]
async fn a_hot_identity_far_over_its_limit_costs_the_store_at_most_one_request_in_twenty_decisions()
{
    let (clock, metrics, limiter, plan) = setup();
    // 4 000 decisions a second against a refill of 700: the first second
    // drains the bucket, the next nine are far over the limit.
    let mut admitted = hammer(&limiter, &plan, &clock, 4, 1_000).await;
    let asked_before = metrics.store_requests.get();
    admitted += hammer(&limiter, &plan, &clock, 4, 9_000).await;
    let asked = metrics.store_requests.get() - asked_before;
    let decisions = 4 * 9_000;
    eprintln!(
        "{asked} store requests for {decisions} decisions far over the limit: {:.4} a decision",
        asked as f64 / decisions as f64
    );
    assert!(
        asked * 20 <= decisions,
        "{asked} store requests for {decisions} decisions"
    );
    assert!(metrics.hot_lease_refused_local.get() > 0);
    // Every unit the store handed out is admitted or back in the bucket
    // once the blocks end: exactly the capacity and ten seconds of refill
    // (7 000), never more.
    let hot = plan.hot_lease().expect("hot lease");
    limiter.give_back_unspent(&[&plan], true).await;
    assert_eq!((hot.held(), metrics.hot_lease_lost.get()), (0, 0));
    let who = Identity::value("attacker");
    let left = limiter
        .decide(&[Check::new(&plan, &who, 0)])
        .await
        .decisions[0]
        .remaining;
    let left = u64::try_from(left).expect("remaining");
    assert_eq!(
        admitted + left,
        3_000 + 7_000,
        "admitted {admitted}, left {left}"
    );
    // Rejected early by less than a block and the floor's refill: what the
    // store held unseen when the hammering stopped.
    assert!(left < 300 + 7 * REFUSED_FLOOR_MS / 10, "left {left}");
}

#[tokio::test]
async fn a_refused_hot_identity_is_told_the_exact_wait_and_admitted_when_it_has_passed() {
    let (clock, metrics, limiter, plan) = setup();
    let who = Identity::value("attacker");
    let check = || Check::new(&plan, &who, 1);
    // Hot (150 decisions in its first second) and drained to the last
    // token by blocks and single decisions.
    hammer(&limiter, &plan, &clock, 150, 1).await;
    while limiter.decide(&[check()]).await.decisions[0].allowed {}
    let asked = metrics.store_requests.get();
    let first = limiter.decide(&[check()]).await.decisions[0];
    assert!(!first.allowed);
    let wait = first.retry_after_ms.expect("a wait");
    assert!(wait > 1, "a block's worth takes more than 1 ms: {wait}");
    // Until then every request is rejected here with the wait counting
    // down, and the store is not asked.
    clock.advance(wait - 1);
    let last = limiter.decide(&[check()]).await.decisions[0];
    assert_eq!(
        (last.allowed, last.remaining, last.retry_after_ms),
        (false, 0, Some(1))
    );
    assert_eq!(metrics.store_requests.get(), asked);
    // Waiting exactly that long, the next request takes a block.
    clock.advance(1);
    assert!(limiter.decide(&[check()]).await.decisions[0].allowed);
    assert_eq!(metrics.store_requests.get(), asked + 1);
}

#[tokio::test]
async fn a_wall_clock_stepped_back_does_not_stretch_a_blocks_term() {
    let (clock, metrics, limiter, plan) = setup();
    let hot = plan.hot_lease().expect("hot lease");
    // Hot (150 decisions in its first ms): it holds a block of 200 ms.
    hammer(&limiter, &plan, &clock, 150, 1).await;
    assert_eq!(hot.held(), 1, "a block is held");
    let asked = metrics.store_requests.get();
    let who = Identity::value("attacker");
    assert!(
        limiter
            .decide(&[Check::new(&plan, &who, 1)])
            .await
            .decisions[0]
            .allowed,
        "spent from the block"
    );
    assert_eq!(metrics.store_requests.get(), asked, "the block answered");
    // The wall clock steps back 30 s while the term passes on the
    // monotonic clock: the block has ended all the same.
    clock.set(clock.now_ms() - 30_000);
    clock.advance_monotonic_us(200_000);
    limiter.give_back_unspent(&[&plan], false).await;
    assert_eq!(hot.held(), 0, "the block ended with its term");
    limiter.decide(&[Check::new(&plan, &who, 1)]).await;
    assert_eq!(
        metrics.store_requests.get(),
        asked + 2,
        "the give-back and the next decision went to the store"
    );
}

#[tokio::test]
async fn a_refund_ends_a_remembered_refusal() {
    let (clock, metrics, limiter, plan) = setup();
    let who = Identity::value("attacker");
    let check = |cost| Check::new(&plan, &who, cost);
    hammer(&limiter, &plan, &clock, 150, 1).await;
    while limiter.decide(&[check(1)]).await.decisions[0].allowed {}
    let asked = metrics.store_requests.get();
    assert!(!limiter.decide(&[check(1)]).await.decisions[0].allowed);
    assert_eq!(metrics.store_requests.get(), asked, "rejected here");
    // A block's worth given back: the refusal no longer holds, and the
    // next request takes a block from the refunded units.
    assert_eq!(limiter.refund(&check(300)).await.expect("refunded"), 300);
    assert!(limiter.decide(&[check(1)]).await.decisions[0].allowed);
}
