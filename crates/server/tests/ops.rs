//! Operations: /v1/policies, health, metrics, reload (SIGHUP, file change,
//! refused configs) and graceful shutdown.

mod support;

use std::time::Duration;

use support::{TestServer, TollgateProcess};

const V1: &str = r#"
policies:
  - name: api
    algorithm: token_bucket
    capacity: 10
    refill: { tokens: 1, per: 1h }
    identity: [{ header: X-Tenant }]
"#;

fn with_capacity(capacity: u64) -> String {
    V1.replace("capacity: 10", &format!("capacity: {capacity}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_health_and_readiness_are_served() {
    let server = TestServer::start(V1).await;
    let policies: serde_json::Value = server
        .client
        .get(server.url("/v1/policies"))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(
        policies["policies"],
        serde_json::json!([{
            "name": "api", "algorithm": "token_bucket", "limit": 10, "capacity": 10,
            "refill": {"tokens": 1, "per": "1h"},
            "match": {"methods": null, "path_prefix": null, "path": null, "host": null},
            "identity": ["header:x-tenant"], "cost": 1,
            "on_store_failure": {
                "mode": "fail_open",
                "while_degraded": "nothing can fail; the store is in the process"
            },
            "retry_window": "1m", "retry_ids": 64
        }])
    );
    assert_eq!(
        policies["config_hash"],
        server.app.live.load().config.hash.as_str()
    );
    assert_eq!(policies["config_hash"].as_str().map(str::len), Some(16));
    assert_eq!(
        policies["ratelimit_headers"],
        "draft-ietf-httpapi-ratelimit-headers-11"
    );
    assert_eq!(
        policies["store"],
        serde_json::json!({"memory": {"max_keys": 1_000_000}})
    );
    for path in ["/healthz", "/readyz"] {
        let r = server
            .client
            .get(server.url(path))
            .send()
            .await
            .expect("request");
        assert_eq!(r.status(), 200, "{path}");
    }
    server.stop().await;
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_decisions_keys_and_reloads() {
    let server = TestServer::start(V1).await;
    for _ in 0..11 {
        server.check(r#"{"policy":"api","key":"m"}"#).await;
    }
    server.check(r#"{"policy":"api","key":"other"}"#).await;
    server.check(r#"{"policy":"api"}"#).await;
    std::fs::write(&server.config_path, "policies: [").expect("write");
    assert!(server.app.reload().is_err());
    std::fs::write(&server.config_path, with_capacity(12)).expect("write");
    assert!(server.app.reload().is_ok());
    let text = server.text("/metrics").await;
    assert_eq!(
        metric(
            &text,
            r#"tollgate_decisions_total{policy="api",outcome="allowed"}"#
        ),
        Some(11.0)
    );
    assert_eq!(
        metric(
            &text,
            r#"tollgate_decisions_total{policy="api",outcome="rejected"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(&text, r#"tollgate_store_keys{role="local"}"#),
        Some(2.0)
    );
    assert_eq!(metric(&text, "tollgate_config_reloads_total"), Some(1.0));
    assert_eq!(
        metric(&text, "tollgate_config_reload_failures_total"),
        Some(1.0)
    );
    assert_eq!(
        metric(&text, r#"tollgate_bad_requests_total{status="422"}"#),
        Some(1.0)
    );
    assert_eq!(
        metric(&text, "tollgate_decision_duration_seconds_count"),
        Some(12.0)
    );
    assert!(text.ends_with("# EOF\n"));
    server.stop().await;
}

/// The identities a policy rejected most are reported for the last whole
/// minute, by /v1/check and /v1/authorize alike, and forgotten after a quiet
/// one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_name_the_hot_identities_of_the_last_whole_window() {
    // Raw identities in the series: only when asked for.
    let yaml = format!("server:\n  hot_identity_metrics: raw\n{}", with_capacity(1));
    let server = TestServer::start(&yaml).await;
    server.clock.set(60_000);
    for _ in 0..4 {
        server.check(r#"{"policy":"api","key":"mallory"}"#).await;
    }
    for _ in 0..2 {
        server
            .check(r#"{"policy":"api","key":{"tenant":"t1","route":"/x"}}"#)
            .await;
    }
    for _ in 0..3 {
        let r = server
            .client
            .get(server.url("/v1/authorize"))
            .header("x-tenant", "acme")
            .send()
            .await
            .expect("request");
        assert!(r.status() == 200 || r.status() == 429);
    }
    server.check(r#"{"policy":"api","key":"quiet"}"#).await;
    let hot = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("tollgate_hot_identity_rejections{"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        hot(&server.text("/metrics").await),
        Vec::<String>::new(),
        "the minute is not over"
    );
    server.clock.set(120_000);
    let text = server.text("/metrics").await;
    assert_eq!(
        hot(&text),
        [
            r#"tollgate_hot_identity_rejections{policy="api",identity="mallory"} 3"#,
            r#"tollgate_hot_identity_rejections{policy="api",identity="x-tenant=acme"} 2"#,
            r#"tollgate_hot_identity_rejections{policy="api",identity="route=/x,tenant=t1"} 1"#,
        ]
    );
    assert!(text.contains("# TYPE tollgate_hot_identity_rejections gauge"));
    // By traffic too: every identity decided, admitted or not.
    let decided: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tollgate_hot_identity_decisions{"))
        .collect();
    assert_eq!(
        decided,
        [
            r#"tollgate_hot_identity_decisions{policy="api",identity="mallory"} 4"#,
            r#"tollgate_hot_identity_decisions{policy="api",identity="x-tenant=acme"} 3"#,
            r#"tollgate_hot_identity_decisions{policy="api",identity="route=/x,tenant=t1"} 2"#,
            r#"tollgate_hot_identity_decisions{policy="api",identity="quiet"} 1"#,
        ]
    );
    let listed: serde_json::Value =
        serde_json::from_str(&server.text("/v1/hot").await).expect("JSON");
    assert_eq!(
        listed,
        serde_json::json!({
            "window_ms": 60_000,
            "window_start_ms": 60_000,
            "now_start_ms": 120_000,
            "top": 10,
            "policies": [{
                "policy": "api",
                "by_decisions": [
                    {"identity": "mallory", "decisions": 4, "per_second": 0.067},
                    {"identity": "x-tenant=acme", "decisions": 3, "per_second": 0.05},
                    {"identity": "route=/x,tenant=t1", "decisions": 2, "per_second": 0.033},
                    {"identity": "quiet", "decisions": 1, "per_second": 0.017},
                ],
                "by_rejections": [
                    {"identity": "mallory", "rejections": 3, "per_second": 0.05},
                    {"identity": "x-tenant=acme", "rejections": 2, "per_second": 0.033},
                    {"identity": "route=/x,tenant=t1", "rejections": 1, "per_second": 0.017},
                ],
                "now": {"by_decisions": [], "by_rejections": []},
            }],
        })
    );
    server.clock.set(180_000);
    assert_eq!(
        hot(&server.text("/metrics").await),
        Vec::<String>::new(),
        "a quiet minute"
    );
    server.stop().await;
}

/// By default the hot identity series name identities by a keyed hash of
/// the identity key (never who they are), and without that key there are
/// none; `/v1/hot` (admin) still lists them as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_identity_series_are_hashed_by_default_and_off_without_a_key() {
    let key = "hot-series-test-identity-key-of-32-bytes";
    let hashed = TestServer::start_with_env(&with_capacity(1), |name| {
        (name == "TOLLGATE_IDENTITY_KEY").then(|| key.to_owned())
    })
    .await;
    let unkeyed = TestServer::start(&with_capacity(1)).await;
    for server in [&hashed, &unkeyed] {
        server.clock.set(60_000);
        for _ in 0..2 {
            server
                .check(r#"{"policy":"api","key":"alice@example.com"}"#)
                .await;
        }
        server.clock.set(120_000);
    }
    let series = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("tollgate_hot_identity_"))
            .map(str::to_owned)
            .collect()
    };
    // The identity key's hash of the identity's encoding (the bytes its
    // store key holds), kept apart from the hashes of API keys by its own
    // derivation.
    let material = format!("tollgate hot identity series\0{key}");
    let hash = tollgate_core::SecretHasher::new(material.as_bytes())
        .hash(tollgate_core::Identity::value("alice@example.com").as_bytes());
    let text = hashed.text("/metrics").await;
    assert_eq!(
        series(&text),
        [
            r#"tollgate_hot_identity_decisions{policy="api",identity="hash:HASH"} 2"#,
            r#"tollgate_hot_identity_rejections{policy="api",identity="hash:HASH"} 1"#,
        ]
        .map(|line| line.replace("HASH", &hash))
    );
    assert!(!text.contains("alice"));
    let text = unkeyed.text("/metrics").await;
    assert_eq!(series(&text), Vec::<String>::new());
    assert!(!text.contains("alice"));
    let listed: serde_json::Value =
        serde_json::from_str(&unkeyed.text("/v1/hot").await).expect("JSON");
    assert_eq!(
        listed["policies"][0]["by_rejections"][0]["identity"],
        "alice@example.com"
    );
    hashed.stop().await;
    unkeyed.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_carries_buckets_over_and_mints_no_burst() {
    let server = TestServer::start(V1).await;
    for _ in 0..10 {
        assert_eq!(
            server.check(r#"{"policy":"api","key":"a"}"#).await.1["allowed"],
            true
        );
    }
    for _ in 0..2 {
        server.check(r#"{"policy":"api","key":"b"}"#).await;
    }
    // A higher limit does not refill the emptied bucket.
    std::fs::write(&server.config_path, with_capacity(20)).expect("write");
    server.app.reload().expect("valid config");
    let (_, a) = server.check(r#"{"policy":"api","key":"a"}"#).await;
    assert_eq!(a["allowed"], false);
    assert_eq!(a["limit"], 20);
    assert_eq!(a["remaining"], 0);
    let (_, b) = server.check(r#"{"policy":"api","key":"b","cost":0}"#).await;
    assert_eq!(b["remaining"], 8, "b keeps its 8 tokens");
    // A lower limit caps the bucket.
    std::fs::write(&server.config_path, with_capacity(5)).expect("write");
    server.app.reload().expect("valid config");
    let (_, b) = server.check(r#"{"policy":"api","key":"b","cost":0}"#).await;
    assert_eq!(b["remaining"], 5);
    assert_eq!(b["limit"], 5);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_config_is_refused_and_the_old_one_keeps_serving() {
    let server = TestServer::start(V1).await;
    let before = server.app.live.load().config.hash.clone();
    std::fs::write(
        &server.config_path,
        V1.replace("token_bucket", "leaky_bucket"),
    )
    .expect("write");
    let err = server.app.reload().expect_err("refused").to_string();
    // A reload's refusal (logged as its reason) points at the line as
    // `validate` does.
    let message = r#"policy "api": algorithm: unknown algorithm "leaky_bucket" (expected one of: token_bucket, gcra, fixed_window, sliding_window, sliding_log, concurrency)"#;
    let path = server.config_path.display();
    assert_eq!(
        err,
        format!(
            "{path}: {message}\n --> {path}:4:5\n  |\n2 | policies:\n3 |   - name: api\n4 |     algorithm: leaky_bucket\n  |     ^ {message}\n5 |     capacity: 10\n6 |     refill: {{ tokens: 1, per: 1h }}\n  |"
        )
    );
    assert_eq!(server.app.live.load().config.hash, before);
    assert_eq!(
        server.check(r#"{"policy":"api","key":"x"}"#).await.1["allowed"],
        true
    );
    server.stop().await;
}

/// Reloads racing with 200 concurrent requests on one frozen-clock bucket:
/// exactly the capacity is admitted, whichever config each request saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_under_traffic_admits_no_burst() {
    // Only the test reloads: the file watcher could also read a half-written
    // file that parses (a cut comment) and count one more reload.
    let unwatched = |capacity| {
        format!(
            "server: {{ watch_interval_ms: 0 }}\n{}",
            with_capacity(capacity)
        )
    };
    let server = std::sync::Arc::new(TestServer::start(&unwatched(50)).await);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let s = std::sync::Arc::clone(&server);
        tasks.spawn(async move {
            s.check(r#"{"policy":"api","key":"hot"}"#).await.1["allowed"] == true
        });
    }
    for round in 0..20 {
        // Alternate between two configs of the same capacity, different hash.
        let yaml = format!("{}\n# round {round}\n", unwatched(50));
        std::fs::write(&server.config_path, yaml).expect("write");
        server.app.reload().expect("valid");
        tokio::task::yield_now().await;
    }
    let mut admitted = 0;
    while let Some(ok) = tasks.join_next().await {
        admitted += usize::from(ok.expect("task"));
    }
    assert_eq!(admitted, 50);
    assert_eq!(server.app.metrics.reloads.get(), 20);
}

async fn policy_hash(client: &reqwest::Client, base: &str) -> String {
    let v: serde_json::Value = client
        .get(format!("{base}/v1/policies"))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    v["config_hash"].as_str().expect("hash").to_owned()
}

/// Waits (bounded) until the served config hash differs from `old`.
async fn await_new_hash(client: &reqwest::Client, base: &str, old: &str) -> String {
    for _ in 0..200 {
        let now = policy_hash(client, base).await;
        if now != old {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("config was not reloaded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_reloads_on_sighup_and_on_file_change_and_stops_gracefully_on_sigterm() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("tollgate.yaml");
    // The file watcher is off first, so only SIGHUP can reload.
    let config = |cap: u64, watch: u64| {
        format!(
            "server: {{watch_interval_ms: {watch}}}\n{}",
            with_capacity(cap)
        )
    };
    std::fs::write(&path, config(10, 0)).expect("write");
    let process = TollgateProcess::spawn(&path, &[]);
    let client = reqwest::Client::new();
    let first = policy_hash(&client, &process.base).await;
    std::fs::write(&path, config(11, 0)).expect("write");
    process.signal("HUP");
    let second = await_new_hash(&client, &process.base, &first).await;
    let v: serde_json::Value = client
        .get(format!("{}/v1/policies", process.base))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(v["policies"][0]["capacity"], 11);
    drop(process);

    // With the watcher on, writing the file is enough.
    std::fs::write(&path, config(12, 50)).expect("write");
    let mut process = TollgateProcess::spawn(&path, &[]);
    let third = policy_hash(&client, &process.base).await;
    assert_ne!(third, second);
    std::fs::write(&path, config(13, 50)).expect("write");
    await_new_hash(&client, &process.base, &third).await;

    process.signal("TERM");
    let status = process.child.wait().expect("wait");
    assert!(status.success(), "SIGTERM is a clean stop: {status:?}");
}

#[test]
fn server_settings_out_of_range_are_refused_with_their_reason() {
    let refused = |server: &str| {
        let yaml = format!("server: {server}\n{V1}");
        match tollgate::ServeConfig::parse(&yaml, |_| None) {
            Ok(_) => panic!("accepted server: {server}"),
            Err(e) => e.to_string(),
        }
    };
    assert_eq!(
        refused("{http_workers: 5000}"),
        "config: server: http_workers 5000 is more than 1024"
    );
    assert_eq!(
        refused("{max_connections: 0}"),
        "config: server: max_connections must be positive"
    );
    assert_eq!(
        refused("{request_timeout_ms: 0}"),
        "config: server: request_timeout_ms must be positive"
    );
    assert_eq!(
        refused("{deny_status: 200}"),
        "config: server: deny_status 200 is not an HTTP error status (400-599)"
    );
    let empty = tollgate::ServeConfig::parse("policies: []\n", |_| None)
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        empty.as_deref(),
        Some(
            "config: `policies` is empty: a config needs at least one policy (or envoy_ratelimit_configs)"
        )
    );
}

/// Past `server.max_connections` open connections a new one is closed on
/// arrival and counted; once one closes, new ones are served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_max_connections_are_refused_and_counted() {
    let server = TestServer::start(&format!("server: {{max_connections: 1}}\n{V1}")).await;
    let addr = server.url("").trim_start_matches("http://").to_owned();
    let held = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("the first connection");
    // Make sure the acceptor has taken the first one before the second.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let fresh = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .expect("a client")
    };
    let refused = fresh().get(server.url("/healthz")).send().await;
    assert!(
        refused.is_err(),
        "served beyond max_connections: {refused:?}"
    );
    drop(held);
    // Until the server sees the close, a new connection is refused too.
    let (mut served, mut refusals) = (None, 1);
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        match fresh().get(server.url("/metrics")).send().await {
            Ok(r) => {
                served = Some(r.text().await.expect("metrics"));
                break;
            }
            Err(_) => refusals += 1,
        }
    }
    let metrics = served.expect("served again once the first connection closed");
    let line = format!("tollgate_refused_connections_total {refusals}");
    assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    server.stop().await;
}
