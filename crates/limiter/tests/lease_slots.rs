//! The slots of a leased policy's identity table go by demand: three junk
//! identities just over their floor take every slot first, then a busy
//! tenant asks for more and, at the second renewal (its demand counts from
//! its first rejection), holds a slot and is admitted at its leased
//! share's rate, not its floor's. Decided on a
//! memory store at an injected clock, leased from a real global
//! redis-server's ledger (docs/config.md, Leased shares: who holds a slot).

use std::sync::Arc;

use prometheus_client::registry::Registry;
use tollgate_core::{Identity, Limits, ManualClock, Policy, Rate};
use tollgate_limiter::{Backend, Check, Lease, Leased, Limiter, LimiterMetrics, Plan};
use tollgate_limiter::{RedisConfig, RedisStore};
use tollgate_store::ledger_epoch_key;
use tollgate_testkit::RedisServer;

/// 100 a second; each of two regions owns a floor of 25 (12.5 a renewal
/// period), the spare 50 is leased; three slots.
fn leased_bucket() -> (Policy, Leased) {
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
        max_identities: 3,
    };
    (policy, terms)
}

struct Region {
    clock: Arc<ManualClock>,
    limiter: Limiter,
    plan: Plan,
    lease: Arc<Lease>,
}

/// A limiter deciding on a memory store (index 0), its ledger on `global`
/// (index 1), made long ago (no new ledger's wait).
async fn region(global: &RedisServer) -> Region {
    global
        .cli(&["set", &ledger_epoch_key("tollgate"), "1"])
        .expect("an old ledger");
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
        clock.clone(),
    );
    let (policy, terms) = leased_bucket();
    let lease = Arc::new(Lease::new(&policy, &terms, "eu", &metrics));
    let plan = Plan::new(policy, 0).with_lease(Arc::clone(&lease));
    Region {
        clock,
        limiter,
        plan,
        lease,
    }
}

impl Region {
    /// `n` checks of cost 1 for `who`; how many were admitted.
    async fn send(&self, who: &Identity, n: u64) -> u64 {
        let mut admitted = 0;
        for _ in 0..n {
            admitted += u64::from(self.check(who, 1).await);
        }
        admitted
    }

    /// One check of `cost` for `who`: whether it was admitted.
    async fn check(&self, who: &Identity, cost: u64) -> bool {
        let decided = self
            .limiter
            .decide(&[Check::new(&self.plan, who, cost)])
            .await;
        decided.decisions[0].allowed
    }

    /// One renewal period: each junk identity asks 13 (just over its
    /// floor's 12.5) at its start, the tenant (if any) 1 every 10 ms (50
    /// in all); then the renewal. The tenant's admissions.
    async fn period(&self, junk: &[Identity], tenant: Option<&Identity>) -> u64 {
        for j in junk {
            self.send(j, 13).await;
        }
        let mut admitted = 0;
        for _ in 0..50 {
            if let Some(tenant) = tenant {
                admitted += self.send(tenant, 1).await;
            }
            self.clock.advance(10);
        }
        self.limiter.renew(&self.lease, 1).await;
        admitted
    }
}

#[tokio::test]
async fn a_busy_tenant_takes_a_squatters_slot_within_two_renewals_and_gets_its_leased_rate() {
    let global = RedisServer::start().expect("redis-server starts");
    let region = region(&global).await;
    let junk: Vec<Identity> = (0..3)
        .map(|i| Identity::value(&format!("junk-{i}")))
        .collect();
    let acme = Identity::value("acme");
    // The junk identities are turned away first (26 is more than their
    // floor of 25) and take every slot.
    for j in &junk {
        assert!(!region.check(j, 26).await);
    }
    region.limiter.renew(&region.lease, 1).await;
    assert_eq!(region.lease.identities(), 3);
    // Two periods for the junk to settle, the tenant quiet.
    for _ in 0..2 {
        region.period(&junk, None).await;
    }
    assert_eq!(region.lease.units(&junk[0], region.clock_ms()), 75);
    // The tenant asks 50 a period. Its first period on the floor (its 25,
    // then 12.5 a period, the refill over 490 ms); its demand counts from
    // its first rejection (25 of the 50), not more than twice junk-0's 13,
    // so junk-0 keeps the slot.
    let mut admitted = vec![region.period(&junk, Some(&acme)).await];
    assert_eq!(region.lease.units(&acme, region.clock_ms()), 25);
    // A whole period of 50 > 2 × 13: it takes junk-0's slot and is granted
    // the whole spare at that renewal.
    admitted.push(region.period(&junk, Some(&acme)).await);
    assert_eq!(region.lease.units(&acme, region.clock_ms()), 75);
    assert_eq!(region.lease.units(&junk[0], region.clock_ms()), 25);
    assert_eq!(region.lease.identities(), 3);
    // Its leased rate from then on: 75 a second, 37.5 a period.
    for _ in 0..4 {
        admitted.push(region.period(&junk, Some(&acme)).await);
    }
    assert_eq!(admitted, [37, 12, 38, 37, 38, 37]);
    assert_eq!(
        admitted[2..].iter().sum::<u64>(),
        150,
        "75 a second over the 2 s after its slot: its leased share (floor: 25)"
    );
}

impl Region {
    fn clock_ms(&self) -> u64 {
        tollgate_core::Clock::monotonic_ms(&*self.clock)
    }
}
