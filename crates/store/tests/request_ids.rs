//! A retry is charged once: request ids on every store. One suite, run
//! against the memory store, standalone Redis and a Redis Cluster, at given
//! times; then real-time races of one id across two Redis stores.

mod redis_support;

use std::sync::Arc;

use redis_support::Topology;
use tollgate_core::{Decision, Identity, Limits, ManualClock, Policy, Rate, Window};
use tollgate_store::{
    Check, MAX_REPLAYS, MemoryStore, MemoryStoreConfig, RedisStore, Replay, RequestDigest,
    RequestId, Retried, Retry, Store,
};

const T0: u64 = 1_700_000_000_000;
const WINDOW_MS: u64 = 60_000;

/// A store decided at given times.
trait Subject {
    async fn once(&self, checks: &[Check<'_>], retry: Retry<'_>, t_ms: u64) -> Retried;
    async fn plain(&self, checks: &[Check<'_>], t_ms: u64) -> Vec<Decision>;

    /// `checks` as a whole request under `id`.
    async fn sent(&self, checks: &[Check<'_>], id: &RequestId, t_ms: u64) -> Retried {
        self.once(checks, retry(id, checks), t_ms).await
    }
}

struct Memory {
    clock: Arc<ManualClock>,
    store: MemoryStore,
}

impl Memory {
    fn new(config: MemoryStoreConfig) -> Self {
        let clock = Arc::new(ManualClock::new(T0));
        Self {
            store: MemoryStore::new(clock.clone(), config),
            clock,
        }
    }
}

impl Subject for Memory {
    async fn once(&self, checks: &[Check<'_>], retry: Retry<'_>, t_ms: u64) -> Retried {
        self.clock.set(t_ms);
        self.store
            .decide_once_now(checks, retry)
            .expect("the store has room")
    }
    async fn plain(&self, checks: &[Check<'_>], t_ms: u64) -> Vec<Decision> {
        self.clock.set(t_ms);
        self.store
            .decide_all_now(checks)
            .expect("the store has room")
    }
}

impl Subject for RedisStore {
    async fn once(&self, checks: &[Check<'_>], retry: Retry<'_>, t_ms: u64) -> Retried {
        self.decide_once_at(checks, retry, t_ms)
            .await
            .expect("redis decides")
    }
    async fn plain(&self, checks: &[Check<'_>], t_ms: u64) -> Vec<Decision> {
        self.decide_all_at(checks, t_ms)
            .await
            .expect("redis decides")
    }
}

fn bucket(name: &str, capacity: u64) -> Policy {
    // One token a minute: nothing refills within a test's span.
    Policy::new(
        name,
        Limits::TokenBucket(Rate::new(capacity, 1, 60_000).expect("valid rate")),
    )
}

fn window(name: &str, limit: u64) -> Policy {
    Policy::new(
        name,
        Limits::FixedWindow(Window::new(limit, 3_600_000).expect("valid window")),
    )
}

fn id(text: &str) -> RequestId {
    RequestId::new(text).expect("a valid id")
}

/// `id` sent with `checks` (the whole request, no shape beside them).
fn retry<'a>(id: &'a RequestId, checks: &[Check<'_>]) -> Retry<'a> {
    Retry {
        id,
        request: RequestDigest::of(checks, None),
        window_ms: WINDOW_MS,
        max_ids: 64,
    }
}

fn check<'a>(policy: &'a Policy, identity: &'a Identity, cost: u64) -> Check<'a> {
    Check {
        policy,
        identity,
        cost,
    }
}

/// (allowed, remaining) of each decision, and the replay.
fn seen(r: &Retried) -> (Vec<(bool, i64)>, Replay) {
    (
        r.decisions
            .iter()
            .map(|d| (d.allowed, d.remaining))
            .collect(),
        r.replay.clone(),
    )
}

async fn the_last_token_is_spent_once(s: &impl Subject, tag: &str) {
    let policy = bucket(&format!("last-{tag}"), 2);
    let who = Identity::value("tenant-a");
    let (first, second) = (id("attempt-1"), id("attempt-2"));
    let spend = [check(&policy, &who, 1)];
    // One token left after this.
    assert_eq!(s.plain(&spend, T0).await[0].remaining, 1);
    let admitted = s.once(&spend, retry(&first, &spend), T0 + 10).await;
    assert_eq!(seen(&admitted), (vec![(true, 0)], Replay::Fresh));
    let again = s.once(&spend, retry(&first, &spend), T0 + 20).await;
    assert_eq!(seen(&again), (vec![(true, 0)], Replay::Replayed));
    assert_eq!(again.decisions[0].retry_after_ms, Some(0));
    let new = s.once(&spend, retry(&second, &spend), T0 + 30).await;
    assert_eq!(seen(&new), (vec![(false, 0)], Replay::Fresh));
    assert!(new.decisions[0].retry_after_ms.is_some_and(|r| r > 0));
}

async fn another_cost_under_one_id_is_refused(s: &impl Subject, tag: &str) {
    let policy = bucket(&format!("cost-{tag}"), 10);
    let who = Identity::value("tenant-a");
    let key = id("k");
    let three = s.sent(&[check(&policy, &who, 3)], &key, T0).await;
    assert_eq!(seen(&three), (vec![(true, 7)], Replay::Fresh));
    let five = s.sent(&[check(&policy, &who, 5)], &key, T0 + 1).await;
    assert_eq!(seen(&five), (vec![], Replay::Mismatch));
    // Nothing was consumed by the refusal.
    assert_eq!(
        s.plain(&[check(&policy, &who, 0)], T0 + 2).await[0].remaining,
        7
    );
}

async fn an_id_is_forgotten_after_its_window(s: &impl Subject, tag: &str) {
    let policy = window(&format!("expiry-{tag}"), 10);
    let who = Identity::value("tenant-a");
    let key = id("k");
    let spend = [check(&policy, &who, 1)];
    s.once(&spend, retry(&key, &spend), T0).await;
    let inside = s
        .once(&spend, retry(&key, &spend), T0 + WINDOW_MS - 1)
        .await;
    assert_eq!(seen(&inside), (vec![(true, 9)], Replay::Replayed));
    let after = s.once(&spend, retry(&key, &spend), T0 + WINDOW_MS).await;
    assert_eq!(seen(&after), (vec![(true, 8)], Replay::Fresh));
}

async fn ids_per_identity_are_bounded_oldest_first(s: &impl Subject, tag: &str) {
    let policy = window(&format!("bound-{tag}"), 100);
    let who = Identity::value("tenant-a");
    let spend = [check(&policy, &who, 1)];
    let ids: Vec<RequestId> = (0..3).map(|i| id(&format!("id-{i}"))).collect();
    let two = |id| Retry {
        max_ids: 2,
        ..retry(id, &spend)
    };
    for (i, key) in ids.iter().enumerate() {
        s.once(&spend, two(key), T0 + i as u64).await;
    }
    // id-0 was the oldest of three under a bound of two: charged again.
    let oldest = s.once(&spend, two(&ids[0]), T0 + 10).await;
    assert_eq!(seen(&oldest), (vec![(true, 96)], Replay::Fresh));
    // id-0's new record pushed id-1 out; id-2 is still known.
    let newest = s.once(&spend, two(&ids[2]), T0 + 11).await;
    assert_eq!(seen(&newest), (vec![(true, 96)], Replay::Replayed));
}

async fn an_id_belongs_to_one_identity(s: &impl Subject, tag: &str) {
    let policy = window(&format!("scope-{tag}"), 10);
    let (a, b) = (Identity::value("tenant-a"), Identity::value("tenant-b"));
    let key = id("shared-id");
    s.sent(&[check(&policy, &a, 1)], &key, T0).await;
    let other = s.sent(&[check(&policy, &b, 4)], &key, T0 + 1).await;
    assert_eq!(seen(&other), (vec![(true, 6)], Replay::Fresh));
    let own = s.sent(&[check(&policy, &a, 1)], &key, T0 + 2).await;
    assert_eq!(seen(&own), (vec![(true, 9)], Replay::Replayed));
}

async fn a_batch_replays_whole(s: &impl Subject, tag: &str) {
    let wide = window(&format!("wide-{tag}"), 10);
    let narrow = bucket(&format!("narrow-{tag}"), 3);
    let (a, b) = (Identity::value("tenant-a"), Identity::value("user-7"));
    let key = id("batch");
    let batch = [check(&wide, &a, 2), check(&narrow, &b, 1)];
    let first = s.once(&batch, retry(&key, &batch), T0).await;
    assert_eq!(seen(&first), (vec![(true, 8), (true, 2)], Replay::Fresh));
    let again = s.once(&batch, retry(&key, &batch), T0 + 5).await;
    assert_eq!(seen(&again), (vec![(true, 8), (true, 2)], Replay::Replayed));
    let other = [check(&wide, &a, 2), check(&narrow, &b, 2)];
    let refused = s.once(&other, retry(&key, &other), T0 + 6).await;
    assert_eq!(refused.replay, Replay::Mismatch);
    let peek = [check(&wide, &a, 0), check(&narrow, &b, 0)];
    let left: Vec<i64> = s
        .plain(&peek, T0 + 7)
        .await
        .iter()
        .map(|d| d.remaining)
        .collect();
    assert_eq!(left, vec![8, 2]);
}

async fn a_rejected_attempt_is_not_recorded(s: &impl Subject, tag: &str) {
    // Two tokens, one back every minute.
    let policy = bucket(&format!("rejected-{tag}"), 2);
    let who = Identity::value("tenant-a");
    let key = id("k");
    let spend = [check(&policy, &who, 2)];
    s.plain(&[check(&policy, &who, 1)], T0).await;
    let rejected = s.once(&spend, retry(&key, &spend), T0 + 1).await;
    assert_eq!(seen(&rejected), (vec![(false, 1)], Replay::Fresh));
    let wait = rejected.decisions[0].retry_after_ms.expect("a finite wait");
    // Waiting as told admits the same request under the same id.
    let retried = s.once(&spend, retry(&key, &spend), T0 + 1 + wait).await;
    assert_eq!(seen(&retried), (vec![(true, 0)], Replay::Fresh));
}

/// The attack: one id recorded for a batch, then sent with the same first
/// check and another identity in the second check. Before, only the first
/// check's record and the joined costs (`1,1`) were compared, so the other
/// identity was admitted from the record without being charged.
async fn one_id_with_another_second_identity_is_refused(s: &impl Subject, tag: &str) {
    let api = window(&format!("api-{tag}"), 10);
    let login = bucket(&format!("login-{tag}"), 3);
    let (addr, alice, mallory) = (
        Identity::value("198.51.100.7"),
        Identity::value("alice"),
        Identity::value("mallory"),
    );
    let key = id("reused");
    let first = s
        .sent(&[check(&api, &addr, 1), check(&login, &alice, 1)], &key, T0)
        .await;
    assert_eq!(seen(&first), (vec![(true, 9), (true, 2)], Replay::Fresh));
    let other = [check(&api, &addr, 1), check(&login, &mallory, 1)];
    let refused = s.sent(&other, &key, T0 + 1).await;
    assert_eq!(seen(&refused), (vec![], Replay::Mismatch));
    // Nothing consumed by the refusal; mallory's login is untouched.
    let peek = [check(&api, &addr, 0), check(&login, &mallory, 0)];
    let left: Vec<i64> = s
        .plain(&peek, T0 + 2)
        .await
        .iter()
        .map(|d| d.remaining)
        .collect();
    assert_eq!(left, vec![9, 3]);
}

/// The attack: an id recorded for one policy, then sent with a request
/// that matches that policy and another one (forward auth's `GET
/// /api/exports/x`, then a request matching `exports` and `login`).
async fn one_id_with_another_policy_set_is_refused(s: &impl Subject, tag: &str) {
    let exports = window(&format!("exports-{tag}"), 10);
    let login = bucket(&format!("login-set-{tag}"), 5);
    let addr = Identity::value("198.51.100.7");
    let key = id("reused");
    let one = s.sent(&[check(&exports, &addr, 1)], &key, T0).await;
    assert_eq!(seen(&one), (vec![(true, 9)], Replay::Fresh));
    let wider = [check(&exports, &addr, 1), check(&login, &addr, 1)];
    assert_eq!(
        seen(&s.sent(&wider, &key, T0 + 1).await),
        (vec![], Replay::Mismatch)
    );
    let peek = [check(&exports, &addr, 0), check(&login, &addr, 0)];
    let left: Vec<i64> = s
        .plain(&peek, T0 + 2)
        .await
        .iter()
        .map(|d| d.remaining)
        .collect();
    assert_eq!(left, vec![9, 5]);
    // The recorded request itself still replays.
    let again = s.sent(&[check(&exports, &addr, 1)], &key, T0 + 3).await;
    assert_eq!(seen(&again), (vec![(true, 9)], Replay::Replayed));
}

/// The attack: the same checks, but another request's shape (forward auth:
/// `GET /api/exports/x` recorded, `POST /login` sent with the same id).
async fn one_id_with_another_shape_is_refused(s: &impl Subject, tag: &str) {
    let shared = window(&format!("shape-{tag}"), 10);
    let addr = Identity::value("198.51.100.7");
    let key = id("reused");
    let spend = [check(&shared, &addr, 1)];
    let shaped = |shape| Retry {
        request: RequestDigest::of(&spend, Some(shape)),
        ..retry(&key, &spend)
    };
    let get = s.once(&spend, shaped("GET /api/exports/x"), T0).await;
    assert_eq!(seen(&get), (vec![(true, 9)], Replay::Fresh));
    let post = s.once(&spend, shaped("POST /login"), T0 + 1).await;
    assert_eq!(seen(&post), (vec![], Replay::Mismatch));
    // Without a shape (`/v1/check`) it is another request too.
    assert_eq!(
        seen(&s.sent(&spend, &key, T0 + 2).await),
        (vec![], Replay::Mismatch)
    );
    let again = s.once(&spend, shaped("GET /api/exports/x"), T0 + 3).await;
    assert_eq!(seen(&again), (vec![(true, 9)], Replay::Replayed));
}

/// A storm of retries under one id: each record answers `MAX_REPLAYS`
/// replays, then the id is charged as a new request (and recorded afresh
/// when admitted), so a limit of 2 admits 2 × (1 + 3) of 12 attempts, and
/// every attempt past the limit is rejected.
async fn one_record_answers_a_bounded_number_of_replays(s: &impl Subject, tag: &str) {
    let policy = window(&format!("storm-{tag}"), 2);
    let who = Identity::value("tenant-a");
    let storm = id("the-same-id");
    let spend = [check(&policy, &who, 1)];
    let mut seen_all = Vec::new();
    for n in 0..12 {
        let r = s.once(&spend, retry(&storm, &spend), T0 + n).await;
        seen_all.push((r.decisions[0].allowed, r.replay));
    }
    let (fresh, replayed) = ((true, Replay::Fresh), (true, Replay::Replayed));
    let rejected = (false, Replay::Fresh);
    assert_eq!(MAX_REPLAYS, 3);
    assert_eq!(
        seen_all,
        [
            fresh.clone(),
            replayed.clone(),
            replayed.clone(),
            replayed.clone(),
            fresh,
            replayed.clone(),
            replayed.clone(),
            replayed,
            rejected.clone(),
            rejected.clone(),
            rejected.clone(),
            rejected,
        ]
    );
}

async fn suite(s: &impl Subject, tag: &str) {
    one_record_answers_a_bounded_number_of_replays(s, tag).await;
    the_last_token_is_spent_once(s, tag).await;
    another_cost_under_one_id_is_refused(s, tag).await;
    an_id_is_forgotten_after_its_window(s, tag).await;
    ids_per_identity_are_bounded_oldest_first(s, tag).await;
    an_id_belongs_to_one_identity(s, tag).await;
    a_batch_replays_whole(s, tag).await;
    a_rejected_attempt_is_not_recorded(s, tag).await;
    one_id_with_another_second_identity_is_refused(s, tag).await;
    one_id_with_another_policy_set_is_refused(s, tag).await;
    one_id_with_another_shape_is_refused(s, tag).await;
}

#[tokio::test]
async fn the_memory_store_charges_a_retry_once() {
    suite(&Memory::new(MemoryStoreConfig::default()), "memory").await;
}

#[tokio::test]
async fn standalone_redis_charges_a_retry_once() {
    let topology = Topology::standalone();
    suite(&topology.store().await, "standalone").await;
}

#[tokio::test]
async fn a_redis_cluster_charges_a_retry_once() {
    let topology = Topology::cluster();
    suite(&topology.store().await, "cluster").await;
}

#[test]
fn memory_ids_count_toward_the_store_bound_and_go_before_any_state() {
    // One shard of four keys: one state and three ids fill it.
    let memory = Memory::new(MemoryStoreConfig {
        max_keys: 4,
        shards: 1,
    });
    memory.clock.set(T0);
    let policy = window("bounded", 100);
    let who = Identity::value("tenant-a");
    let ids: Vec<RequestId> = (0..4).map(|i| id(&format!("id-{i}"))).collect();
    let spend = [check(&policy, &who, 1)];
    for key in &ids {
        let fresh = memory
            .store
            .decide_once_now(&spend, retry(key, &spend))
            .expect("the store has room");
        assert_eq!(fresh.replay, Replay::Fresh);
    }
    // The fourth id went over the bound: the oldest id was forgotten, and
    // no state was evicted (that would hand the identity a fresh quota).
    assert_eq!(memory.store.evictions(), 0);
    let newest = memory
        .store
        .decide_once_now(&spend, retry(&ids[3], &spend))
        .expect("the store has room");
    assert_eq!(seen(&newest), (vec![(true, 96)], Replay::Replayed));
    let oldest = memory
        .store
        .decide_once_now(&spend, retry(&ids[0], &spend))
        .expect("the store has room");
    assert_eq!(seen(&oldest), (vec![(true, 95)], Replay::Fresh));
    // Expired ids are swept like expired keys.
    memory.clock.set(T0 + WINDOW_MS);
    assert_eq!(memory.store.sweep(), 3);
}

/// Many attempts of one id at once, across two stores (two tollgate
/// instances) on one Redis: one is charged for every `MAX_REPLAYS` replays,
/// so a storm of 40 is charged 10 times, never once for all (a client
/// reusing one id buys no unlimited free attempts).
async fn racing_attempts_are_charged_once(topology: &Topology, tag: &str) {
    let one = topology.store().await;
    let two = topology.store().await;
    let policy = Arc::new(window(&format!("race-{tag}"), 1_000));
    let who = Arc::new(Identity::value("tenant-a"));
    let key = Arc::new(id("the-same-request"));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..40 {
        let store = if i % 2 == 0 { one.clone() } else { two.clone() };
        let (policy, who, key) = (policy.clone(), who.clone(), key.clone());
        tasks.spawn(async move {
            let spend = [check(&policy, &who, 5)];
            store
                .decide_once(&spend, retry(&key, &spend))
                .await
                .expect("decides")
        });
    }
    let mut fresh = 0;
    let mut replayed = 0;
    while let Some(done) = tasks.join_next().await {
        let retried = done.expect("a task");
        assert!(retried.decisions[0].allowed);
        match retried.replay {
            Replay::Fresh => fresh += 1,
            Replay::Replayed => replayed += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(MAX_REPLAYS, 3);
    assert_eq!((fresh, replayed), (10, 30));
    let left = one.decide(check(&policy, &who, 0)).await.expect("decides");
    assert_eq!(left.remaining, 950);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_attempts_on_standalone_redis_are_charged_once() {
    racing_attempts_are_charged_once(&Topology::standalone(), "standalone").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_attempts_on_a_redis_cluster_are_charged_once() {
    racing_attempts_are_charged_once(&Topology::cluster(), "cluster").await;
}

#[tokio::test]
async fn the_id_record_shares_the_state_slot_and_expires_with_its_window() {
    let topology = Topology::standalone();
    let store = topology.store().await;
    let policy = window("layout", 10);
    let who = Identity::value("tenant-a");
    let key = id("k");
    let spend = [check(&policy, &who, 1)];
    let short = Retry {
        window_ms: 1_000,
        ..retry(&key, &spend)
    };
    let first = store.decide_once(&spend, short).await.expect("decides");
    assert_eq!(first.replay, Replay::Fresh);
    let state = String::from_utf8(store.key(&policy, &who)).expect("utf-8 key");
    let record = format!("{state}:ids");
    let keys = topology.keys_with_pttl();
    let (_, pttl) = keys
        .iter()
        .find(|(k, _)| *k == record)
        .expect("the record key exists");
    assert!((1..=1_000).contains(pttl), "record PTTL {pttl}");
    assert_eq!(
        tollgate_store::key_slot(record.as_bytes()),
        tollgate_store::key_slot(state.as_bytes())
    );
    let replay = store.decide_once(&spend, short).await.expect("decides");
    assert_eq!(replay.replay, Replay::Replayed);
    // Batched single checks refuse another cost as the all-or-nothing path does.
    let two = [check(&policy, &who, 2)];
    let other = store
        .decide_once(
            &two,
            Retry {
                window_ms: 1_000,
                ..retry(&key, &two)
            },
        )
        .await
        .expect("decides");
    assert_eq!(seen(&other), (vec![], Replay::Mismatch));
    // Past the window the same id is a new request.
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let after = store.decide_once(&spend, short).await.expect("decides");
    assert_eq!(seen(&after), (vec![(true, 8)], Replay::Fresh));
}

/// A record an older version wrote (`<expires_ms>:<joined costs>`) is never
/// taken for this request's digest: across an upgrade, a retry inside the
/// window is refused (422), and nothing is consumed.
#[tokio::test]
async fn an_older_versions_cost_record_is_refused_not_replayed() {
    let topology = Topology::standalone();
    let store = topology.store().await;
    let policy = window("upgrade", 10);
    let who = Identity::value("tenant-a");
    let record = [store.key(&policy, &who), b":ids".to_vec()].concat();
    let record = String::from_utf8(record).expect("utf-8 key");
    let old = format!("{}:1", T0 + WINDOW_MS);
    tollgate_testkit::cli(topology.ports()[0], &["hset", &record, "k", &old]).expect("hset");
    let key = id("k");
    let spend = [check(&policy, &who, 1)];
    let retried = store.once(&spend, retry(&key, &spend), T0 + 1).await;
    assert_eq!(seen(&retried), (vec![], Replay::Mismatch));
    let left = store.plain(&[check(&policy, &who, 0)], T0 + 2).await;
    assert_eq!(left[0].remaining, 10);
}

/// Single checks under ids on the store's clock take the batched path
/// (decide_each_once.lua): the same contract.
#[tokio::test]
async fn batched_single_checks_keep_the_contract() {
    let topology = Topology::standalone();
    let store = topology.store().await;
    let policy = bucket("batched", 2);
    let who = Identity::value("tenant-a");
    let (first, second) = (id("attempt-1"), id("attempt-2"));
    let spend = [check(&policy, &who, 1)];
    let once = |id| {
        let store = store.clone();
        async move {
            store
                .decide_once(&spend, retry(id, &spend))
                .await
                .expect("decides")
        }
    };
    store.decide(spend[0]).await.expect("decides");
    assert_eq!(seen(&once(&first).await), (vec![(true, 0)], Replay::Fresh));
    assert_eq!(
        seen(&once(&first).await),
        (vec![(true, 0)], Replay::Replayed)
    );
    assert_eq!(
        seen(&once(&second).await),
        (vec![(false, 0)], Replay::Fresh)
    );

    let counted = window("batched-bound", 100);
    let spend = [check(&counted, &who, 1)];
    let ids: Vec<RequestId> = (0..3).map(|i| id(&format!("id-{i}"))).collect();
    let two = |id| Retry {
        max_ids: 2,
        ..retry(id, &spend)
    };
    for key in &ids {
        store.decide_once(&spend, two(key)).await.expect("decides");
    }
    let oldest = store
        .decide_once(&spend, two(&ids[0]))
        .await
        .expect("decides");
    assert_eq!(seen(&oldest), (vec![(true, 96)], Replay::Fresh));
    let newest = store
        .decide_once(&spend, two(&ids[2]))
        .await
        .expect("decides");
    assert_eq!(seen(&newest), (vec![(true, 96)], Replay::Replayed));
}

/// The shipped vectors, every event under its own new id: the same
/// decisions as without ids (an id changes what a retry costs, never the
/// arithmetic).
async fn vectors_hold_under_fresh_ids(s: &impl Subject) {
    let policies = redis_support::vector_policies();
    let expected = redis_support::vector_expected();
    for (n, (event, want)) in redis_support::vector_events()
        .iter()
        .zip(expected)
        .enumerate()
    {
        let policy = policies.get(&event.policy).expect("declared policy");
        let who = Identity::value(&event.key);
        let key = id(&format!("event-{n}"));
        let got = s
            .sent(&[check(policy, &who, event.cost)], &key, event.t_ms)
            .await;
        assert_eq!(got.replay, Replay::Fresh, "event {n}");
        let decision = got.decisions.first().copied().expect("a decision");
        assert_eq!(
            redis_support::Expected::from(decision),
            want,
            "event {n}: {event:?}"
        );
    }
}

#[tokio::test]
async fn vectors_hold_under_fresh_ids_on_every_store() {
    vectors_hold_under_fresh_ids(&Memory::new(MemoryStoreConfig::default())).await;
    let topology = Topology::standalone();
    vectors_hold_under_fresh_ids(&topology.store().await).await;
}

#[test]
fn a_forgotten_memory_id_is_decided_afresh_and_others_are_kept() {
    let memory = Memory::new(MemoryStoreConfig {
        max_keys: 16,
        shards: 1,
    });
    memory.clock.set(T0);
    let policy = window("refunded", 10);
    let acme = Identity::value("acme");
    let job = id("job-1");
    let checks = [check(&policy, &acme, 1)];
    let decide = || {
        memory
            .store
            .decide_once_now(&checks, retry(&job, &checks))
            .expect("room")
    };
    assert_eq!(seen(&decide()), (vec![(true, 9)], Replay::Fresh));
    assert_eq!(seen(&decide()), (vec![(true, 9)], Replay::Replayed));
    // Another id, or another key's, is not touched.
    memory.store.forget_request_id(&policy, &acme, &id("job-2"));
    memory
        .store
        .forget_request_id(&policy, &Identity::value("other"), &job);
    assert_eq!(seen(&decide()), (vec![(true, 9)], Replay::Replayed));
    memory.store.forget_request_id(&policy, &acme, &job);
    assert_eq!(seen(&decide()), (vec![(true, 8)], Replay::Fresh));
    assert_eq!(seen(&decide()), (vec![(true, 8)], Replay::Replayed));
}
