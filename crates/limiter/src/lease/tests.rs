use std::sync::Arc;

use tollgate_core::{Identity, Limits, ManualClock, Policy, Rate, Window};
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
        max_identities: 2,
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

fn granted(units: u64, target: u64) -> LeaseGrant {
    LeaseGrant {
        units,
        target,
        limit: if units < target {
            LeaseLimit::HeldByOthers
        } else {
            LeaseLimit::Target
        },
        granted_at_ms: 123_456,
        unleased: 50 - units,
    }
}

fn tenant(name: &str) -> Identity {
    Identity::value(name)
}

/// Renews at `sent_ms`, the ledger answering `answer` at `now_ms`; the
/// identities and demands the renewal carried.
fn renew(
    lease: &Lease,
    sent_ms: u64,
    now_ms: u64,
    answer: impl FnOnce(usize) -> Result<Vec<LeaseGrant>, StoreError>,
) -> Vec<(Identity, u64)> {
    let wanting = lease.begin(sent_ms);
    let carried = wanting
        .iter()
        .map(|w| (w.identity.clone(), w.demand))
        .collect();
    lease.settle(&wanting, sent_ms, now_ms, &answer(wanting.len()));
    carried
}

#[test]
fn an_identity_within_its_floor_spends_it_with_no_entry_and_no_renewal() {
    let metrics = metrics();
    let lease = Lease::new(&bucket(), &terms(), "eu", &metrics);
    let a = tenant("a");
    assert_eq!(lease.share(&a, 5, 0).limits().limit(), 25);
    assert_eq!(lease.units(&a, 0), 25);
    assert!(lease.due(0));
    assert!(lease.begin(0).is_empty(), "nobody wants more: no call");
    assert_eq!(lease.next_due_ms(), 500);
    assert_eq!(lease.identities(), 0);
    // A cost-0 look that found nothing left asks for nothing either.
    lease.rejected(&a, 0);
    assert_eq!(lease.identities(), 0);
}

#[test]
fn a_turned_away_identity_leases_its_own_spare_for_a_term_from_the_send() {
    let metrics = metrics();
    let lease = Lease::new(&bucket(), &terms(), "eu", &metrics);
    let (a, b) = (tenant("a"), tenant("b"));
    lease.rejected(&a, 30);
    assert_eq!(lease.identities(), 1);
    // The answer arrives late (at 1 900): the term still counts from the send.
    let carried = renew(&lease, 1_000, 1_900, |n| {
        assert_eq!(n, 1);
        Ok(vec![granted(40, 40)])
    });
    assert_eq!(carried, [(a.clone(), 30)]);
    assert_eq!(lease.units(&a, 1_900), 65);
    assert_eq!(lease.units(&a, 2_999), 65);
    assert_eq!(lease.units(&b, 2_000), 25, "b keeps its own floor");
    assert_eq!(lease.share(&b, 1, 2_000).limits().limit(), 25);
    assert_eq!(
        lease.units(&a, 3_000),
        25,
        "a term after the send, whatever the answer's delay"
    );
    let share = lease.share(&a, 0, 2_000);
    let Limits::TokenBucket(rate) = share.limits() else {
        panic!("a bucket stays a bucket")
    };
    // 65 of 100: capacity 65, refill 10 × 65 / (1 000 × 100) a ms.
    assert_eq!(
        (rate.capacity(), rate.tokens(), rate.per_ms()),
        (65, 650, 100_000)
    );
    let text = metrics.encode();
    for line in [
        r#"tollgate_lease_share{policy="api",region="eu"} 65"#,
        r#"tollgate_lease_identities{policy="api",region="eu"} 1"#,
        r#"tollgate_lease_demand{policy="api",region="eu"} 30"#,
        r#"tollgate_lease_renewals_total{policy="api",region="eu",outcome="granted"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}:\n{text}");
    }
    assert!(
        !text.contains("tenant") && !text.contains("\"a\""),
        "{text}"
    );
}

#[test]
fn each_identitys_demand_is_reported_per_renewal_period() {
    let metrics = metrics();
    let lease = Lease::new(&bucket(), &terms(), "eu", &metrics);
    let a = tenant("a");
    lease.rejected(&a, 7);
    lease.share(&a, 13, 50);
    let first = renew(&lease, 100, 110, |_| Ok(vec![granted(10, 10)]));
    assert_eq!(
        first,
        [(a.clone(), 20)],
        "the first report is what was seen"
    );
    lease.share(&a, 60, 600);
    // 60 units over 1 000 ms is 30 per 500 ms period.
    assert_eq!(
        renew(&lease, 1_100, 1_110, |_| Ok(vec![granted(10, 10)])),
        [(a.clone(), 30)]
    );
}

