//! A retry is charged once through every door: `"request_id"` on
//! `/v1/check`, `Idempotency-Key` on `/v1/authorize`, in-process on a
//! manual clock (memory store), then real `tollgate serve` processes on one
//! Redis and on a Redis Cluster.

mod support;

use std::sync::Arc;

use serde_json::json;
use support::{TestServer, TollgateProcess};
use tollgate_testkit::{RedisCluster, RedisServer};

const POLICIES: &str = r#"
server:
  trusted_proxies: [127.0.0.1]
policies:
  - name: orders
    algorithm: token_bucket
    capacity: 2
    refill: { tokens: 1, per: 1h }
    retry_window: 1s
    client_request_ids: true
    match: { path_prefix: /orders }
    identity:
      - header: X-Tenant
    cost: { header: X-Cost, max: 2, default: 1 }
  - name: reports
    algorithm: fixed_window
    limit: 10
    window: 1h
    match: { path_prefix: /reports }
    identity:
      - header: X-Tenant
  - name: no-ids
    algorithm: fixed_window
    limit: 10
    window: 1h
    retry_window: "off"
    match: { path_prefix: /none }
    identity:
      - header: X-Tenant
"#;

async fn authorize(server: &TestServer, uri: &str, extra: &[(&str, &str)]) -> reqwest::Response {
    let mut req = server
        .client
        .get(server.url("/v1/authorize"))
        .header("x-original-method", "GET")
        .header("x-original-uri", uri)
        .header("x-tenant", "acme");
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    req.send().await.expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_token_left_a_retry_is_replayed_and_a_new_request_rejected() {
    let server = TestServer::start(POLICIES).await;
    let one = r#"{"policy":"orders","key":"acme"}"#;
    let (_, spent) = server.check(one).await;
    assert_eq!(spent["remaining"], 1);
    let attempt = r#"{"policy":"orders","key":"acme","request_id":"order-17"}"#;
    let (status, first) = server.check(attempt).await;
    assert_eq!(status, 200);
    assert_eq!(
        first,
        json!({"allowed": true, "policy": "orders", "limit": 2, "remaining": 0, "retry_after_ms": 0, "reset_after_ms": 7_200_000})
    );
    server.clock.advance(500);
    let (status, retry) = server.check(attempt).await;
    assert_eq!(status, 200);
    assert_eq!(
        retry,
        json!({"allowed": true, "policy": "orders", "limit": 2, "remaining": 0, "retry_after_ms": 0, "reset_after_ms": 7_199_500, "replayed": true})
    );
    let (_, new) = server
        .check(r#"{"policy":"orders","key":"acme","request_id":"order-18"}"#)
        .await;
    assert_eq!(
        new,
        json!({"allowed": false, "policy": "orders", "limit": 2, "remaining": 0, "retry_after_ms": 3_599_500, "reset_after_ms": 7_199_500})
    );
    let metrics = server.text("/metrics").await;
    assert!(
        metrics.contains("tollgate_replayed_decisions_total{policy=\"orders\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tollgate_decisions_total{policy=\"orders\",outcome=\"allowed\"} 3"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_its_window_is_a_new_request() {
    let server = TestServer::start(POLICIES).await;
    let attempt = r#"{"policy":"orders","key":"acme","request_id":"order-17"}"#;
    server.check(attempt).await;
    server.clock.advance(999);
    let (_, inside) = server.check(attempt).await;
    assert_eq!(inside["replayed"], true);
    assert_eq!(inside["remaining"], 1);
    server.clock.advance(1);
    let (_, after) = server.check(attempt).await;
    assert_eq!(after["replayed"], serde_json::Value::Null);
    assert_eq!(after["remaining"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_cost_under_one_id_is_a_422_and_charges_nothing() {
    let server = TestServer::start(POLICIES).await;
    server
        .check(r#"{"policy":"reports","key":"acme","cost":3,"request_id":"r-1"}"#)
        .await;
    let (status, problem) = server
        .check(r#"{"policy":"reports","key":"acme","cost":4,"request_id":"r-1"}"#)
        .await;
    assert_eq!(status, 422);
    assert_eq!(
        problem["detail"],
        "this request id was first admitted for a different request (other policies, identities, costs, or method and path): a retry must repeat its request, and a new request needs a new id"
    );
    let (_, peek) = server
        .check(r#"{"policy":"reports","key":"acme","cost":0}"#)
        .await;
    assert_eq!(peek["remaining"], 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_covered_by_its_one_id_and_replays_whole() {
    let server = TestServer::start(POLICIES).await;
    let batch = r#"{"request_id":"batch-1","checks":[
        {"policy":"reports","key":"acme","cost":2},
        {"policy":"orders","key":"acme","cost":1}]}"#;
    let (_, first) = server.check(batch).await;
    assert_eq!(first["allowed"], true);
    assert_eq!(first["replayed"], serde_json::Value::Null);
    let (_, again) = server.check(batch).await;
    assert_eq!(
        again,
        json!({"allowed": true, "replayed": true, "decisions": [
            {"allowed": true, "policy": "reports", "limit": 10, "remaining": 8, "retry_after_ms": 0, "reset_after_ms": 2_800_000, "replayed": true},
            {"allowed": true, "policy": "orders", "limit": 2, "remaining": 1, "retry_after_ms": 0, "reset_after_ms": 3_600_000, "replayed": true},
        ]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ids_are_refused_with_their_fault_and_no_id_changes_nothing() {
    let server = TestServer::start(POLICIES).await;
    let long = "x".repeat(256);
    let (status, problem) = server
        .check(&format!(
            r#"{{"policy":"reports","key":"acme","request_id":"{long}"}}"#
        ))
        .await;
    assert_eq!(status, 400);
    assert_eq!(
        problem["detail"],
        "request_id: request id is 256 bytes long; at most 255 are allowed"
    );
    let (status, problem) = server
        .check(r#"{"policy":"reports","key":"acme","request_id":""}"#)
        .await;
    assert_eq!(status, 400);
    assert_eq!(problem["detail"], "request_id: request id is empty");
    // Nothing was charged by the refusals, and without an id every call
    // is charged (and the answer has no `replayed`).
    for remaining in [9, 8] {
        let (_, plain) = server.check(r#"{"policy":"reports","key":"acme"}"#).await;
        assert_eq!(
            plain,
            json!({"allowed": true, "policy": "reports", "limit": 10, "remaining": remaining, "retry_after_ms": 0, "reset_after_ms": 2_800_000})
        );
    }
    // A policy with retry_window: off keeps no ids: each call is charged.
    for remaining in [9, 8] {
        let (_, off) = server
            .check(r#"{"policy":"no-ids","key":"acme","request_id":"same"}"#)
            .await;
        assert_eq!(off["remaining"], remaining);
        assert_eq!(off["replayed"], serde_json::Value::Null);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_auth_reads_idempotency_key() {
    let server = TestServer::start(&POLICIES.replace(
        "server:\n",
        "server:\n  request_id_header: Idempotency-Key\n",
    ))
    .await;
    let key = [("idempotency-key", "\"8e03978e-40d5-43e8\"")];
    let first = authorize(&server, "/orders/new", &key).await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers().get("tollgate-replayed"), None);
    assert_eq!(first.headers()["ratelimit"], "\"orders\";r=1;t=3600");
    let retry = authorize(&server, "/orders/new", &key).await;
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["tollgate-replayed"], "true");
    assert_eq!(retry.headers()["ratelimit"], "\"orders\";r=1;t=3600");
    // The same id with another cost: 422, with the problem in a header for
    // proxies that drop the body (nginx's auth_request).
    let other = authorize(&server, "/orders/new", &[key[0], ("x-cost", "2")]).await;
    assert_eq!(other.status(), 422);
    let problem: serde_json::Value =
        serde_json::from_str(other.headers()["tollgate-problem"].to_str().expect("ascii"))
            .expect("json");
    assert_eq!(problem["status"], 422);
    // An id sent twice is ambiguous: 400.
    let twice = server
        .client
        .get(server.url("/v1/authorize"))
        .header("x-original-method", "GET")
        .header("x-original-uri", "/orders/new")
        .header("x-tenant", "acme")
        .header("idempotency-key", "a")
        .header("idempotency-key", "b")
        .send()
        .await
        .expect("request");
    assert_eq!(twice.status(), 400);
    let fresh = authorize(&server, "/orders/new", &[("idempotency-key", "other")]).await;
    assert_eq!(fresh.headers()["ratelimit"], "\"orders\";r=0;t=7200");
}

/// The example's shape: every request is charged per address, logins and
/// exports on their own limits, and forward auth reads `Idempotency-Key`
/// for the policies that ask for client ids (not the login).
const EXAMPLE: &str = r#"
server:
  trusted_proxies: [127.0.0.1]
  request_id_header: Idempotency-Key
policies:
  - name: per-ip
    algorithm: fixed_window
    limit: 1000
    window: 1h
    client_request_ids: true
    identity: [client_ip]
  - name: login
    algorithm: fixed_window
    limit: 5
    window: 10m
    match: { methods: [POST], path: /login }
    identity: [client_ip]
  - name: exports
    algorithm: fixed_window
    limit: 100
    window: 1h
    match: { path_prefix: /api/exports }
    client_request_ids: true
    identity:
      - header: X-Tenant
    cost: { header: X-Export-Rows-Thousands, max: 100, default: 1 }
"#;

/// A forwarded `method uri` from 198.51.100.7 with `headers`.
async fn forwarded(
    server: &TestServer,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut req = server
        .client
        .get(server.url("/v1/authorize"))
        .header("x-original-method", method)
        .header("x-original-uri", uri)
        .header("x-forwarded-for", "198.51.100.7");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.expect("request")
}

/// (status, replayed) of each answer.
async fn outcomes(answers: Vec<reqwest::Response>) -> Vec<(u16, bool)> {
    answers
        .iter()
        .map(|r| {
            let replayed = r.headers().get("tollgate-replayed").is_some();
            (r.status().as_u16(), replayed)
        })
        .collect()
}

/// The attack: one `GET /api/exports/x` recorded under an id, then `POST
/// /login` from the same address with the same id. Before, the record of
/// the first check (`per-ip`) and its costs (`1,1`) matched, so every login
/// was admitted from it and the login limit never charged; later a login
/// replayed its own record under one id for ever. The login does not ask
/// for client ids: each is charged, exactly five admitted, none replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_ids_record_does_not_admit_logins_on_another_path() {
    let server = TestServer::start(EXAMPLE).await;
    let key = ("idempotency-key", "k-1");
    let export = forwarded(
        &server,
        "GET",
        "/api/exports/x",
        &[key, ("x-tenant", "acme")],
    )
    .await;
    assert_eq!(export.status(), 200);
    let mut reused = Vec::new();
    for _ in 0..10 {
        reused.push(forwarded(&server, "POST", "/login", &[key]).await);
    }
    let mut want = vec![(200, false); 5];
    want.extend([(429, false); 5]);
    assert_eq!(outcomes(reused).await, want);
    let mut logins = Vec::new();
    for i in 0..3 {
        let own = format!("login-{i}");
        logins.push(forwarded(&server, "POST", "/login", &[("idempotency-key", &own)]).await);
    }
    assert_eq!(outcomes(logins).await, vec![(429, false); 3]);
    // The export's own retry still replays.
    let retry = forwarded(
        &server,
        "GET",
        "/api/exports/x",
        &[key, ("x-tenant", "acme")],
    )
    .await;
    assert_eq!(retry.headers()["tollgate-replayed"], "true");
}

/// The attack: a tenant whose export budget is spent sends another
/// tenant's id from the same address. Before, the first check's record
/// (`per-ip`) matched, and the spent tenant was admitted from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_record_does_not_admit_a_spent_tenant() {
    let server = TestServer::start(EXAMPLE).await;
    let acme = [("idempotency-key", "acme-export"), ("x-tenant", "acme")];
    assert_eq!(
        forwarded(&server, "GET", "/api/exports/x", &acme)
            .await
            .status(),
        200
    );
    let spend = [("x-tenant", "globex"), ("x-export-rows-thousands", "100")];
    assert_eq!(
        forwarded(&server, "GET", "/api/exports/y", &spend)
            .await
            .status(),
        200
    );
    let borrowed = [("idempotency-key", "acme-export"), ("x-tenant", "globex")];
    let mut answers = Vec::new();
    for _ in 0..10 {
        answers.push(forwarded(&server, "GET", "/api/exports/x", &borrowed).await);
    }
    assert_eq!(outcomes(answers).await, vec![(422, false); 10]);
    // globex's budget is spent still; acme's own retry still replays.
    let own = [("idempotency-key", "globex-own"), ("x-tenant", "globex")];
    assert_eq!(
        forwarded(&server, "GET", "/api/exports/x", &own)
            .await
            .status(),
        429
    );
    let retry = forwarded(&server, "GET", "/api/exports/x", &acme).await;
    assert_eq!(retry.headers()["tollgate-replayed"], "true");
}

/// On forward auth the id is the client's own header: unless a config
/// names it, a client reusing one `Idempotency-Key` is charged every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_auth_ignores_client_ids_unless_configured() {
    let server = TestServer::start(POLICIES).await;
    let key = [("idempotency-key", "same-every-time")];
    let statuses = [
        authorize(&server, "/orders/new", &key).await,
        authorize(&server, "/orders/new", &key).await,
        authorize(&server, "/orders/new", &key).await,
    ]
    .map(|r| {
        (
            r.status().as_u16(),
            r.headers().get("tollgate-replayed").is_some(),
        )
    });
    assert_eq!(statuses, [(200, false), (200, false), (429, false)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_id_header_is_configurable() {
    let server = TestServer::start(
        &POLICIES.replace("server:\n", "server:\n  request_id_header: X-Request-Id\n"),
    )
    .await;
    let key = [("x-request-id", "req-1")];
    authorize(&server, "/orders/new", &key).await;
    let retry = authorize(&server, "/orders/new", &key).await;
    assert_eq!(retry.headers()["tollgate-replayed"], "true");
    // Idempotency-Key is now just a header.
    let other = [("idempotency-key", "req-1")];
    authorize(&server, "/orders/new", &other).await;
    let charged = authorize(&server, "/orders/new", &other).await;
    assert_eq!(charged.status(), 429);
}

// ---------- real processes on a shared Redis ----------

fn redis_config(store: &str) -> String {
    format!(
        "server: {{watch_interval_ms: 0}}\nstore:\n  redis:\n    timeout: 10s\n{store}\npolicies:\n  - name: shared\n    algorithm: token_bucket\n    capacity: 100\n    refill: {{ tokens: 1, per: 1h }}\n"
    )
}

/// The same request id sent by 40 clients at once, alternating between two
/// processes: every one admitted, one charged for each three replays (a
/// record answers `MAX_REPLAYS`, so 10 charged and 30 replayed, never one
/// charge for all); then once more, sequentially, through each: the last
/// record's replays are used up, so the first is charged and recorded
/// afresh, and the second replays it.
async fn charged_once_per_four_attempts(processes: &[TollgateProcess]) {
    let attempts = 40;
    let client = reqwest::Client::new();
    let body = Arc::new(r#"{"policy":"shared","key":"acme","cost":7,"request_id":"once"}"#);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..attempts {
        let url = format!("{}/v1/check", processes[i % processes.len()].base);
        let (client, body) = (client.clone(), Arc::clone(&body));
        tasks.spawn(async move {
            let r = client
                .post(url)
                .body(body.to_string())
                .send()
                .await
                .expect("request");
            assert_eq!(r.status(), 200);
            r.json::<serde_json::Value>().await.expect("json")
        });
    }
    let mut replayed = 0;
    while let Some(answer) = tasks.join_next().await {
        let answer = answer.expect("task");
        assert_eq!(answer["allowed"], true, "{answer}");
        replayed += usize::from(answer["replayed"] == true);
    }
    assert_eq!(replayed, 30);
    for (process, replayed) in processes.iter().zip([false, true]) {
        let answer: serde_json::Value = client
            .post(format!("{}/v1/check", process.base))
            .body(body.to_string())
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json");
        assert_eq!(
            (
                answer.get("replayed").is_some(),
                answer["remaining"].clone()
            ),
            (replayed, json!(100 - 11 * 7))
        );
    }
    // A new id is a new request.
    let answer: serde_json::Value = client
        .post(format!("{}/v1/check", processes[1].base))
        .body(r#"{"policy":"shared","key":"acme","cost":7,"request_id":"twice"}"#)
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(answer["remaining"], 100 - 12 * 7);
}

fn two(config_text: &str, dir: &tempfile::TempDir) -> Vec<TollgateProcess> {
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, config_text).expect("write");
    (0..2).map(|_| TollgateProcess::spawn(&path, &[])).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_one_redis_charge_one_id_once_per_four_attempts() {
    let redis = RedisServer::start().expect("redis-server");
    let dir = tempfile::tempdir().expect("dir");
    let processes = two(&redis_config(&format!("    url: {}", redis.url())), &dir);
    charged_once_per_four_attempts(&processes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_a_redis_cluster_charge_one_id_once_per_four_attempts() {
    let cluster = RedisCluster::start(3).expect("redis cluster");
    let nodes: Vec<String> = cluster
        .urls()
        .iter()
        .map(|url| format!("      - {url}"))
        .collect();
    let dir = tempfile::tempdir().expect("dir");
    let processes = two(
        &redis_config(&format!("    cluster:\n{}", nodes.join("\n"))),
        &dir,
    );
    charged_once_per_four_attempts(&processes).await;
}
