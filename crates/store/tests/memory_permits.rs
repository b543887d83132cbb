//! Concurrency permits in the memory store: at most N held, a release
//! frees one at once and only once, a lease ends a permit its holder never
//! released, a batch with a rate is all or nothing, and a retry under one
//! request id is answered with the same permit.

use std::sync::Arc;

use tollgate_core::{
    Decision, Identity, Limits, ManualClock, PermitId, Permits, Policy, Released, Window,
};
use tollgate_store::{
    Check, MemoryStore, MemoryStoreConfig, Replay, RequestDigest, RequestId, Retry, Store,
};

const T0: u64 = 1_700_000_000_000;

fn permits(limit: u64, lease_ms: u64) -> Policy {
    Policy::new(
        "reports",
        Limits::Concurrency(Permits::new(limit, lease_ms).expect("valid")),
    )
}

fn store() -> (Arc<ManualClock>, MemoryStore) {
    let clock = Arc::new(ManualClock::new(T0));
    (
        clock.clone(),
        MemoryStore::new(clock, MemoryStoreConfig::default()),
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

#[tokio::test]
async fn at_most_the_limit_is_held_and_a_release_frees_one_once() {
    let (clock, store) = store();
    let policy = permits(3, 30_000);
    let acme = Identity::value("acme");
    let mut held = Vec::new();
    for (i, remaining) in [2, 1, 0].into_iter().enumerate() {
        clock.set(T0 + i as u64 * 1_000);
        let d = store
            .decide(check(&policy, &acme, 1))
            .await
            .expect("decided");
        assert_eq!((d.allowed, d.limit, d.remaining), (true, 3, remaining));
        assert_eq!(d.reset_after_ms, 30_000);
        held.push(permit(&d));
    }
    clock.set(T0 + 2_500);
    let refused = store
        .decide(check(&policy, &acme, 1))
        .await
        .expect("decided");
    assert!(!refused.allowed);
    assert_eq!(refused.permit, None);
    // The first lease ends at T0 + 30 000: an upper bound on the wait.
    assert_eq!(refused.retry_after_ms, Some(27_500));
    assert_eq!(refused.reset_after_ms, 29_500);
    // Another tenant is not touched.
    let other = Identity::value("globex");
    assert!(
        store
            .decide(check(&policy, &other, 1))
            .await
            .expect("decided")
            .allowed
    );

    assert_eq!(store.release(&policy, &acme, held[1]), Released::Freed);
    assert_eq!(store.release(&policy, &acme, held[1]), Released::Unknown);
    let again = store
        .decide(check(&policy, &acme, 1))
        .await
        .expect("decided");
    assert!(again.allowed);
    assert_eq!(again.remaining, 0);
    assert_ne!(permit(&again), held[1], "a fresh permit, not the freed one");
}

#[tokio::test]
async fn a_permit_never_released_is_free_when_its_lease_ends() {
    let (clock, store) = store();
    let policy = permits(1, 5_000);
    let acme = Identity::value("acme");
    let first = store
        .decide(check(&policy, &acme, 1))
        .await
        .expect("decided");
    clock.set(T0 + 4_999);
    let d = store
        .decide(check(&policy, &acme, 1))
        .await
        .expect("decided");
    assert_eq!((d.allowed, d.retry_after_ms), (false, Some(1)));
    clock.set(T0 + 5_000);
    assert_eq!(
        store.release(&policy, &acme, permit(&first)),
        Released::Expired
    );
    let d = store
        .decide(check(&policy, &acme, 1))
        .await
        .expect("decided");
    assert!(d.allowed);
    assert_eq!(
        store.release(&policy, &acme, permit(&first)),
        Released::Unknown
    );
}

#[tokio::test]
async fn a_look_holds_nothing_and_a_cost_above_one_is_never_admitted() {
    let (_, store) = store();
    let policy = permits(3, 5_000);
    let acme = Identity::value("acme");
    let look = store
        .decide(check(&policy, &acme, 0))
        .await
        .expect("decided");
    assert_eq!((look.allowed, look.remaining, look.permit), (true, 3, None));
    assert_eq!(
        store.key_count(),
        0,
        "a look at a new identity stores nothing"
    );
    let two = store
        .decide(check(&policy, &acme, 2))
        .await
        .expect("decided");
    assert_eq!(
        (two.allowed, two.retry_after_ms, two.permit),
        (false, None, None)
    );
}

#[tokio::test]
async fn a_batch_with_a_rate_holds_its_permit_only_when_all_admit() {
    let (_, store) = store();
    let reports = permits(2, 10_000);
    let rate = Policy::new(
        "writes",
        Limits::FixedWindow(Window::new(1, 60_000).expect("valid")),
    );
    let acme = Identity::value("acme");
    let batch = [check(&reports, &acme, 1), check(&rate, &acme, 1)];
    let first = store.decide_all(&batch).await.expect("decided");
    assert!(first.iter().all(|d| d.allowed));
    assert!(first[0].permit.is_some());
    assert_eq!(first[1].permit, None);
    // The rate refuses: nothing is held, the permit count stands.
    let second = store.decide_all(&batch).await.expect("decided");
    assert_eq!(
        second.iter().map(|d| d.allowed).collect::<Vec<_>>(),
        [true, false]
    );
    assert_eq!((second[0].permit, second[0].remaining), (None, 1));
    let look = store
        .decide(check(&reports, &acme, 0))
        .await
        .expect("decided");
    assert_eq!(look.remaining, 1);
}

#[tokio::test]
async fn a_retry_under_one_request_id_is_answered_with_the_same_permit() {
    let (_, store) = store();
    let policy = permits(3, 10_000);
    let acme = Identity::value("acme");
    let checks = [check(&policy, &acme, 1)];
    let id = RequestId::new("r-1").expect("valid");
    let retry = Retry {
        id: &id,
        request: RequestDigest::of(&checks, None),
        window_ms: 60_000,
        max_ids: 64,
    };
    let first = store.decide_once(&checks, retry).await.expect("decided");
    let again = store.decide_once(&checks, retry).await.expect("decided");
    assert_eq!(
        (first.replay, again.replay),
        (Replay::Fresh, Replay::Replayed)
    );
    assert_eq!(again.decisions[0].permit, first.decisions[0].permit);
    assert!(again.decisions[0].allowed);
    let look = store
        .decide(check(&policy, &acme, 0))
        .await
        .expect("decided");
    assert_eq!(look.remaining, 2, "one permit taken, not two");
    let held = permit(&first.decisions[0]);
    assert_eq!(store.release(&policy, &acme, held), Released::Freed);
}