#[test]
fn a_failed_renewal_leaves_each_grant_to_run_out_and_counts_it_expired_once() {
    let metrics = metrics();
    let lease = Lease::new(&bucket(), &terms(), "us", &metrics);
    let a = tenant("a");
    let down = |_| Err(StoreError::Unavailable("the ledger is down".into()));
    lease.rejected(&a, 40);
    renew(&lease, 0, 10, |_| Ok(vec![granted(30, 30)]));
    lease.share(&a, 40, 100);
    renew(&lease, 500, 520, down);
    assert_eq!(lease.units(&a, 1_999), 55, "the grant runs its term");
    lease.share(&a, 40, 1_900);
    renew(&lease, 2_000, 2_010, down);
    assert_eq!(lease.units(&a, 2_010), 25);
    lease.share(&a, 40, 2_400);
    renew(&lease, 2_500, 2_510, down);
    let text = metrics.encode();
    for line in [
        r#"tollgate_lease_renewals_total{policy="api",region="us",outcome="expired"} 1"#,
        r#"tollgate_lease_renewals_total{policy="api",region="us",outcome="refused"} 3"#,
        r#"tollgate_lease_share{policy="api",region="us"} 25"#,
        // Two periods ended on the floor (2 010, 2 510), a half second each.
        r#"tollgate_lease_floor_seconds_total{policy="api",region="us"} 1.0"#,
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}:\n{text}");
    }
}

#[test]
fn identities_past_the_bound_spend_their_floor_and_are_counted() {
    let metrics = metrics();
    let lease = Lease::new(&bucket(), &terms(), "eu", &metrics);
    let (a, b, c) = (tenant("a"), tenant("b"), tenant("c"));
    lease.rejected(&a, 30);
    lease.rejected(&b, 30);
    lease.rejected(&c, 30);
    lease.rejected(&c, 30);
    lease.rejected(&a, 30);
    assert_eq!(lease.identities(), 2, "max_identities: 2");
    let carried = renew(&lease, 0, 10, |n| Ok(vec![granted(40, 40); n]));
    let mut who: Vec<Identity> = carried.into_iter().map(|(i, _)| i).collect();
    who.sort();
    assert_eq!(who, [a.clone(), b.clone()]);
    assert_eq!(
        (
            lease.units(&a, 20),
            lease.units(&b, 20),
            lease.units(&c, 20)
        ),
        (65, 65, 25)
    );
    let text = metrics.encode();
    let line = r#"tollgate_lease_identities_refused_total{policy="api",region="eu"} 2"#;
    assert!(text.lines().any(|l| l == line), "missing {line}:\n{text}");
}

#[test]
fn an_identity_back_within_its_floor_is_not_renewed_and_leaves_once_its_grant_ends() {
    let metrics = metrics();
    let lease = Lease::new(&bucket(), &terms(), "eu", &metrics);
    let a = tenant("a");
    lease.rejected(&a, 40);
    renew(&lease, 0, 10, |_| Ok(vec![granted(40, 40)]));
    // 12 units a period: the floor of 25 a rest (1 s) gives 12.5 a period.
    lease.share(&a, 12, 100);
    assert!(lease.begin(500).is_empty(), "within its floor: no call");
    assert_eq!(lease.identities(), 1, "its grant still runs");
    assert_eq!(lease.units(&a, 1_999), 65);
    lease.share(&a, 12, 600);
    assert!(lease.begin(1_000).is_empty());
    assert!(lease.begin(2_000).is_empty());
    assert_eq!(lease.identities(), 0, "grant over, within its floor: gone");
    assert_eq!(lease.units(&a, 2_000), 25);
    // 13 a period is more than the floor gives: it asks again.
    lease.rejected(&a, 13);
    assert_eq!(lease.begin(2_500).len(), 1);
}

