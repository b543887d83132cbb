//! Counters an operator can look at and reset, one identity at a time:
//! `GET /v1/state` peeks (spends nothing), `DELETE /v1/state` forgets the
//! identity's state — on the memory store and on a real Redis, behind the
//! admin token when one is set.

mod support;

use serde_json::json;
use support::TestServer;
use tollgate_testkit::RedisServer;

const POLICIES: &str = r#"
  - name: p
    algorithm: token_bucket
    capacity: 5
    refill: { tokens: 1, per: 1h }
    match: { path_prefix: /t }
    identity: [{ header: X-Tenant }]
"#;

async fn call(
    server: &TestServer,
    method: reqwest::Method,
    query: &str,
) -> (u16, serde_json::Value) {
    let r = server
        .client
        .request(method, server.url(&format!("/v1/state?{query}")))
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(serde_json::Value::Null))
}

async fn spend(server: &TestServer, times: usize) {
    for _ in 0..times {
        let (status, _) = server.check(r#"{"policy":"p","key":"k"}"#).await;
        assert_eq!(status, 200);
    }
}

/// Peek, reset, peek again: the same on either store.
async fn peeks_and_resets(server: &TestServer) {
    spend(server, 3).await;
    for _ in 0..2 {
        let (status, v) = call(server, reqwest::Method::GET, "policy=p&key=k").await;
        assert_eq!(status, 200);
        assert_eq!(
            (&v["allowed"], &v["remaining"]),
            (&json!(true), &json!(2)),
            "a peek spends nothing"
        );
    }
    let (status, v) = call(server, reqwest::Method::DELETE, "policy=p&key=k").await;
    assert_eq!(
        (status, v),
        (
            200,
            json!({"policy": "p", "reset": true, "had_state": true})
        )
    );
    let (_, v) = call(server, reqwest::Method::GET, "policy=p&key=k").await;
    assert_eq!(v["remaining"], 5, "the identity starts afresh");
    // A read writes nothing: that peek created no state to reset.
    let (_, v) = call(server, reqwest::Method::DELETE, "policy=p&key=k").await;
    assert_eq!(v["had_state"], false, "a peek created state");
    let (_, v) = call(server, reqwest::Method::DELETE, "policy=p&key=never-seen").await;
    assert_eq!(v["had_state"], false);
    let metrics = server.text("/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l == r#"tollgate_state_resets_total{policy="p"} 3"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peek_spends_nothing_and_a_reset_starts_the_identity_afresh_in_memory() {
    let server = TestServer::start(&format!(
        "server: {{trusted_proxies: [127.0.0.1]}}\npolicies:{POLICIES}"
    ))
    .await;
    peeks_and_resets(&server).await;

    // A forward-auth identity is the composite of its parts: key.NAME=VALUE.
    for _ in 0..2 {
        let r = server
            .client
            .get(server.url("/v1/authorize"))
            .header("x-original-method", "GET")
            .header("x-original-uri", "/t")
            .header("x-tenant", "acme")
            .send()
            .await
            .expect("authorize");
        assert_eq!(r.status(), 200);
    }
    let (_, v) = call(&server, reqwest::Method::GET, "policy=p&key.x-tenant=acme").await;
    assert_eq!(v["remaining"], 3);
    let (_, v) = call(&server, reqwest::Method::GET, "policy=p&key=acme").await;
    assert_eq!(v["remaining"], 5, "the value key acme is another identity");

    for (query, status, detail) in [
        ("policy=p", 422, "missing parameter key"),
        ("key=k", 422, "missing parameter policy"),
        ("policy=nope&key=k", 404, "unknown policy \"nope\""),
        ("policy=p&key=", 422, "key must not be empty"),
        ("policy=p&key=a&key=b", 422, "key is given twice"),
        (
            "policy=p&key=a&key.x=b",
            422,
            "give key or key.NAME parts, not both",
        ),
        (
            "policy=p&key=a&limit=3",
            422,
            "unknown parameter \"limit\" (expected: policy, key or key.NAME)",
        ),
    ] {
        let (got, v) = call(&server, reqwest::Method::GET, query).await;
        assert_eq!(
            (got, v["detail"].as_str()),
            (status, Some(detail)),
            "{query}"
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_on_redis_deletes_the_key_and_this_instances_cached_rejections() {
    let redis = RedisServer::start().expect("redis-server");
    let server = TestServer::start(&format!(
        "server: {{trusted_proxies: [127.0.0.1]}}\nstore:\n  redis: {{url: \"{}\"}}\npolicies:{POLICIES}",
        redis.url()
    ))
    .await;
    let keys = || redis.cli(&["DBSIZE"]).expect("redis-cli DBSIZE");
    let before = keys();
    let (_, v) = call(&server, reqwest::Method::GET, "policy=p&key=only-read").await;
    assert_eq!(v["remaining"], 5);
    assert_eq!(keys(), before, "a peek created a key");
    peeks_and_resets(&server).await;
    // Exhausted, then rejected: the rejection is cached until its retry time.
    spend(&server, 5).await;
    let (_, v) = server.check(r#"{"policy":"p","key":"k"}"#).await;
    assert_eq!(v["allowed"], false);
    let (_, v) = call(&server, reqwest::Method::DELETE, "policy=p&key=k").await;
    assert_eq!(v["had_state"], true);
    let (_, v) = server.check(r#"{"policy":"p","key":"k"}"#).await;
    assert_eq!(
        (&v["allowed"], &v["remaining"]),
        (&json!(true), &json!(4)),
        "not answered from the cached rejection"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_is_behind_the_admin_token_when_one_is_set() {
    let token = "admin-token-of-some-length";
    let server = TestServer::start_with_env(&format!("policies:{POLICIES}"), |name| {
        (name == "TOLLGATE_ADMIN_TOKEN").then(|| token.to_owned())
    })
    .await;
    let (status, _) = call(&server, reqwest::Method::GET, "policy=p&key=k").await;
    assert_eq!(status, 401);
    let (status, _) = call(&server, reqwest::Method::DELETE, "policy=p&key=k").await;
    assert_eq!(status, 401);
    let r = server
        .client
        .delete(server.url("/v1/state?policy=p&key=k"))
        .bearer_auth(token)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
    server.stop().await;
}
