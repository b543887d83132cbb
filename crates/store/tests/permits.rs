//! Concurrency permits on every store, one suite run against the memory
//! store, standalone Redis and a Redis Cluster at given times: at most N
//! held, a release frees one at once and only once, a lease ends a permit
//! its holder never released, a batch with a rate is all or nothing, and
//! a retry under one request id is answered with the same permit. Then
//! what Redis keeps: one sorted set an identity, scored by expiry, with a
//! TTL.

mod redis_support;

use std::sync::Arc;

use redis_support::Topology;
use tollgate_core::{
    Decision, Identity, Limits, ManualClock, PermitId, Permits, Policy, Released, Window,
};
use tollgate_store::{
    Check, MemoryStore, MemoryStoreConfig, RedisStore, Replay, RequestDigest, RequestId, Retried,
    Retry, Store,
};

const T0: u64 = 1_700_000_000_000;

/// A store decided at given times.
trait Subject {
    async fn decide(&self, checks: &[Check<'_>], t_ms: u64) -> Vec<Decision>;
    async fn once(&self, checks: &[Check<'_>], retry: Retry<'_>, t_ms: u64) -> Retried;
    async fn release(&self, policy: &Policy, who: &Identity, permit: PermitId, t: u64) -> Released;

    async fn one(&self, check: Check<'_>, t_ms: u64) -> Decision {
        self.decide(&[check], t_ms).await.remove(0)
    }
}

struct Memory {
    clock: Arc<ManualClock>,
    store: MemoryStore,
}

impl Subject for Memory {
    async fn decide(&self, checks: &[Check<'_>], t_ms: u64) -> Vec<Decision> {
        self.clock.set(t_ms);
        self.store.decide_all_now(checks).expect("room")
    }
    async fn once(&self, checks: &[Check<'_>], retry: Retry<'_>, t_ms: u64) -> Retried {
        self.clock.set(t_ms);
        self.store.decide_once_now(checks, retry).expect("room")
    }
    async fn release(&self, policy: &Policy, who: &Identity, permit: PermitId, t: u64) -> Released {
        self.clock.set(t);
        self.store.release(policy, who, permit)
    }
}

impl Subject for RedisStore {
    async fn decide(&self, checks: &[Check<'_>], t_ms: u64) -> Vec<Decision> {
        match checks {
            [one] => vec![self.decide_at(*one, t_ms).await.expect("redis decides")],
            _ => self
                .decide_all_at(checks, t_ms)
                .await
                .expect("redis decides"),
        }
    }
    async fn once(&self, checks: &[Check<'_>], retry: Retry<'_>, t_ms: u64) -> Retried {
        self.decide_once_at(checks, retry, t_ms)
            .await
            .expect("redis decides")
    }
    async fn release(&self, policy: &Policy, who: &Identity, permit: PermitId, t: u64) -> Released {
        self.release_at(policy, who, permit, t)
            .await
            .expect("redis releases")
    }
}

fn permits(name: &str, limit: u64, lease_ms: u64) -> Policy {
    Policy::new(
        name,
        Limits::Concurrency(Permits::new(limit, lease_ms).expect("valid")),
    )
}

fn check<'a>(policy: &'a Policy, identity: &'a Identity, cost: u64) -> Check<'a> {
    Check {
        policy,
        identity,
        cost,
    }
}

fn permit(d: &Decision) -> PermitId {
    d.permit.expect("an admitted acquire holds a permit")
}

async fn at_most_the_limit_is_held_and_a_release_frees_one_once(s: &impl Subject, tag: &str) {
    let policy = permits(&format!("{tag}-held"), 3, 30_000);
    let acme = Identity::value("acme");
    let mut held = Vec::new();
    for (i, remaining) in [2, 1, 0].into_iter().enumerate() {
        let d = s.one(check(&policy, &acme, 1), T0 + i as u64 * 1_000).await;
        assert_eq!(
            (d.allowed, d.limit, d.remaining),
            (true, 3, remaining),
            "{tag}"
        );
        assert_eq!(d.reset_after_ms, 30_000, "{tag}");
        held.push(permit(&d));
    }
    let refused = s.one(check(&policy, &acme, 1), T0 + 2_500).await;
    assert!(!refused.allowed, "{tag}");
    assert_eq!(refused.permit, None, "{tag}");
    // The first lease ends at T0 + 30 000: an upper bound on the wait.
    assert_eq!(refused.retry_after_ms, Some(27_500), "{tag}");
    assert_eq!(refused.reset_after_ms, 29_500, "{tag}");
    let other = Identity::value("globex");
    assert!(
        s.one(check(&policy, &other, 1), T0 + 2_500).await.allowed,
        "{tag}"
    );

    let freed = s.release(&policy, &acme, held[1], T0 + 3_000).await;
    let twice = s.release(&policy, &acme, held[1], T0 + 3_000).await;
    assert_eq!(
        (freed, twice),
        (Released::Freed, Released::Unknown),
        "{tag}"
    );
    let again = s.one(check(&policy, &acme, 1), T0 + 3_000).await;
    assert_eq!((again.allowed, again.remaining), (true, 0), "{tag}");
    assert_ne!(
        permit(&again),
        held[1],
        "{tag}: a fresh permit, not the freed one"
    );
}

async fn a_permit_never_released_is_free_when_its_lease_ends(s: &impl Subject, tag: &str) {
    let policy = permits(&format!("{tag}-lease"), 1, 5_000);
    let acme = Identity::value("acme");
    let first = s.one(check(&policy, &acme, 1), T0).await;
    let d = s.one(check(&policy, &acme, 1), T0 + 4_999).await;
    assert_eq!((d.allowed, d.retry_after_ms), (false, Some(1)), "{tag}");
    let late = s.release(&policy, &acme, permit(&first), T0 + 5_000).await;
    assert_eq!(late, Released::Expired, "{tag}");
    assert!(
        s.one(check(&policy, &acme, 1), T0 + 5_000).await.allowed,
        "{tag}"
    );
    let gone = s.release(&policy, &acme, permit(&first), T0 + 5_001).await;
    assert_eq!(gone, Released::Unknown, "{tag}");
}

async fn a_look_holds_nothing_and_a_cost_above_one_never_fits(s: &impl Subject, tag: &str) {
    let policy = permits(&format!("{tag}-look"), 3, 5_000);
    let acme = Identity::value("acme");
    let look = s.one(check(&policy, &acme, 0), T0).await;
    assert_eq!(
        (look.allowed, look.remaining, look.permit),
        (true, 3, None),
        "{tag}"
    );
    let two = s.one(check(&policy, &acme, 2), T0).await;
    assert_eq!(
        (two.allowed, two.retry_after_ms, two.permit),
        (false, None, None),
        "{tag}"
    );
}

async fn a_batch_with_a_rate_holds_its_permit_only_when_all_admit(s: &impl Subject, tag: &str) {
    let reports = permits(&format!("{tag}-batch"), 2, 10_000);
    let rate = Policy::new(
        format!("{tag}-writes"),
        Limits::FixedWindow(Window::new(1, 3_600_000).expect("valid")),
    );
    let acme = Identity::value("acme");
    let batch = [check(&reports, &acme, 1), check(&rate, &acme, 1)];
    let first = s.decide(&batch, T0).await;
    assert!(first.iter().all(|d| d.allowed), "{tag}");
    assert!(first[0].permit.is_some(), "{tag}");
    assert_eq!(first[1].permit, None, "{tag}");
    // The rate refuses: nothing is held, the permit count stands.
    let second = s.decide(&batch, T0 + 1).await;
    let allowed: Vec<bool> = second.iter().map(|d| d.allowed).collect();
    assert_eq!(allowed, [true, false], "{tag}");
    assert_eq!((second[0].permit, second[0].remaining), (None, 1), "{tag}");
    assert_eq!(
        s.one(check(&reports, &acme, 0), T0 + 2).await.remaining,
        1,
        "{tag}"
    );
}

async fn a_retry_under_one_request_id_gets_the_same_permit(s: &impl Subject, tag: &str) {
    let policy = permits(&format!("{tag}-retry"), 3, 10_000);
    let acme = Identity::value("acme");
    let checks = [check(&policy, &acme, 1)];
    let id = RequestId::new(&format!("{tag}-r-1")).expect("valid");
    let retry = Retry {
        id: &id,
        request: RequestDigest::of(&checks, None),
        window_ms: 60_000,
        max_ids: 64,
    };
    let first = s.once(&checks, retry, T0).await;
    let again = s.once(&checks, retry, T0 + 10).await;
    assert_eq!(
        (first.replay, again.replay),
        (Replay::Fresh, Replay::Replayed),
        "{tag}"
    );
    assert_eq!(
        again.decisions[0].permit, first.decisions[0].permit,
        "{tag}"
    );
    assert!(again.decisions[0].allowed, "{tag}");
    let look = s.one(check(&policy, &acme, 0), T0 + 20).await;
    assert_eq!(look.remaining, 2, "{tag}: one permit taken, not two");
    let held = permit(&first.decisions[0]);
    assert_eq!(
        s.release(&policy, &acme, held, T0 + 30).await,
        Released::Freed,
        "{tag}"
    );
    // Another request id is another permit.
    let other = RequestId::new(&format!("{tag}-r-2")).expect("valid");
    let second = s
        .once(
            &checks,
            Retry {
                id: &other,
                ..retry
            },
            T0 + 40,
        )
        .await;
    assert_ne!(
        second.decisions[0].permit, first.decisions[0].permit,
        "{tag}"
    );
}

async fn suite(s: &impl Subject, tag: &str) {
    at_most_the_limit_is_held_and_a_release_frees_one_once(s, tag).await;
    a_permit_never_released_is_free_when_its_lease_ends(s, tag).await;
    a_look_holds_nothing_and_a_cost_above_one_never_fits(s, tag).await;
    a_batch_with_a_rate_holds_its_permit_only_when_all_admit(s, tag).await;
    a_retry_under_one_request_id_gets_the_same_permit(s, tag).await;
}

#[tokio::test]
async fn the_memory_store_holds_permits() {
    let clock = Arc::new(ManualClock::new(T0));
    let memory = Memory {
        store: MemoryStore::new(clock.clone(), MemoryStoreConfig::default()),
        clock,
    };
    suite(&memory, "memory").await;
    assert_eq!(
        memory
            .store
            .decide_now(check(&permits("fresh", 1, 1_000), &Identity::value("x"), 0))
            .map(|d| d.permit),
        Ok(None)
    );
}

#[tokio::test]
async fn standalone_redis_holds_permits() {
    let topology = Topology::standalone();
    suite(&topology.store().await, "standalone").await;
}

#[tokio::test]
async fn a_redis_cluster_holds_permits() {
    let topology = Topology::cluster();
    suite(&topology.store().await, "cluster").await;
}

#[tokio::test]
async fn redis_keeps_one_sorted_set_an_identity_scored_by_expiry_with_a_ttl() {
    let topology = Topology::standalone();
    let store = topology.store().await;
    let policy = permits("layout", 3, 20_000);
    let acme = Identity::value("acme");
    // On Redis's own clock: the TTL follows the last lease.
    let a = Store::decide(&store, check(&policy, &acme, 1))
        .await
        .expect("decides");
    let key = String::from_utf8(store.key(&policy, &acme)).expect("a text key");
    let prefix = topology.config().prefix;
    assert!(
        key.starts_with(&format!("{prefix}:layout:concurrency:{{")),
        "{key}"
    );
    let port = topology.ports()[0];
    assert_eq!(
        tollgate_testkit::cli(port, &["type", &key])
            .expect("type")
            .trim(),
        "zset"
    );
    let members = tollgate_testkit::cli(port, &["zrange", &key, "0", "-1"]).expect("zrange");
    assert_eq!(members.trim(), permit(&a).to_string());
    let pttl: i64 = tollgate_testkit::cli(port, &["pttl", &key])
        .expect("pttl")
        .trim()
        .parse()
        .expect("an integer");
    let margin = topology.config().ttl_margin_ms as i64;
    assert!(
        pttl > 20_000 && pttl <= 20_000 + margin,
        "the lease plus the margin {margin}, got {pttl}"
    );
    // The last release takes the key with it.
    assert_eq!(
        store.release(&policy, &acme, permit(&a)).await,
        Ok(Released::Freed)
    );
    assert_eq!(topology.key_count(), 0);
}
