//! A leased policy's ledger (crates/store/lua/lease.lua) on a real
//! redis-server, on Redis's own clock: each safety rule and the
//! rebalancing rule per identity, the batched call, and the invariant
//! every answer keeps under random asks.

mod redis_support;

use std::time::Duration;

use redis_support::{Rng, Topology};
use tollgate_core::Identity;
use tollgate_store::{
    LeaseAsk, LeaseGrant, LeaseLimit, LeaseWant, MAX_IDENTITIES_A_CALL, RedisStore, StoreError,
    ledger_epoch_key, ledger_key,
};

const SPARE: u64 = 80;

fn ask<'a>(
    region: &'a str,
    instance: &'a str,
    wants: &'a [LeaseWant<'a>],
    term_ms: u64,
) -> LeaseAsk<'a> {
    LeaseAsk {
        policy: "api",
        region,
        instance,
        spare: SPARE,
        term_ms,
        rest_ms: term_ms / 2,
        wants,
    }
}

/// One identity's renewal ("tenant-1" unless named): its grant and why.
async fn lease_for(
    store: &RedisStore,
    who: &str,
    region: &str,
    instance: &str,
    demand: u64,
    term_ms: u64,
) -> LeaseGrant {
    let identity = Identity::value(who);
    let wants = [LeaseWant {
        identity: &identity,
        demand,
    }];
    let grants = store
        .lease(&ask(region, instance, &wants, term_ms))
        .await
        .expect("the ledger answers");
    assert_eq!(grants.len(), 1);
    grants[0]
}

async fn lease(
    store: &RedisStore,
    region: &str,
    instance: &str,
    demand: u64,
    term_ms: u64,
) -> (u64, LeaseLimit) {
    let LeaseGrant { units, limit, .. } =
        lease_for(store, "tenant-1", region, instance, demand, term_ms).await;
    (units, limit)
}

