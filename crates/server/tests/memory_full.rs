//! A real `tollgate serve` on a small memory store (`max_keys: 1280`):
//! a flood of fresh API keys cannot flush an exhausted login log, and a
//! new identity the store has no room for (every key it holds limiting)
//! gets its policy's failure mode, marked and counted.

mod support;

use support::{TollgateProcess, check_json, metric, metrics_text};

const CONFIG: &str = r#"
store:
  memory:
    max_keys: 1280
policies:
  - name: login
    algorithm: sliding_log
    limit: 5
    window: 10m
    on_store_failure: fail_closed
  - name: export
    algorithm: token_bucket
    capacity: 10
    refill: { tokens: 1, per: 1h }
  - name: signup
    algorithm: sliding_log
    limit: 1
    window: 1h
    on_store_failure: fail_closed
"#;

fn serve() -> (tempfile::TempDir, TollgateProcess) {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, CONFIG).expect("write config");
    let process = TollgateProcess::spawn(&path, &[]);
    (dir, process)
}

fn body(policy: &str, key: &str) -> String {
    format!(r#"{{"policy":"{policy}","key":"{key}"}}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_login_log_survives_a_flood_of_fresh_api_keys_through_a_real_process() {
    let (_dir, tollgate) = serve();
    let client = reqwest::Client::new();
    let base = &tollgate.base;
    for _ in 0..5 {
        let d = check_json(&client, base, body("login", "203.0.113.7")).await;
        assert_eq!(d["allowed"], true, "{d}");
    }
    for i in 0..1_700 {
        let d = check_json(&client, base, body("export", &format!("fake-api-key-{i}"))).await;
        assert_eq!(d["allowed"], true, "export {i}: {d}");
    }
    let d = check_json(&client, base, body("login", "203.0.113.7")).await;
    assert_eq!(d["allowed"], false, "{d}");
    assert_eq!(d["remaining"], 0, "{d}");
    assert!(d.get("degraded").is_none(), "{d}");
    let metrics = metrics_text(&client, base).await;
    let keys = metric(&metrics, r#"tollgate_store_keys{role="local"}"#).expect("keys gauge");
    let evictions = metric(&metrics, r#"tollgate_store_evictions_total{role="local"}"#)
        .expect("evictions counter");
    // Nothing came to rest in the seconds this took: every key beyond the
    // bound evicted one export.
    assert_eq!(keys + evictions, 1_701.0, "{metrics}");
    assert_eq!(
        metric(
            &metrics,
            r#"tollgate_store_errors_total{role="local",kind="full"}"#
        ),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_identities_a_store_of_limiting_states_has_no_room_for_fail_closed_and_are_counted() {
    let (_dir, tollgate) = serve();
    let client = reqwest::Client::new();
    let base = &tollgate.base;
    // Each signup's one request leaves its log limiting for an hour: the
    // store fills with states it may not evict.
    let (mut admitted, mut refused) = (0u32, 0u32);
    for i in 0..3_000 {
        let d = check_json(&client, base, body("signup", &format!("new-{i}"))).await;
        if d["allowed"] == true {
            assert!(d.get("degraded").is_none(), "{d}");
            admitted += 1;
        } else {
            assert_eq!(d["degraded"], true, "{d}");
            assert_eq!(d["path"], "fail_closed", "{d}");
            assert_eq!(d["retry_after_ms"], 1_000, "{d}");
            refused += 1;
        }
    }
    let metrics = metrics_text(&client, base).await;
    // Every identity admitted is held; none was evicted for another.
    assert_eq!(
        metric(&metrics, r#"tollgate_store_keys{role="local"}"#),
        Some(f64::from(admitted)),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, r#"tollgate_store_evictions_total{role="local"}"#),
        Some(0.0)
    );
    assert!(
        admitted <= 1_280 && refused >= 3_000 - 1_280,
        "{admitted} {refused}"
    );
    assert_eq!(
        metric(
            &metrics,
            r#"tollgate_store_errors_total{role="local",kind="full"}"#
        ),
        Some(f64::from(refused))
    );
    assert_eq!(
        metric(
            &metrics,
            r#"tollgate_degraded_decisions_total{path="fail_closed",outcome="rejected"}"#
        ),
        Some(f64::from(refused))
    );
    // An identity already held is still decided exactly: rejected, not degraded.
    let d = check_json(&client, base, body("signup", "new-0")).await;
    assert_eq!(d["allowed"], false, "{d}");
    assert!(d.get("degraded").is_none(), "{d}");
}
