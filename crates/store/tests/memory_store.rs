//! The memory store held to the core: the shipped vectors decide alike, one
//! key under many concurrent tasks admits exactly its capacity, several
//! checks are decided all-or-nothing, and the store stays bounded.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;
use tollgate_core::{Decision, Identity, Limits, ManualClock, Policy, PolicySet, Rate, Window};
use tollgate_store::{Check, MemoryStore, MemoryStoreConfig, Store};

const T0: u64 = 1_700_000_000_000;

fn store_at(now_ms: u64, config: MemoryStoreConfig) -> (Arc<ManualClock>, MemoryStore) {
    let clock = Arc::new(ManualClock::new(now_ms));
    (clock.clone(), MemoryStore::new(clock, config))
}

fn check<'a>(policy: &'a Policy, identity: &'a Identity, cost: u64) -> Check<'a> {
    Check {
        policy,
        identity,
        cost,
    }
}

/// A decision in the vectors' own spelling.
fn line(d: &Decision) -> String {
    d.vector_line()
}

fn vectors(name: &str) -> String {
    let path = format!("{}/../../tests/vectors/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// Decides the shipped trace through `store`, calling `between` after each
/// event, and asserts every decision line for line.
async fn replay_vectors(clock: &ManualClock, store: &MemoryStore, between: impl Fn(&MemoryStore)) {
    let policies = PolicySet::from_yaml(&vectors("policies.yaml")).expect("valid policies");
    let events = vectors("events.jsonl");
    let expected = vectors("expected.jsonl");
    assert_eq!(events.lines().count(), expected.lines().count());
    for (number, (event, want)) in events.lines().zip(expected.lines()).enumerate() {
        let event: Value = serde_json::from_str(event).expect("an event is JSON");
        let policy = policies
            .get(event["policy"].as_str().expect("policy"))
            .expect("declared policy");
        let identity = Identity::value(event["key"].as_str().expect("key"));
        clock.set(event["t_ms"].as_u64().expect("t_ms"));
        let cost = event["cost"].as_u64().expect("cost");
        let decision = store
            .decide(check(policy, &identity, cost))
            .await
            .expect("the memory store always decides");
        assert_eq!(line(&decision), want, "line {}: {event}", number + 1);
        between(store);
    }
}

#[tokio::test]
async fn shipped_vectors_pass_line_for_line_through_the_memory_store() {
    let (clock, store) = store_at(0, MemoryStoreConfig::default());
    replay_vectors(&clock, &store, |_| {}).await;
}

#[tokio::test]
async fn sweeping_after_every_decision_never_changes_a_decision() {
    // The vectors never step back below the point where a key is full or
    // empty, so forgetting such keys must be unobservable.
    let (clock, store) = store_at(0, MemoryStoreConfig::default());
    replay_vectors(&clock, &store, |s| {
        s.sweep();
    })
    .await;
}

fn one_of_each(capacity: u64) -> Vec<Policy> {
    let rate = Rate::new(capacity, 1, 3_600_000).expect("valid rate");
    let window = Window::new(capacity, 3_600_000).expect("valid window");
    vec![
        Policy::new("tb", Limits::TokenBucket(rate)),
        Policy::new("gcra", Limits::Gcra(rate)),
        Policy::new("fw", Limits::FixedWindow(window)),
        Policy::new("sw", Limits::SlidingWindow(window)),
        Policy::new("log", Limits::SlidingLog(window)),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_tasks_on_one_key_admit_exactly_the_capacity_when_the_clock_is_frozen() {
    const TASKS: usize = 64;
    const CALLS: usize = 40;
    const CAPACITY: u64 = 100;
    // Mid-window, so the window algorithms see one window throughout.
    let (_clock, store) = store_at(T0 + 1_234, MemoryStoreConfig::default());
    let store = Arc::new(store);
    for policy in one_of_each(CAPACITY) {
        let policy = Arc::new(policy);
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let (store, policy) = (store.clone(), policy.clone());
                tokio::spawn(async move {
                    let identity = Identity::value("hot");
                    let mut admitted = Vec::new();
                    for _ in 0..CALLS {
                        let d = store
                            .decide(check(&policy, &identity, 1))
                            .await
                            .expect("the memory store always decides");
                        if d.allowed {
                            admitted.push(d.remaining);
                        }
                        tokio::task::yield_now().await;
                    }
                    admitted
                })
            })
            .collect();
        let mut remaining_seen = Vec::new();
        for task in tasks {
            remaining_seen.extend(task.await.expect("task finished"));
        }
        // Exactly the capacity, and each admission saw a different state.
        assert_eq!(remaining_seen.len() as u64, CAPACITY, "{}", policy.name());
        let distinct: BTreeSet<i64> = remaining_seen.into_iter().collect();
        assert_eq!(
            distinct,
            (0..CAPACITY as i64).collect::<BTreeSet<_>>(),
            "{}",
            policy.name()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_all_or_nothing_batches_consume_only_what_every_policy_admits() {
    let (_clock, store) = store_at(T0 + 1_234, MemoryStoreConfig::default());
    let store = Arc::new(store);
    let wide = Arc::new(Policy::new(
        "wide",
        Limits::FixedWindow(Window::new(100, 3_600_000).expect("valid")),
    ));
    let narrow = Arc::new(Policy::new(
        "narrow",
        Limits::TokenBucket(Rate::new(60, 1, 3_600_000).expect("valid")),
    ));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (store, wide, narrow) = (store.clone(), wide.clone(), narrow.clone());
            tokio::spawn(async move {
                let identity = Identity::value("hot");
                let mut admitted = 0u64;
                for _ in 0..20 {
                    let decisions = store
                        .decide_all(&[check(&wide, &identity, 1), check(&narrow, &identity, 1)])
                        .await
                        .expect("the memory store always decides");
                    if decisions.iter().all(|d| d.allowed) {
                        admitted += 1;
                    }
                    tokio::task::yield_now().await;
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.expect("task finished");
    }
    assert_eq!(admitted, 60);
    let identity = Identity::value("hot");
    assert_eq!(
        store
            .decide_now(check(&wide, &identity, 0))
            .expect("the store has room")
            .remaining,
        40
    );
    assert_eq!(
        store
            .decide_now(check(&narrow, &identity, 0))
            .expect("the store has room")
            .remaining,
        0
    );
}

#[test]
fn all_or_nothing_consumes_nothing_when_one_policy_rejects() {
    let (_clock, store) = store_at(T0 + 1_234, MemoryStoreConfig::default());
    let window = Policy::new(
        "window",
        Limits::FixedWindow(Window::new(5, 3_600_000).expect("valid")),
    );
    let bucket = Policy::new(
        "bucket",
        Limits::TokenBucket(Rate::new(3, 1, 3_600_000).expect("valid")),
    );
    let id = Identity::value("acme");
    for _ in 0..3 {
        let ds = store
            .decide_all_now(&[check(&window, &id, 1), check(&bucket, &id, 1)])
            .expect("the store has room");
        assert!(ds.iter().all(|d| d.allowed), "{ds:?}");
    }
    let ds = store
        .decide_all_now(&[check(&window, &id, 1), check(&bucket, &id, 1)])
        .expect("the store has room");
    // Each decision says what its check alone would get; the bucket refuses.
    assert!(ds[0].allowed);
    assert_eq!(
        ds[1],
        Decision {
            allowed: false,
            limit: 3,
            remaining: 0,
            retry_after_ms: Some(3_600_000),
            reset_after_ms: 3 * 3_600_000,
            permit: None,
        }
    );
    // The window kept its 2 left: the refused batch took nothing from it.
    assert_eq!(
        store
            .decide_now(check(&window, &id, 0))
            .expect("the store has room")
            .remaining,
        2
    );
    assert_eq!(
        store
            .decide_now(check(&bucket, &id, 0))
            .expect("the store has room")
            .remaining,
        0
    );
}

#[test]
fn a_key_named_twice_in_one_batch_sees_its_own_consumption() {
    let (_clock, store) = store_at(T0 + 1_234, MemoryStoreConfig::default());
    let window = Policy::new(
        "window",
        Limits::FixedWindow(Window::new(5, 3_600_000).expect("valid")),
    );
    let id = Identity::value("acme");
    // 3 + 3 > 5: the batch is refused although each check alone would fit.
    let ds = store
        .decide_all_now(&[check(&window, &id, 3), check(&window, &id, 3)])
        .expect("the store has room");
    assert!(!ds.iter().all(|d| d.allowed), "{ds:?}");
    // The batch's own total never fits: no wait would admit it.
    assert_eq!(ds[1].retry_after_ms, None, "{ds:?}");
    assert_eq!(
        store
            .decide_now(check(&window, &id, 0))
            .expect("the store has room")
            .remaining,
        5
    );
    // 2 + 3 = 5 fits: both admitted, the second after the first.
    let ds = store
        .decide_all_now(&[check(&window, &id, 2), check(&window, &id, 3)])
        .expect("the store has room");
    assert_eq!(
        ds.iter()
            .map(|d| (d.allowed, d.remaining))
            .collect::<Vec<_>>(),
        [(true, 3), (true, 0)]
    );
    assert_eq!(
        store
            .decide_now(check(&window, &id, 0))
            .expect("the store has room")
            .remaining,
        0
    );
    // 1 + 1 fits the limit but not what is left: that waits for the window.
    let ds = store
        .decide_all_now(&[check(&window, &id, 1), check(&window, &id, 1)])
        .expect("the store has room");
    assert!(
        ds.iter().all(|d| !d.allowed && d.retry_after_ms.is_some()),
        "{ds:?}"
    );
}

#[test]
fn max_keys_bounds_the_key_count_and_counts_evictions() {
    let config = MemoryStoreConfig {
        max_keys: 64,
        shards: 4,
    };
    let (_clock, store) = store_at(T0, config);
    assert_eq!(store.capacity(), 64);
    // A slow bucket stays live: nothing expires while the clock is frozen.
    let policy = Policy::new(
        "slow",
        Limits::TokenBucket(Rate::new(10, 1, 3_600_000).expect("valid")),
    );
    for i in 0..1_000 {
        let id = Identity::value(&format!("key-{i}"));
        assert!(
            store
                .decide_now(check(&policy, &id, 1))
                .expect("the store has room")
                .allowed
        );
        assert!(store.key_count() <= 64);
    }
    // Every shard is far past full: each new key beyond it evicted one.
    assert_eq!(store.key_count(), 64);
    assert_eq!(store.evictions(), 1_000 - 64);
    assert_eq!(store.sweep(), 0);
}

#[test]
fn sweep_removes_exactly_the_expired_keys() {
    let (clock, store) = store_at(T0, MemoryStoreConfig::default());
    // 1 token a second: key i, having spent i tokens, is full after i seconds.
    let policy = Policy::new(
        "bucket",
        Limits::TokenBucket(Rate::new(10, 1, 1_000).expect("valid")),
    );
    let ids: Vec<Identity> = (1..=10)
        .map(|i| Identity::value(&format!("k{i}")))
        .collect();
    for (i, id) in (1..=10).zip(&ids) {
        let d = store
            .decide_now(check(&policy, id, i))
            .expect("the store has room");
        assert_eq!(d.reset_after_ms, i * 1_000);
    }
    assert_eq!(store.key_count(), 10);
    clock.set(T0 + 3_500);
    assert_eq!(store.sweep(), 3);
    assert_eq!(store.key_count(), 7);
    // Full exactly at its reset: key 4 goes at T0 + 4000, not a ms before.
    clock.set(T0 + 3_999);
    assert_eq!(store.sweep(), 0);
    clock.set(T0 + 4_000);
    assert_eq!(store.sweep(), 1);
    assert_eq!(store.key_count(), 6);
    // The keys kept still hold their debt: key 5 spent 5 and got 4 back.
    assert_eq!(
        store
            .decide_now(check(&policy, &ids[4], 0))
            .expect("the store has room")
            .remaining,
        9
    );
    assert_eq!(
        store
            .decide_now(check(&policy, &ids[9], 0))
            .expect("the store has room")
            .remaining,
        4
    );
    clock.set(T0 + 10_000);
    assert_eq!(store.sweep(), 6);
    assert_eq!(store.key_count(), 0);
}

#[test]
fn swept_window_keys_go_when_their_count_no_longer_counts() {
    let (clock, store) = store_at(T0 + 100, MemoryStoreConfig::default());
    let window = Window::new(5, 1_000).expect("valid");
    let fixed = Policy::new("fixed", Limits::FixedWindow(window));
    let sliding = Policy::new("sliding", Limits::SlidingWindow(window));
    let log = Policy::new("log", Limits::SlidingLog(window));
    let id = Identity::value("k");
    for policy in [&fixed, &sliding, &log] {
        assert!(
            store
                .decide_now(check(policy, &id, 1))
                .expect("the store has room")
                .allowed
        );
    }
    // T0 is a multiple of 1000: the fixed window ends at T0 + 1000, the log
    // entry ages out at T0 + 1100, the sliding count at T0 + 2000.
    clock.set(T0 + 999);
    assert_eq!(store.sweep(), 0);
    clock.set(T0 + 1_000);
    assert_eq!(store.sweep(), 1);
    clock.set(T0 + 1_100);
    assert_eq!(store.sweep(), 1);
    clock.set(T0 + 1_999);
    assert_eq!(store.sweep(), 0);
    clock.set(T0 + 2_000);
    assert_eq!(store.sweep(), 1);
    assert_eq!(store.key_count(), 0);
}

#[test]
fn sweep_after_a_clock_step_back_keeps_a_key_that_is_not_yet_full() {
    let (clock, store) = store_at(10_000, MemoryStoreConfig::default());
    // 2 tokens, 1 a second: both spent at 10 000, full again at 12 000.
    let policy = Policy::new(
        "bucket",
        Limits::TokenBucket(Rate::new(2, 1, 1_000).expect("valid")),
    );
    let id = Identity::value("k");
    assert!(
        store
            .decide_now(check(&policy, &id, 2))
            .expect("the store has room")
            .allowed
    );
    // The clock steps back; the key's own clock stays at 10 000.
    clock.set(9_000);
    assert_eq!(
        store
            .decide_now(check(&policy, &id, 0))
            .expect("the store has room")
            .reset_after_ms,
        2_000
    );
    clock.set(11_000);
    store.sweep();
    // One token is back, not two: forgetting the key would mint a fresh burst.
    let d = store
        .decide_now(check(&policy, &id, 2))
        .expect("the store has room");
    assert!(!d.allowed, "{d:?}");
    assert_eq!(d.remaining, 1);
}

#[test]
fn a_consumption_after_a_clock_step_back_expires_from_the_keys_own_clock() {
    let (clock, store) = store_at(10_000, MemoryStoreConfig::default());
    let policy = Policy::new(
        "tb",
        Limits::TokenBucket(Rate::new(2, 1, 1_000).expect("valid")),
    );
    let id = Identity::value("k");
    assert!(
        store
            .decide_now(check(&policy, &id, 1))
            .expect("the store has room")
            .allowed
    );
    clock.set(9_000);
    // The key's clock stays at 10,000: the bucket is empty until 12,000.
    assert_eq!(
        store
            .decide_now(check(&policy, &id, 1))
            .expect("the store has room")
            .reset_after_ms,
        2_000
    );
    clock.set(11_500);
    store.sweep();
    assert_eq!(store.key_count(), 1, "the key is not full until 12,000");
    assert_eq!(
        store
            .decide_now(check(&policy, &id, 0))
            .expect("the store has room")
            .remaining,
        1
    );
}