/// Past a new ledger's wait (a term and a rest), on Redis's clock.
async fn past_the_wait(term_ms: u64) {
    tokio::time::sleep(Duration::from_millis(term_ms + term_ms / 2 + 50)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_ledger_grants_nothing_for_a_term_and_a_rest_then_shares_by_demand() {
    let topology = Topology::standalone();
    let store = topology.store().await;
    const TERM: u64 = 2_000;
    assert_eq!(
        lease(&store, "eu", "e1", 30, TERM).await,
        (0, LeaseLimit::NewLedger)
    );
    assert_eq!(
        lease(&store, "us", "u1", 10, TERM).await,
        (0, LeaseLimit::NewLedger)
    );
    past_the_wait(TERM).await;
    // Demand said within the last term: eu 30, us 10 (their new reports).
    assert_eq!(
        lease(&store, "us", "u1", 10, TERM).await,
        // Its first report aged out: 10 of 10 + eu's 30 is stale too, so
        // us alone has demand and the whole spare is its target.
        (SPARE, LeaseLimit::Target)
    );
    assert_eq!(
        lease(&store, "eu", "e1", 30, TERM).await,
        // 80 × 30 / 40 = 60, but us holds 80 for its term: nothing is free.
        (0, LeaseLimit::HeldByOthers)
    );
    // us renews by demand: 80 × 10 / 40 = 20; the 80 it held stays its own
    // until its old grant ends and rests, so eu still gets nothing.
    assert_eq!(
        lease(&store, "us", "u1", 10, TERM).await,
        (20, LeaseLimit::Target)
    );
    assert_eq!(
        lease(&store, "eu", "e1", 30, TERM).await,
        (0, LeaseLimit::HeldByOthers)
    );
    // Both renew every quarter of a term, as instances do. Once us's old
    // grant has ended and rested (a term and a rest after it was granted),
    // eu gets its target.
    for _ in 0..7 {
        tokio::time::sleep(Duration::from_millis(TERM / 4)).await;
        lease(&store, "us", "u1", 10, TERM).await;
        lease(&store, "eu", "e1", 30, TERM).await;
    }
    assert_eq!(
        lease(&store, "us", "u1", 10, TERM).await,
        (20, LeaseLimit::Target)
    );
    assert_eq!(
        lease(&store, "eu", "e1", 30, TERM).await,
        (60, LeaseLimit::Target)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_takes_its_own_units_back_at_once_but_anothers_only_after_they_rest() {
    let topology = Topology::standalone();
    let store = topology.store().await;
    const TERM: u64 = 2_000;
    lease(&store, "eu", "e1", 10, TERM).await;
    past_the_wait(TERM).await;
    assert_eq!(
        lease(&store, "eu", "e1", 10, TERM).await,
        (SPARE, LeaseLimit::Target)
    );
    // eu's demand falls to nothing: it keeps nothing, its 80 rests.
    assert_eq!(
        lease(&store, "eu", "e1", 0, TERM).await,
        (0, LeaseLimit::Target)
    );
    // us wants it all, but it is eu's until it has rested.
    assert_eq!(
        lease(&store, "us", "u1", 50, TERM).await,
        (0, LeaseLimit::HeldByOthers)
    );
    // eu wants it back: its own units come back at once (eu 10, us 50 of
    // demand: 80 × 10 / 60 = 13); nobody holds the other 67 — us's target
    // is waiting for eu's resting units, and the ledger says so.
    let grant = lease_for(&store, "tenant-1", "eu", "e1", 10, TERM).await;
    assert_eq!(
        (grant.units, grant.target, grant.limit, grant.unleased),
        (13, 13, LeaseLimit::Target, 67)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_lost_grants_nothing_for_a_term_and_a_rest_and_expires_on_its_own() {
    let topology = Topology::standalone();
    let store = topology.store().await;
    const TERM: u64 = 1_000;
    lease(&store, "eu", "e1", 10, TERM).await;
    past_the_wait(TERM).await;
    assert_eq!(
        lease(&store, "eu", "e1", 10, TERM).await,
        (SPARE, LeaseLimit::Target)
    );
    let Topology::Standalone(server) = &topology else {
        unreachable!("standalone")
    };
    let key = String::from_utf8(ledger_key("tollgate", "api", &Identity::value("tenant-1")))
        .expect("utf-8");
    let epoch = ledger_epoch_key("tollgate");
    let pttl: i64 = server
        .cli(&["pttl", &key])
        .expect("pttl")
        .trim()
        .parse()
        .expect("int");
    // Four terms and rests: it outlives every grant and hold it records.
    assert!(pttl > 0 && pttl <= 6_000, "ledger PTTL {pttl}");
    // The entry alone gone (an identity idle past its TTL): the epoch
    // vouches that nothing of it was in use, so it is granted at once.
    server.cli(&["del", &key]).expect("del");
    assert_eq!(
        lease(&store, "eu", "e1", 10, TERM).await,
        (SPARE, LeaseLimit::Target)
    );
    let epoch_pttl: i64 = server
        .cli(&["pttl", &epoch])
        .expect("pttl")
        .trim()
        .parse()
        .expect("int");
    assert!(
        epoch_pttl >= pttl - 100,
        "the epoch outlives its entries: {epoch_pttl} < {pttl}"
    );
    // The whole ledger lost (the epoch too): nothing for a term and a rest.
    server.cli(&["del", &key, &epoch]).expect("del");
    assert_eq!(
        lease(&store, "eu", "e1", 10, TERM).await,
        (0, LeaseLimit::NewLedger)
    );
}

/// What each region's instances were granted, as the instances see it: a
/// grant is spendable from when it was asked for until a term later, and
/// rests a rest more. At every moment the regions' spendable-or-resting
/// units (the most of each region's grants) sum to at most the spare.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_sequence_of_asks_leases_more_than_the_spare() {
    use tokio::time::Instant;
    let topology = Topology::standalone();
    let store = topology.store().await;
    const TERM: u64 = 300;
    let rest = TERM / 2;
    let instances = [("eu", "e1"), ("eu", "e2"), ("us", "u1"), ("ap", "a1")];
    let mut rng = Rng::new(0x1ea5e);
    // (region, asked at, units)
    let mut grants: Vec<(&str, Instant, u64)> = Vec::new();
    let mut granted_total = 0;
    for _ in 0..300 {
        let (region, instance) = *rng.pick(&instances);
        let demand = rng.below(40);
        let sent = Instant::now();
        let (units, _) = lease(&store, region, instance, demand, TERM).await;
        granted_total += units;
        grants.push((region, sent, units));
        let now = Instant::now();
        grants.retain(|(_, at, _)| now < *at + Duration::from_millis(TERM + rest));
        let held: u64 = ["eu", "us", "ap"]
            .iter()
            .map(|r| {
                grants
                    .iter()
                    .filter(|(g, _, _)| g == r)
                    .map(|(_, _, u)| *u)
                    .max()
                    .unwrap_or(0)
            })
            .sum();
        assert!(held <= SPARE, "regions hold {held} > {SPARE}: {grants:?}");
        tokio::time::sleep(Duration::from_millis(rng.below(15))).await;
    }
    assert!(granted_total > 0, "the ledger must have granted something");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_in_a_cluster_is_one_slot_and_keeps_the_same_rules() {
    let topology = Topology::cluster();
    let store = topology.store().await;
    const TERM: u64 = 1_000;
    assert_eq!(
        lease(&store, "eu", "e1", 10, TERM).await,
        (0, LeaseLimit::NewLedger)
    );
    past_the_wait(TERM).await;
    assert_eq!(
        lease(&store, "us", "u1", 30, TERM).await,
        (SPARE, LeaseLimit::Target)
    );
    assert_eq!(
        lease(&store, "eu", "e1", 10, TERM).await,
        (0, LeaseLimit::HeldByOthers)
    );
    let mut ledgers: Vec<String> = topology
        .keys_with_pttl()
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    let entry = String::from_utf8(ledger_key("tollgate", "api", &Identity::value("tenant-1")))
        .expect("utf-8");
    ledgers.sort();
    assert_eq!(ledgers, [ledger_epoch_key("tollgate"), entry]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_identity_leases_its_own_spare_whoever_is_busy_elsewhere() {
    let topology = Topology::standalone();
    let store = topology.store().await;
    const TERM: u64 = 1_000;
    lease_for(&store, "a", "eu", "e1", 30, TERM).await;
    past_the_wait(TERM).await;
    // a is busy in eu only, b in us only: each gets its whole spare.
    assert_eq!(
        lease_for(&store, "a", "eu", "e1", 30, TERM).await.units,
        SPARE
    );
    assert_eq!(
        lease_for(&store, "b", "us", "u1", 30, TERM).await.units,
        SPARE
    );
    // A third identity new to an old ledger is granted at once, and a
    // second region asking for a gets nothing: eu holds all of a's spare.
    assert_eq!(
        lease_for(&store, "c", "us", "u1", 5, TERM).await.units,
        SPARE
    );
    let a_in_us = lease_for(&store, "a", "us", "u1", 30, TERM).await;
    assert_eq!(
        (a_in_us.units, a_in_us.target, a_in_us.limit),
        (0, 40, LeaseLimit::HeldByOthers)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_renews_many_identities_in_order_and_refuses_more_than_its_bound() {
    let topology = Topology::standalone();
    let store = topology.store().await;
    const TERM: u64 = 1_000;
    lease_for(&store, "warm-up", "eu", "e1", 1, TERM).await;
    past_the_wait(TERM).await;
    // b is held by us, so eu's batch gets a's whole spare, none of b's.
    lease_for(&store, "b", "us", "u1", 10, TERM).await;
    let (a, b) = (Identity::value("a"), Identity::value("b"));
    let wants = [
        LeaseWant {
            identity: &a,
            demand: 10,
        },
        LeaseWant {
            identity: &b,
            demand: 10,
        },
    ];
    let grants = store
        .lease(&ask("eu", "e1", &wants, TERM))
        .await
        .expect("answers");
    let got: Vec<(u64, LeaseLimit)> = grants.iter().map(|g| (g.units, g.limit)).collect();
    assert_eq!(
        got,
        [(SPARE, LeaseLimit::Target), (0, LeaseLimit::HeldByOthers)]
    );
    assert_eq!(
        grants[0].granted_at_ms, grants[1].granted_at_ms,
        "one call, one clock"
    );
    let many: Vec<Identity> = (0..=MAX_IDENTITIES_A_CALL)
        .map(|i| Identity::value(&format!("t{i}")))
        .collect();
    let wants: Vec<LeaseWant<'_>> = many
        .iter()
        .map(|identity| LeaseWant {
            identity,
            demand: 1,
        })
        .collect();
    let refused = store.lease(&ask("eu", "e1", &wants, TERM)).await;
    assert!(
        matches!(&refused, Err(StoreError::Config(m)) if m == "a lease renewal carries at most 100 identities, got 101"),
        "{refused:?}"
    );
    let Topology::Standalone(server) = &topology else {
        unreachable!("standalone")
    };
    assert_eq!(
        server
            .cli(&[
                "exists",
                &String::from_utf8(ledger_key("tollgate", "api", &Identity::value("t0")))
                    .expect("utf-8")
            ])
            .expect("exists")
            .trim(),
        "0",
        "a refused call changes nothing"
    );
}