#[test]
fn a_demand_just_over_the_floor_asks_even_when_its_renewal_comes_late() {
    let metrics = metrics();
    let lease = Lease::new(&bucket(), &terms(), "eu", &metrics);
    let a = tenant("a");
    lease.rejected(&a, 40);
    renew(&lease, 0, 10, |_| Ok(vec![granted(40, 40)]));
    // 13 units in 510 ms is 25.5 a rest (1 s), over the floor of 25,
    // though 12.7 a period rounded down (12) would fit it.
    lease.share(&a, 13, 100);
    assert_eq!(
        renew(&lease, 510, 520, |_| Ok(vec![granted(40, 40)])),
        [(a.clone(), 13)],
        "over its floor: renewed, its demand rounded up"
    );
    // 12 units in 500 ms is 24 a rest: within the floor, not renewed.
    lease.share(&a, 12, 600);
    assert!(lease.begin(1_010).is_empty());
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

/// `max_identities` slots, the floor 25 a rest (12.5 a renewal period).
fn slots(max_identities: usize) -> Leased {
    Leased {
        max_identities,
        ..terms()
    }
}

/// Identities a renewal carried, sorted, with their demands.
fn sorted(mut carried: Vec<(Identity, u64)>) -> Vec<(Identity, u64)> {
    carried.sort();
    carried
}

#[test]
fn a_demanding_tenant_displaces_the_least_demanding_squatter_at_the_next_renewal() {
    let metrics = metrics();
    let lease = Lease::new(&bucket(), &slots(3), "eu", &metrics);
    let junk: Vec<Identity> = (0..3).map(|i| tenant(&format!("junk-{i}"))).collect();
    let acme = tenant("acme");
    // Three junk identities just over their floor take every slot first.
    for j in &junk {
        lease.rejected(j, 13);
    }
    renew(&lease, 0, 10, |n| Ok(vec![granted(10, 10); n]));
    assert_eq!(lease.units(&junk[0], 20), 35);
    // The real tenant asks 40 in the period and finds the table full.
    for j in &junk {
        lease.share(j, 13, 100);
    }
    assert_eq!(lease.share(&acme, 40, 100).limits().limit(), 25);
    lease.rejected(&acme, 40);
    assert_eq!(lease.units(&acme, 100), 25, "its floor until the renewal");
    // 40 > 2 × 13: it takes the slot of the least demanding (ties in
    // identity order: junk-0), which leaves the renewal.
    let carried = renew(&lease, 500, 510, |n| Ok(vec![granted(40, 40); n]));
    assert_eq!(
        sorted(carried),
        [
            (acme.clone(), 40),
            (junk[1].clone(), 13),
            (junk[2].clone(), 13)
        ]
    );
    assert_eq!(lease.identities(), 3);
    assert_eq!(lease.units(&acme, 510), 65, "its leased share at once");
    assert_eq!(
        lease.units(&junk[0], 510),
        25,
        "the displaced spends its floor at once, its grant left to the ledger"
    );
    let text = metrics.encode();
    for line in [
        r#"tollgate_lease_renewals_total{policy="api",region="eu",outcome="displaced"} 1"#,
        r#"tollgate_lease_identities_refused_total{policy="api",region="eu"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}:\n{text}");
    }
}

#[test]
fn a_challenger_needs_more_than_twice_the_holders_demand_so_slots_do_not_flap() {
    let metrics = metrics();
    let lease = Lease::new(&bucket(), &slots(1), "eu", &metrics);
    let (a, b) = (tenant("a"), tenant("b"));
    lease.rejected(&a, 20);
    renew(&lease, 0, 10, |_| Ok(vec![granted(20, 20)]));
    // b asks exactly twice what a asks: a keeps the slot.
    lease.share(&a, 20, 100);
    lease.rejected(&b, 40);
    assert_eq!(
        renew(&lease, 500, 510, |n| Ok(vec![granted(20, 20); n])),
        [(a.clone(), 20)]
    );
    // Once more than twice: b takes it.
    lease.share(&a, 20, 600);
    lease.rejected(&b, 41);
    assert_eq!(
        renew(&lease, 1_000, 1_010, |n| Ok(vec![granted(30, 30); n])),
        [(b.clone(), 41)]
    );
    assert_eq!((lease.units(&a, 1_010), lease.units(&b, 1_010)), (25, 55));
    // a back at its old demand, even at twice b's, does not take it back.
    lease.share(&b, 41, 1_100);
    lease.rejected(&a, 82);
    assert_eq!(
        renew(&lease, 1_500, 1_510, |n| Ok(vec![granted(30, 30); n])),
        [(b.clone(), 41)]
    );
}

#[test]
fn a_flood_of_fresh_junk_names_cannot_push_out_a_demanding_challenger() {
    let metrics = metrics();
    let lease = Lease::new(&bucket(), &slots(1), "eu", &metrics);
    let (holder, acme) = (tenant("holder"), tenant("acme"));
    lease.rejected(&holder, 13);
    renew(&lease, 0, 10, |_| Ok(vec![granted(10, 10)]));
    lease.share(&holder, 13, 100);
    lease.rejected(&acme, 30);
    for _ in 0..9 {
        lease.share(&acme, 30, 150);
    }
    // A thousand fresh names at 13 each, far more than the candidates kept
    // (64): each takes the least one's place, never acme's, whose 300 stand
    // above every count the junk builds (13 000 over 64 candidates).
    for i in 0..1_000 {
        lease.rejected(&tenant(&format!("junk-{i}")), 13);
    }
    for _ in 0..10 {
        lease.share(&acme, 30, 200);
    }
    assert_eq!(
        renew(&lease, 500, 510, |n| Ok(vec![granted(40, 40); n])),
        [(acme.clone(), 600)],
        "acme takes the slot; no junk name, sure of 13 at most, takes one"
    );
}
