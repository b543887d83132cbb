//! Concurrency permits over real HTTP: `/v1/check` hands out at most the
//! limit of permits, `/v1/release` frees them, once; a batch with a rate is
//! all or nothing; a retry under one request id gets the same permit; a
//! refused release changes nothing. In-process on a manual clock (exact
//! waits), then real `tollgate serve` processes on a Redis Cluster.

mod support;

use std::sync::Arc;

use serde_json::{Value, json};
use support::{TestServer, TollgateProcess, metric};
use tollgate_testkit::RedisCluster;

const POLICIES: &str = "
policies:
  - name: reports
    algorithm: concurrency
    limit: 3
    lease: 30s
  - name: writes
    algorithm: fixed_window
    limit: 1
    window: 1h
";

/// POSTs `body` to `base` + `path`: the status and the JSON answer.
async fn post(client: &reqwest::Client, base: &str, path: &str, body: &str) -> (u16, Value) {
    let r = client
        .post(format!("{base}{path}"))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.expect("a JSON answer"))
}

async fn release(client: &reqwest::Client, base: &str, key: &str, permit: &Value) -> (u16, Value) {
    let body = json!({"policy": "reports", "key": key, "permit": permit}).to_string();
    post(client, base, "/v1/release", &body).await
}

/// 50 acquires of one tenant at once: the admitted ones' permits, and
/// every refusal's `retry_after_ms`.
async fn fifty_at_once(client: &reqwest::Client, base: &str) -> (Vec<String>, Vec<Value>) {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let (client, base) = (client.clone(), base.to_owned());
        tasks.spawn(async move {
            let body = r#"{"policy":"reports","key":"acme"}"#;
            post(&client, &base, "/v1/check", body).await
        });
    }
    let (mut permits, mut waits) = (Vec::new(), Vec::new());
    while let Some(answer) = tasks.join_next().await {
        let (status, answer) = answer.expect("task");
        assert_eq!(status, 200, "{answer}");
        if answer["allowed"] == true {
            let permit = answer["permit"].as_str().expect("a permit").to_owned();
            assert_eq!(permit.len(), 16, "{answer}");
            permits.push(permit);
        } else {
            assert!(answer.get("permit").is_none(), "{answer}");
            waits.push(answer["retry_after_ms"].clone());
        }
    }
    permits.sort();
    permits.dedup();
    (permits, waits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_at_once_get_three_permits_and_a_release_frees_one_once() {
    let server = TestServer::start(POLICIES).await;
    let (client, base) = (&server.client, server.base.as_str());
    let (permits, waits) = fifty_at_once(client, base).await;
    assert_eq!(permits.len(), 3);
    // All at one instant: the earliest lease ends a whole lease from now.
    assert_eq!(waits, vec![json!(30_000); 47]);
    let (_, other) = post(
        client,
        base,
        "/v1/check",
        r#"{"policy":"reports","key":"globex"}"#,
    )
    .await;
    assert_eq!(
        (other["allowed"].clone(), other["remaining"].clone()),
        (json!(true), json!(2))
    );

    server.clock.advance(10_000);
    let permit = json!(permits[0]);
    assert_eq!(
        release(client, base, "acme", &permit).await,
        (200, json!({"released": true}))
    );
    assert_eq!(
        release(client, base, "acme", &permit).await,
        (200, json!({"released": false}))
    );
    // The freed permit is taken again by the next acquire, and only by it.
    let body = r#"{"policy":"reports","key":"acme"}"#;
    let (_, again) = post(client, base, "/v1/check", body).await;
    assert_eq!(
        (again["allowed"].clone(), again["remaining"].clone()),
        (json!(true), json!(0))
    );
    let (_, full) = post(client, base, "/v1/check", body).await;
    assert_eq!(full["allowed"], false);
    // Past the first leases their permits are free: a late release frees
    // nothing, and the one taken after the release is still held.
    server.clock.advance(20_000);
    let late = json!(permits[1]);
    assert_eq!(
        release(client, base, "acme", &late).await,
        (200, json!({"released": false}))
    );
    let (_, look) = post(
        client,
        base,
        "/v1/check",
        r#"{"policy":"reports","key":"acme","cost":0}"#,
    )
    .await;
    assert_eq!(
        look["remaining"], 2,
        "{look}: only the permit taken after the release is held"
    );
    // As this process saw them: 5 handed out (3, globex's, the one after
    // the release), 1 released, 3 whose lease ended unreleased (the two
    // first ones left, globex's), 1 still held.
    let metrics = server.text("/metrics").await;
    let series = |name: &str| metric(&metrics, &format!("tollgate_{name}{{policy=\"reports\"}}"));
    assert_eq!(
        [
            series("permits_acquired_total"),
            series("permits_released_total"),
            series("permits_expired_total"),
            series("permits_in_use"),
        ],
        [Some(5.0), Some(1.0), Some(3.0), Some(1.0)],
        "{metrics}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_retry_and_refused_releases() {
    let server = TestServer::start(POLICIES).await;
    let (client, base) = (&server.client, server.base.as_str());
    batch_and_retry(client, base).await;
    // Refused releases name their fault and change nothing.
    let (_, held) = post(
        client,
        base,
        "/v1/check",
        r#"{"policy":"reports","key":"refused"}"#,
    )
    .await;
    let permit = held["permit"].as_str().expect("a permit").to_owned();
    let bad = [
        (
            "{",
            400,
            "malformed release: EOF while parsing an object at line 1 column 1",
        ),
        (
            "[]",
            400,
            "malformed release: invalid type: sequence, expected an object at line 1 column 0",
        ),
        (
            r#"{"policy":"reports","key":"refused"}"#,
            400,
            "malformed release: missing field `permit` at line 1 column 36",
        ),
        (
            r#"{"policy":"reports","key":"refused","permit":"ABCDEF0123456789"}"#,
            400,
            "malformed release: a permit id is exactly 16 lowercase hex digits at line 1 column 64",
        ),
        (
            r#"{"policy":"reports","key":"refused","permit":"1","extra":1}"#,
            400,
            "malformed release: a permit id is exactly 16 lowercase hex digits at line 1 column 48",
        ),
        (
            &format!(r#"{{"policy":"reports","key":"refused","permit":"{permit}","cost":1}}"#),
            400,
            "malformed release: unknown field `cost`, expected one of `policy`, `key`, `permit` at line 1 column 70",
        ),
        (
            &format!(r#"{{"policy":"nope","key":"refused","permit":"{permit}"}}"#),
            404,
            "unknown policy \"nope\"",
        ),
        (
            &format!(r#"{{"policy":"writes","key":"refused","permit":"{permit}"}}"#),
            422,
            "policy \"writes\" is not a concurrency policy: it holds no permits",
        ),
    ];
    let refund = r#"{"policy":"reports","key":"refused","refund":true}"#;
    let (status, problem) = post(client, base, "/v1/check", refund).await;
    assert_eq!(
        (status, problem["detail"].clone()),
        (
            422,
            json!(
                "refund: policy \"reports\" holds permits, not units: hand the permit to /v1/release"
            )
        )
    );
    for (body, status, detail) in bad {
        let (got, problem) = post(client, base, "/v1/release", body).await;
        assert_eq!(
            (got, problem["detail"].clone()),
            (status, json!(detail)),
            "{body}"
        );
    }
    let (_, look) = post(
        client,
        base,
        "/v1/check",
        r#"{"policy":"reports","key":"refused","cost":0}"#,
    )
    .await;
    assert_eq!(look["remaining"], 2, "still held");
    let (status, answer) = release(client, base, "refused", &json!(permit)).await;
    assert_eq!((status, answer), (200, json!({"released": true})));
    server.stop().await;
}

/// A batch with a rate policy holds its permit only when both admit; a
/// retried acquire under one request id gets the same permit, once.
async fn batch_and_retry(client: &reqwest::Client, base: &str) {
    let batch =
        r#"{"checks":[{"policy":"reports","key":"batch"},{"policy":"writes","key":"batch"}]}"#;
    let (_, first) = post(client, base, "/v1/check", batch).await;
    assert_eq!(first["allowed"], true, "{first}");
    assert!(first["decisions"][0]["permit"].is_string(), "{first}");
    let (_, second) = post(client, base, "/v1/check", batch).await;
    assert_eq!(second["allowed"], false, "{second}");
    assert!(second["decisions"][0].get("permit").is_none(), "{second}");
    let look = r#"{"policy":"reports","key":"batch","cost":0}"#;
    assert_eq!(
        post(client, base, "/v1/check", look).await.1["remaining"],
        2
    );

    let once = r#"{"policy":"reports","key":"retry","request_id":"job-7"}"#;
    let (_, a) = post(client, base, "/v1/check", once).await;
    let (_, b) = post(client, base, "/v1/check", once).await;
    assert_eq!(a["permit"], b["permit"], "{a} {b}");
    assert!(a["permit"].is_string(), "{a}");
    assert_eq!(b["replayed"], true, "{b}");
    let look = r#"{"policy":"reports","key":"retry","cost":0}"#;
    assert_eq!(
        post(client, base, "/v1/check", look).await.1["remaining"],
        2,
        "one permit taken"
    );
    let released = release(client, base, "retry", &a["permit"]).await;
    assert_eq!(released, (200, json!({"released": true})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_a_redis_cluster_share_the_permits() {
    let cluster = RedisCluster::start(3).expect("redis cluster");
    let nodes: Vec<String> = cluster
        .urls()
        .iter()
        .map(|u| format!("      - {u}"))
        .collect();
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("tollgate.yaml");
    let config = format!(
        "server: {{watch_interval_ms: 0}}\nstore:\n  redis:\n    timeout: 10s\n    cluster:\n{}\n{POLICIES}  - name: short\n    algorithm: concurrency\n    limit: 1\n    lease: 200ms\n",
        nodes.join("\n")
    );
    std::fs::write(&path, config).expect("write");
    let processes: Vec<TollgateProcess> =
        (0..2).map(|_| TollgateProcess::spawn(&path, &[])).collect();
    let client = reqwest::Client::new();
    // 50 at once, alternating between the two processes.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..50 {
        let (client, base) = (client.clone(), Arc::new(processes[i % 2].base.clone()));
        tasks.spawn(async move {
            post(
                &client,
                &base,
                "/v1/check",
                r#"{"policy":"reports","key":"acme"}"#,
            )
            .await
        });
    }
    let mut permits = Vec::new();
    while let Some(answer) = tasks.join_next().await {
        let (status, answer) = answer.expect("task");
        assert_eq!(status, 200, "{answer}");
        if answer["allowed"] == true {
            permits.push(answer["permit"].clone());
        } else {
            let wait = answer["retry_after_ms"].as_u64().expect("a wait");
            assert!((1..=30_000).contains(&wait), "{answer}");
        }
    }
    assert_eq!(permits.len(), 3);
    let (a, b) = (&processes[0].base, &processes[1].base);
    assert_eq!(
        release(&client, a, "acme", &permits[0]).await,
        (200, json!({"released": true}))
    );
    assert_eq!(
        release(&client, b, "acme", &permits[0]).await,
        (200, json!({"released": false}))
    );
    batch_and_retry(&client, b).await;
    // A short lease ends on Redis's clock; a release after it frees nothing.
    let (_, short) = post(
        &client,
        a,
        "/v1/check",
        r#"{"policy":"short","key":"acme"}"#,
    )
    .await;
    let (_, full) = post(
        &client,
        b,
        "/v1/check",
        r#"{"policy":"short","key":"acme"}"#,
    )
    .await;
    assert_eq!(
        (short["allowed"].clone(), full["allowed"].clone()),
        (json!(true), json!(false))
    );
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let body = json!({"policy": "short", "key": "acme", "permit": short["permit"]}).to_string();
    assert_eq!(
        post(&client, b, "/v1/release", &body).await,
        (200, json!({"released": false}))
    );
    let (_, after) = post(
        &client,
        a,
        "/v1/check",
        r#"{"policy":"short","key":"acme"}"#,
    )
    .await;
    assert_eq!(after["allowed"], true, "{after}");
}
