//! A remote tollgate's permits: `RemoteTollgate` acquires through the
//! server's `/v1/check` and releases through its `/v1/release`, one set of
//! permits with the server's own door; a concurrency rejection is never
//! remembered (a release may free a permit before its lease ends).

mod support;

use std::sync::Arc;

use support::{T0, Tollgate};
use tollgate_core::{Identity, Limits, ManualClock, PermitId, Permits, Policy};
use tollgate_limiter::{Check, Decider, Plan, ReleaseError};
use tollgate_store::OnStoreFailure;

const CONFIG: &str = "
policies:
  - name: reports
    algorithm: concurrency
    limit: 2
    lease: 30s
  - name: writes
    algorithm: fixed_window
    limit: 5
    window: 1h
";

fn plan(name: &str, limits: Limits) -> Plan {
    Plan::new(Policy::new(name, limits), 0).with_failure_mode(OnStoreFailure::FailClosed)
}

#[tokio::test]
async fn a_remote_tollgate_acquires_and_releases_the_servers_permits() {
    let clock = Arc::new(ManualClock::new(T0));
    let server = Tollgate::start(CONFIG, clock.clone(), "127.0.0.1:0").await;
    let remote = support::remote(&server.base, clock.clone());
    let reports = plan(
        "reports",
        Limits::Concurrency(Permits::new(2, 30_000).expect("valid")),
    );
    let acme = Identity::value("acme");
    let checks = [Check::new(&reports, &acme, 1)];

    let first = remote.decide(&checks).await.decisions[0];
    let held = first.permit.expect("a permit");
    // The server's own door holds the second.
    let asked = server.check(r#"{"policy":"reports","key":"acme"}"#).await;
    let other: PermitId = asked["permit"]
        .as_str()
        .expect("a permit")
        .parse()
        .expect("16 hex digits");
    let full = remote.decide(&checks).await.decisions[0];
    assert_eq!(
        (full.allowed, full.retry_after_ms, full.permit),
        (false, Some(30_000), None)
    );

    // Released through the server: the next acquire is asked, not answered
    // from a remembered rejection.
    assert_eq!(remote.release(&reports, &acme, other).await, Ok(true));
    assert_eq!(remote.release(&reports, &acme, other).await, Ok(false));
    let again = remote.decide(&checks).await.decisions[0];
    assert!(again.allowed);
    assert_eq!(remote.release(&reports, &acme, held).await, Ok(true));

    let writes = plan(
        "writes",
        Limits::FixedWindow(tollgate_core::Window::new(5, 3_600_000).expect("valid")),
    );
    assert_eq!(
        remote.release(&writes, &acme, held).await,
        Err(ReleaseError::NotConcurrency {
            policy: "writes".into()
        })
    );
    server.stop().await;
    // The server gone: a release cannot be answered, and says so.
    assert!(matches!(
        remote.release(&reports, &acme, held).await,
        Err(ReleaseError::Remote(_))
    ));
}
