use std::sync::Arc;

use tollgate_core::{Limits, ManualClock, Policy, Rate, Window};
use tollgate_store::{LeaseGrant, LeaseLimit, StoreError};

use super::*;
use crate::metrics::LimiterMetrics;

fn terms() -> Leased {
    Leased {
        term_ms: 2_000,
        renew_ms: 500,
        rest_ms: 1_000,
        floor_percent: 50,
        floors: vec![("eu".into(), 25), ("us".into(), 25)],
        spare: 50,
    }
}

fn bucket() -> Policy {
    Policy::new(
        "api",
        Limits::TokenBucket(Rate::new(100, 10, 1_000).expect("rate")),
    )
}

/// The limiter's series in a registry of their own.
struct Metrics {
    registry: prometheus_client::registry::Registry,
    limiter: LimiterMetrics,
}

impl std::ops::Deref for Metrics {
    type Target = LimiterMetrics;
    fn deref(&self) -> &LimiterMetrics {
        &self.limiter
    }
}

impl Metrics {
    fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("encode");
        out
    }
}

fn metrics() -> Metrics {
    let mut registry = prometheus_client::registry::Registry::with_prefix("tollgate");
    let limiter = LimiterMetrics::register(&mut registry, Arc::new(ManualClock::new(0)));
    Metrics { registry, limiter }
}

fn granted(units: u64, target: u64) -> Result<LeaseGrant, StoreError> {
    Ok(LeaseGrant {
        units,
        target,
        limit: if units < target {
            LeaseLimit::HeldByOthers
        } else {
            LeaseLimit::Target
        },
        granted_at_ms: 123_456,
        unleased: 50 - units,
    })
}

#[test]
fn a_grant_is_spent_from_the_send_for_a_term_then_the_floor_alone() {
    let metrics = metrics();
    let lease = Lease::new(&bucket(), &terms(), "eu", &metrics);
    assert_eq!(lease.units(0), 25, "the floor before any renewal");
    assert!(lease.due(0));
    let ask = lease.begin(1_000);
    assert_eq!(
        (ask.region, ask.spare, ask.term_ms, ask.rest_ms),
        ("eu", 50, 2_000, 1_000)
    );
    assert_eq!(lease.next_due_ms(), 1_500);
    // The answer arrives late (at 1 900): the term still counts from the send.
    lease.settle(1_000, 1_900, &granted(40, 40));
    assert_eq!(lease.units(1_900), 65);
    assert_eq!(lease.units(2_999), 65);
    assert_eq!(
        lease.units(3_000),
        25,
        "a term after the send, whatever the answer's delay"
    );
    let share = lease.share(2_000);
    assert_eq!(share.limits().limit(), 65);
    let Limits::TokenBucket(rate) = share.limits() else {
        panic!("a bucket stays a bucket")
    };
    // 65 of 100: capacity 65, refill 10 × 65 / (1 000 × 100) a ms.
    assert_eq!(
        (rate.capacity(), rate.tokens(), rate.per_ms()),
        (65, 650, 100_000)
    );
    assert_eq!(lease.share(3_000).limits().limit(), 25);
}

#[test]
fn a_failed_renewal_leaves_the_grant_to_run_out_and_counts_it_expired_once() {
    let metrics = metrics();
    let lease = Lease::new(&bucket(), &terms(), "us", &metrics);
    lease.begin(0);
    lease.settle(0, 10, &granted(30, 30));
    lease.begin(500);
    let down = Err(StoreError::Unavailable("the ledger is down".into()));
    lease.settle(500, 520, &down);
    assert_eq!(lease.units(1_999), 55, "the grant runs its term");
    lease.begin(2_000);
    lease.settle(2_000, 2_010, &down);
    assert_eq!(lease.units(2_010), 25);
    lease.begin(2_500);
    lease.settle(2_500, 2_510, &down);
    let text = metrics.encode();
    assert!(
        text.contains(
            r#"tollgate_lease_renewals_total{policy="api",region="us",outcome="expired"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(
            r#"tollgate_lease_renewals_total{policy="api",region="us",outcome="refused"} 3"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"tollgate_lease_share{policy="api",region="us"} 25"#),
        "{text}"
    );
}

#[test]
fn demand_is_reported_per_renewal_period() {
    let metrics = metrics();
    let lease = Lease::new(&bucket(), &terms(), "eu", &metrics);
    lease.record_demand(7);
    assert_eq!(
        lease.begin(100).demand,
        7,
        "the first report is what was seen"
    );
    lease.record_demand(30);
    // 30 units over 1 000 ms is 15 per 500 ms period.
    assert_eq!(lease.begin(1_100).demand, 15);
    assert_eq!(lease.begin(1_600).demand, 0);
}

#[test]
fn a_reload_keeps_a_lease_only_for_the_same_policy_terms_and_region() {
    let metrics = metrics();
    let lease = Lease::new(&bucket(), &terms(), "eu", &metrics);
    assert!(lease.serves(&bucket(), &terms(), "eu"));
    assert!(!lease.serves(&bucket(), &terms(), "us"));
    let longer = Leased {
        term_ms: 4_000,
        ..terms()
    };
    assert!(!lease.serves(&bucket(), &longer, "eu"));
    let window = Policy::new(
        "api",
        Limits::FixedWindow(Window::new(100, 1_000).expect("w")),
    );
    assert!(!lease.serves(&window, &terms(), "eu"));
}

#[test]
fn shares_scale_windows_and_never_exceed_the_limit() {
    let window = Policy::new(
        "w",
        Limits::FixedWindow(Window::new(100, 60_000).expect("w")),
    );
    assert_eq!(share_of(&window, 37).map(|p| p.limits().limit()), Some(37));
    assert_eq!(
        share_of(&window, 100).map(|p| p.limits().limit()),
        Some(100)
    );
    assert_eq!(
        share_of(&window, 250).map(|p| p.limits().limit()),
        Some(100)
    );
    assert!(share_of(&window, 0).is_none());
}
