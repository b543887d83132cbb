//! `Guarded` is generic over the store contract: over the memory store it
//! decides exactly as the store does (by the shared store, never degraded),
//! and its blocks, admin and stats are the store's.

use std::sync::Arc;

use tollgate_core::{Identity, Limits, ManualClock, Policy, Rate};
use tollgate_store::{
    Admin, Blocks, BreakerConfig, Check, CircuitState, Decide, DecidedBy, Guarded, GuardedCheck,
    MemoryStore, MemoryStoreConfig, OnStoreFailure, StoreStats,
};

const T0: u64 = 1_700_000_000_000;

fn guarded() -> Guarded<MemoryStore> {
    let clock = Arc::new(ManualClock::new(T0));
    let shared = MemoryStore::new(clock.clone(), MemoryStoreConfig::default());
    Guarded::new(shared, BreakerConfig::default(), clock, 1_000)
}

#[tokio::test]
async fn a_guarded_memory_store_decides_as_the_store_itself() {
    let store = guarded();
    let policy = Policy::new(
        "api",
        Limits::TokenBucket(Rate::new(3, 1, 1_000).expect("rate")),
    );
    let acme = Identity::value("acme");
    let check = GuardedCheck {
        check: Check {
            policy: &policy,
            identity: &acme,
            cost: 1,
        },
        on_failure: OnStoreFailure::FailClosed,
        local_policy: None,
    };
    let mut remaining = Vec::new();
    for _ in 0..4 {
        let decided = Decide::decide(&store, &[check], None).await;
        assert_eq!(decided.by, DecidedBy::Shared);
        assert!(decided.error.is_none());
        remaining.push((decided.decisions[0].allowed, decided.decisions[0].remaining));
    }
    assert_eq!(remaining, [(true, 2), (true, 1), (true, 0), (false, 0)]);
    assert!(Blocks::trusted(&store));
    assert_eq!(store.circuit(), CircuitState::Closed);
    assert_eq!(
        Admin::stats(&store),
        StoreStats {
            keys: 0,
            evictions: 0,
            circuit: 0,
            answered_locally: 0,
            script_calls: 0,
        }
    );
    assert!(
        Admin::forget(&store, &policy, &acme)
            .await
            .expect("forgets")
    );
    assert_eq!(store.shared().key_count(), 0);
    let decided = Decide::decide(&store, &[check], None).await;
    assert_eq!(decided.decisions[0].remaining, 2);
}
