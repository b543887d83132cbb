//! Failure is a policy: with its Redis paused (SIGSTOP) or killed, each
//! policy does what it declared, degraded decisions are marked and counted,
//! the circuit opens and closes, and shared decisions resume exactly.

mod support;

use std::time::Duration;

use serde_json::json;
use support::TestServer;
use tollgate_testkit::RedisServer;

fn config(redis_url: &str) -> String {
    format!(
        r#"
server: {{ watch_interval_ms: 0, trusted_proxies: [127.0.0.1] }}
store:
  redis: {{ url: "{redis_url}", timeout: 300ms, rejected_cache: 0 }}
policies:
  - name: open
    algorithm: gcra
    capacity: 5
    refill: {{ tokens: 1, per: 1h }}
  - name: closed
    algorithm: token_bucket
    capacity: 5
    refill: {{ tokens: 1, per: 1h }}
    on_store_failure: fail_closed
    match: {{ path_prefix: /login }}
    identity: [{{ literal: everyone }}]
  - name: local
    algorithm: fixed_window
    limit: 10
    window: 1h
    on_store_failure: local
    local_share_percent: 40
"#
    )
}

async fn metrics_text(server: &TestServer) -> String {
    server
        .client
        .get(server.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text")
}

async fn metric(server: &TestServer, name: &str) -> Option<f64> {
    metrics_text(server)
        .await
        .lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Failed store calls, all kinds together.
async fn store_errors(server: &TestServer) -> f64 {
    metrics_text(server)
        .await
        .lines()
        .filter(|l| l.starts_with("tollgate_store_errors_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Resumes a paused Redis once a real cool-down (1 s) has passed. The
/// tests pass the cool-down on their own clock at once, but a connection
/// the outage started opening times out on the real one (300 ms): a probe
/// sent sooner would join that opening and fail with it, which a real
/// cool-down never allows.
async fn resume_after_a_real_cool_down(redis: &RedisServer) {
    tokio::time::sleep(Duration::from_secs(1)).await;
    redis.resume().expect("SIGCONT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_store_is_answered_by_each_policys_failure_mode_and_recovers_exactly() {
    let redis = RedisServer::start().expect("redis-server");
    let server = TestServer::start(&config(&redis.url())).await;

    let (_, healthy) = server.check(r#"{"policy":"open","key":"steady"}"#).await;
    assert_eq!(healthy["remaining"], 4);
    assert!(healthy.get("degraded").is_none());

    redis.pause().expect("SIGSTOP");
    // Admitted with no store counting: no budget is claimed.
    let (_, open) = server.check(r#"{"policy":"open","key":"outage"}"#).await;
    assert_eq!(
        open,
        json!({"allowed": true, "policy": "open", "limit": 5, "remaining": 0, "retry_after_ms": 0, "reset_after_ms": 0, "degraded": true, "path": "fail_open"})
    );
    let (_, closed) = server.check(r#"{"policy":"closed","key":"outage"}"#).await;
    assert_eq!(
        closed,
        json!({"allowed": false, "policy": "closed", "limit": 5, "remaining": 0, "retry_after_ms": 1000, "reset_after_ms": 0, "degraded": true, "path": "fail_closed"})
    );
    // local: 40% of 10 in this process, then rejected.
    let mut local = Vec::new();
    for _ in 0..5 {
        let (_, d) = server.check(r#"{"policy":"local","key":"outage"}"#).await;
        assert_eq!(d["path"], "local");
        local.push((
            d["allowed"].clone(),
            d["remaining"].clone(),
            d["limit"].clone(),
        ));
    }
    assert_eq!(
        local,
        vec![
            (json!(true), json!(3), json!(4)),
            (json!(true), json!(2), json!(4)),
            (json!(true), json!(1), json!(4)),
            (json!(true), json!(0), json!(4)),
            (json!(false), json!(0), json!(4)),
        ]
    );
    // Five consecutive timeouts opened the circuit: no more store calls.
    assert_eq!(
        metric(
            &server,
            r#"tollgate_store_circuit_state{role="global",state="open"}"#
        )
        .await,
        Some(1.0)
    );
    // Timeouts, or the connection giving up on the stalled server first.
    let errors = store_errors(&server).await;
    assert_eq!(errors, 5.0);
    let r = server
        .client
        .get(server.url("/v1/authorize"))
        .header("x-original-uri", "/login")
        .send()
        .await
        .expect("authorize");
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["tollgate-degraded"], "fail_closed");
    assert_eq!(r.headers()["retry-after"], "1");
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(
        body["detail"],
        "the limiter could not decide: its shared store is unavailable, and a matching policy fails closed"
    );
    assert_eq!(body["violated-policies"], json!(["closed"]));
    assert_eq!(
        store_errors(&server).await,
        errors,
        "an open circuit skips the store"
    );
    assert_eq!(
        metric(
            &server,
            r#"tollgate_degraded_decisions_total{path="local",outcome="allowed"}"#
        )
        .await,
        Some(4.0)
    );
    assert_eq!(
        metric(
            &server,
            r#"tollgate_degraded_decisions_total{path="local",outcome="rejected"}"#
        )
        .await,
        Some(1.0)
    );

    resume_after_a_real_cool_down(&redis).await;
    // After the cool-down, one probe goes through and closes the circuit.
    server.clock.advance(1_000);
    let (_, resumed) = server.check(r#"{"policy":"open","key":"steady"}"#).await;
    // Redis decides on its own clock, so the reset has moved on by the real
    // time the test took; everything else is exact.
    assert_eq!(resumed["allowed"], true);
    assert_eq!(
        resumed["remaining"], 3,
        "the shared state from before the outage is intact"
    );
    assert!(resumed.get("degraded").is_none());
    let reset = resumed["reset_after_ms"].as_u64().expect("reset");
    assert!((7_000_000..=7_200_000).contains(&reset), "{reset}");
    assert_eq!(
        metric(
            &server,
            r#"tollgate_store_circuit_state{role="global",state="closed"}"#
        )
        .await,
        Some(1.0)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_store_falls_back_and_a_restarted_empty_one_decides_exactly() {
    let mut redis = RedisServer::start().expect("redis-server");
    let server = TestServer::start(&config(&redis.url())).await;
    assert_eq!(
        server.check(r#"{"policy":"open","key":"k"}"#).await.1["remaining"],
        4
    );
    redis.kill().expect("SIGKILL");
    for _ in 0..6 {
        let (status, d) = server.check(r#"{"policy":"open","key":"k"}"#).await;
        assert_eq!(status, 200);
        assert_eq!(d["path"], "fail_open");
    }
    let (_, d) = server.check(r#"{"policy":"closed","key":"k"}"#).await;
    assert_eq!(d["path"], "fail_closed");
    redis.restart().expect("restart on the same port");
    // Probe until the reconnect succeeds (each probe follows a cool-down).
    // A key per attempt: a probe that timed out may still have been applied.
    let mut recovered = None;
    for attempt in 0..50 {
        server.clock.advance(1_000);
        let body = format!(r#"{{"policy":"open","key":"fresh-{attempt}"}}"#);
        let (_, d) = server.check(&body).await;
        if d.get("degraded").is_none() {
            recovered = Some((body, d));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (body, d) = recovered.expect("the store came back");
    assert_eq!(
        d["remaining"], 4,
        "a restarted, empty Redis starts the key full"
    );
    let (_, d) = server.check(&body).await;
    assert_eq!(d["remaining"], 3);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_change_while_the_store_is_down_applies_to_the_local_budget() {
    let redis = RedisServer::start().expect("redis-server");
    let text = config(&redis.url());
    let server = TestServer::start(&text).await;
    redis.pause().expect("SIGSTOP");
    std::fs::write(
        &server.config_path,
        text.replace("local_share_percent: 40", "local_share_percent: 20"),
    )
    .expect("write");
    server.app.reload().expect("a reload needs no store");
    let (_, d) = server.check(r#"{"policy":"local","key":"r"}"#).await;
    assert_eq!(d["path"], "local");
    assert_eq!(d["limit"], 2);
    assert_eq!(d["remaining"], 1);
    redis.resume().expect("SIGCONT");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_requests_during_an_outage_are_all_answered_and_leave_no_tasks() {
    let redis = RedisServer::start().expect("redis-server");
    let server = std::sync::Arc::new(TestServer::start(&config(&redis.url())).await);
    let metrics = tokio::runtime::Handle::current().metrics();
    server.check(r#"{"policy":"open","key":"warm"}"#).await;
    let baseline = metrics.num_alive_tasks();
    redis.pause().expect("SIGSTOP");
    // A client of its own, so its connections close when it is dropped.
    let burst = reqwest::Client::new();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..1000 {
        let (client, url) = (burst.clone(), server.url("/v1/check"));
        tasks.spawn(async move {
            let r = client
                .post(url)
                .body(format!(r#"{{"policy":"open","key":"k{i}"}}"#))
                .send()
                .await
                .expect("request");
            let status = r.status().as_u16();
            let d: serde_json::Value = r.json().await.expect("json");
            (status, d["path"].as_str().map(str::to_owned))
        });
    }
    let mut answered = 0;
    while let Some(result) = tasks.join_next().await {
        let (status, path) = result.expect("task");
        assert_eq!(status, 200);
        assert_eq!(path.as_deref(), Some("fail_open"));
        answered += 1;
    }
    assert_eq!(answered, 1000);
    drop(burst);
    redis.resume().expect("SIGCONT");
    // Once the burst's connections close, no task it caused is left.
    let mut alive = metrics.num_alive_tasks();
    for _ in 0..100 {
        if alive <= baseline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        alive = metrics.num_alive_tasks();
    }
    assert!(
        alive <= baseline,
        "tasks alive: {alive}, before the outage: {baseline}"
    );
    let server = std::sync::Arc::into_inner(server).expect("sole owner");
    server.stop().await;
}

const EXACT: &str = r#"
  - name: exact
    algorithm: token_bucket
    capacity: 20
    refill: { tokens: 1, per: 1h }
    on_store_failure: fail_closed
"#;

/// `count` sequential-in-batches /v1/check calls on one key; returns
/// (admitted, degraded).
async fn spend(server: &TestServer, count: usize) -> (usize, usize) {
    let (mut admitted, mut degraded) = (0, 0);
    for _ in 0..count / 10 {
        let mut batch = tokio::task::JoinSet::new();
        for _ in 0..10 {
            let (client, url) = (server.client.clone(), server.url("/v1/check"));
            batch.spawn(async move {
                let r = client
                    .post(url)
                    .body(r#"{"policy":"exact","key":"k"}"#)
                    .send()
                    .await
                    .expect("request");
                let d: serde_json::Value = r.json().await.expect("json");
                (d["allowed"] == true, d.get("degraded").is_some())
            });
        }
        while let Some(r) = batch.join_next().await {
            let (ok, deg) = r.expect("task");
            admitted += usize::from(ok);
            degraded += usize::from(deg);
        }
    }
    (admitted, degraded)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_store_within_the_timeout_still_decides_exactly() {
    let redis = RedisServer::start().expect("redis-server");
    let text = config(&redis.url()).replace("timeout: 300ms", "timeout: 5s") + EXACT;
    let server = TestServer::start(&text).await;
    // Another client keeps the server busy 100 ms at a time.
    let port = redis.port();
    let slow = std::thread::spawn(move || {
        for _ in 0..10 {
            let _ = tollgate_testkit::cli(port, &["DEBUG", "SLEEP", "0.1"]);
        }
    });
    let (admitted, degraded) = spend(&server, 100).await;
    slow.join().expect("slow client");
    assert_eq!((admitted, degraded), (20, 0));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_dropped_mid_traffic_never_over_admit_a_fail_closed_policy() {
    let redis = RedisServer::start().expect("redis-server");
    let text = config(&redis.url()) + EXACT;
    let server = TestServer::start(&text).await;
    let port = redis.port();
    let killer = std::thread::spawn(move || {
        for _ in 0..20 {
            let _ =
                tollgate_testkit::cli(port, &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let (admitted, _) = spend(&server, 100).await;
    killer.join().expect("killer");
    assert!(admitted <= 20, "admitted {admitted} of a capacity of 20");
    // Once the connection is back, the shared bucket is exactly where the
    // store says: never more than the capacity in all.
    server.clock.advance(2_000);
    let mut shared_left = None;
    for _ in 0..50 {
        let (_, d) = server
            .check(r#"{"policy":"exact","key":"k","cost":0}"#)
            .await;
        if d.get("degraded").is_none() {
            shared_left = d["remaining"].as_u64();
            break;
        }
        server.clock.advance(1_000);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let left = shared_left.expect("the store came back");
    assert!(
        admitted as u64 + left <= 20,
        "admitted {admitted}, {left} left"
    );
    server.stop().await;
}

/// Ready means "can answer every policy per its failure mode", which holds
/// with the store down: readiness never pulls a fleet during a store
/// outage. The store's state is a field and a gauge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_holds_through_a_store_outage_and_reports_the_store() {
    let mut redis = RedisServer::start().expect("redis-server");
    let server = TestServer::start(&config(&redis.url())).await;
    let ready = || async {
        let r = server
            .client
            .get(server.url("/readyz"))
            .send()
            .await
            .expect("readyz");
        (r.status().as_u16(), r.text().await.expect("body"))
    };
    assert_eq!(
        ready().await,
        (
            200,
            r#"{"ready":true,"store":"up","stores":{"global":"up"}}"#.to_owned()
        )
    );
    assert_eq!(
        metric(&server, r#"tollgate_store_up{role="global"}"#).await,
        Some(1.0)
    );
    redis.kill().expect("kill redis");
    assert_eq!(
        ready().await,
        (
            200,
            r#"{"ready":true,"store":"down","stores":{"global":"down"}}"#.to_owned()
        )
    );
    assert_eq!(
        metric(&server, r#"tollgate_store_up{role="global"}"#).await,
        Some(0.0)
    );
    // And each policy answers per its failure mode meanwhile.
    let (status, open) = server.check(r#"{"policy":"open","key":"r"}"#).await;
    assert_eq!(
        (status, &open["allowed"], &open["path"]),
        (200, &json!(true), &json!("fail_open"))
    );
    redis.restart().expect("restart redis");
    let mut up = ready().await;
    for _ in 0..50 {
        if up.1.contains("\"up\"") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        up = ready().await;
    }
    assert_eq!(
        up,
        (
            200,
            r#"{"ready":true,"store":"up","stores":{"global":"up"}}"#.to_owned()
        )
    );
    assert_eq!(
        metric(&server, r#"tollgate_store_up{role="global"}"#).await,
        Some(1.0)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_circuit_cools_down_on_the_monotonic_clock_whatever_the_wall_clock_does() {
    let redis = RedisServer::start().expect("redis-server");
    let server = TestServer::start(&config(&redis.url())).await;
    assert_eq!(
        server.check(r#"{"policy":"open","key":"steady"}"#).await.1["remaining"],
        4
    );
    redis.pause().expect("SIGSTOP");
    // (The stalled calls run when Redis resumes: on their own key.)
    for _ in 0..5 {
        let (_, d) = server.check(r#"{"policy":"open","key":"outage"}"#).await;
        assert_eq!(d["path"], "fail_open");
    }
    assert_eq!(
        metric(
            &server,
            r#"tollgate_store_circuit_state{role="global",state="open"}"#
        )
        .await,
        Some(1.0),
        "five timeouts opened the circuit"
    );
    resume_after_a_real_cool_down(&redis).await;
    // The wall clock steps back 30 s; the cool-down (1 s) then passes on
    // the monotonic clock alone.
    let now_ms = tollgate_core::Clock::now_ms(&*server.clock);
    server.clock.set(now_ms - 30_000);
    server.clock.advance(999);
    let (_, skipped) = server.check(r#"{"policy":"open","key":"steady"}"#).await;
    assert_eq!(
        skipped["path"], "fail_open",
        "1 ms before the cool-down ends"
    );
    server.clock.advance(1);
    let (_, probed) = server.check(r#"{"policy":"open","key":"steady"}"#).await;
    assert!(
        probed.get("degraded").is_none(),
        "a cool-down after the circuit opened, the probe goes to the store: {probed}"
    );
    assert_eq!(probed["remaining"], 3);
    assert_eq!(
        metric(
            &server,
            r#"tollgate_store_circuit_state{role="global",state="closed"}"#
        )
        .await,
        Some(1.0)
    );
    server.stop().await;
}

/// A fail-open admission claims no budget, and forward auth's RateLimit
/// field says the same as the body: nothing is known to be left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_open_admission_claims_no_remaining_budget() {
    let redis = RedisServer::start().expect("redis-server");
    let server = TestServer::start(&format!(
        r#"
server: {{ watch_interval_ms: 0, trusted_proxies: [127.0.0.1] }}
store:
  redis: {{ url: "{}", timeout: 300ms, rejected_cache: 0 }}
policies:
  - name: open
    algorithm: token_bucket
    capacity: 5
    refill: {{ tokens: 1, per: 1h }}
    identity: [{{ literal: everyone }}]
"#,
        redis.url()
    ))
    .await;
    redis.pause().expect("SIGSTOP");
    let r = server
        .client
        .get(server.url("/v1/authorize"))
        .header("x-original-method", "GET")
        .header("x-original-uri", "/anything")
        .send()
        .await
        .expect("authorize");
    let header = |name: &str| r.headers().get(name).and_then(|v| v.to_str().ok());
    assert_eq!(
        (
            r.status().as_u16(),
            header("ratelimit"),
            header("ratelimit-policy"),
            header("tollgate-degraded")
        ),
        (
            200,
            Some("\"open\";r=0;t=0"),
            Some("\"open\";q=5;w=18000"),
            Some("fail_open")
        )
    );
    redis.resume().expect("SIGCONT");
    server.stop().await;
}
