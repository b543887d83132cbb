//! Permits while the shared store cannot decide, through `Guarded`:
//! `fail_open` admits holding no permit (its release frees nothing and is
//! no error to the door, which has none to release), `fail_closed`
//! rejects, and `local` holds this process's share of the permits —
//! limit × share rounded down, at least 1 — which a release frees.

use std::sync::Arc;

use tollgate_core::{Identity, Limits, ManualClock, Permits, Policy, Released};
use tollgate_store::{
    BreakerConfig, Check, Decide, DecidedBy, Guarded, GuardedCheck, GuardedDecisions,
    OnStoreFailure, RedisConfig, RedisStore, local_policy,
};
use tollgate_testkit::RedisServer;

const T0: u64 = 1_700_000_000_000;

async fn decide(
    store: &Guarded<RedisStore>,
    policy: &Policy,
    on_failure: OnStoreFailure,
    local: Option<&Policy>,
) -> GuardedDecisions {
    let identity = Identity::value("acme");
    let check = GuardedCheck {
        check: Check {
            policy,
            identity: &identity,
            cost: 1,
        },
        on_failure,
        local_policy: local,
    };
    Decide::decide(store, &[check], None).await
}

#[tokio::test]
async fn failure_modes_hold_no_permit_reject_or_keep_a_local_share() {
    let mut redis = RedisServer::start().expect("redis-server starts");
    let mut config = RedisConfig::standalone(redis.url());
    config.timeout_ms = 2_000;
    let shared = RedisStore::connect(&config).await.expect("connects");
    let clock = Arc::new(ManualClock::new(T0));
    let store = Guarded::new(shared, BreakerConfig::default(), clock, 1_000);
    let policy = Policy::new(
        "reports",
        Limits::Concurrency(Permits::new(10, 30_000).expect("valid")),
    );
    redis.kill().expect("redis-server stops");

    let open = decide(&store, &policy, OnStoreFailure::FailOpen, None).await;
    assert_eq!(open.by, DecidedBy::FailOpen);
    assert_eq!(
        (open.decisions[0].allowed, open.decisions[0].permit),
        (true, None)
    );

    let closed = decide(&store, &policy, OnStoreFailure::FailClosed, None).await;
    assert_eq!(closed.by, DecidedBy::FailClosed);
    assert_eq!(
        (closed.decisions[0].allowed, closed.decisions[0].permit),
        (false, None)
    );

    // 25% of 10 is 2.5: 2 permits here, each with the policy's lease.
    let local_mode = OnStoreFailure::Local { share_percent: 25 };
    let share = local_policy(&policy, 25);
    assert_eq!(share.limits().to_string(), "concurrency limit 2 lease 30s");
    let first = decide(&store, &policy, local_mode, Some(&share)).await;
    let second = decide(&store, &policy, local_mode, Some(&share)).await;
    let third = decide(&store, &policy, local_mode, Some(&share)).await;
    assert_eq!(first.by, DecidedBy::Local);
    let allowed: Vec<bool> = [&first, &second, &third]
        .iter()
        .map(|d| d.decisions[0].allowed)
        .collect();
    assert_eq!(allowed, [true, true, false]);
    assert_eq!(third.decisions[0].retry_after_ms, Some(30_000));
    // A release reaches the local permits even with the store down.
    let held = first.decisions[0].permit.expect("a local permit");
    let acme = Identity::value("acme");
    assert_eq!(
        Decide::release(&store, &policy, &acme, held).await,
        Ok(Released::Freed)
    );
    assert!(
        decide(&store, &policy, local_mode, Some(&share))
            .await
            .decisions[0]
            .allowed
    );
    // One the store handed out cannot be asked about: an error, nothing changed.
    let unknown = tollgate_core::PermitId(7);
    assert!(
        Decide::release(&store, &policy, &acme, unknown)
            .await
            .is_err()
    );
    // 1% of 10 rounds down to 0: at least 1.
    assert_eq!(
        local_policy(&policy, 1).limits().to_string(),
        "concurrency limit 1 lease 30s"
    );
}
