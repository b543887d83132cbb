//! `/v1/authorize`, forward auth: identities from the forwarded request,
//! all-or-nothing across matching policies, and the 429 contract field by field.

mod support;

use reqwest::header::HeaderMap;
use sfv::{BareItem, List, ListEntry, Parser};
use support::TestServer;

const CONFIG: &str = r#"
server:
  trusted_proxies: [127.0.0.1]
policies:
  - name: write-api
    algorithm: token_bucket
    capacity: 2
    refill: { tokens: 1, per: 1h }
    match: { methods: [POST], path_prefix: /api/ }
    identity:
      - header: X-Tenant
  - name: per-ip
    algorithm: gcra
    capacity: 3
    refill: { tokens: 1, per: 1h }
    identity: [client_ip]
"#;

const RETRY: &str = r#"
server:
  trusted_proxies: [127.0.0.1]
policies:
  - name: retry-400
    algorithm: token_bucket
    capacity: 1
    refill: { tokens: 1, per: 400ms }
    match: { path: /r/400 }
    identity: [{ literal: shared }]
  - name: retry-1000
    algorithm: token_bucket
    capacity: 1
    refill: { tokens: 1, per: 1000ms }
    match: { path: /r/1000 }
    identity: [{ literal: shared }]
  - name: retry-1001
    algorithm: token_bucket
    capacity: 1
    refill: { tokens: 1, per: 1001ms }
    match: { path: /r/1001 }
    identity: [{ literal: shared }]
"#;

/// One forward-auth call the way nginx makes it.
async fn authorize(
    server: &TestServer,
    method: &str,
    uri: &str,
    extra: &[(&str, &str)],
) -> reqwest::Response {
    let mut req = server
        .client
        .get(server.url("/v1/authorize"))
        .header("x-original-method", method)
        .header("x-original-uri", uri);
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    req.send().await.expect("request")
}

fn list(headers: &HeaderMap, name: &str) -> List {
    let text = headers
        .get(name)
        .unwrap_or_else(|| panic!("missing {name}"))
        .to_str()
        .expect("ascii");
    Parser::new(text)
        .parse_list()
        .unwrap_or_else(|e| panic!("{name}: {text:?} is not an sf-list: {e}"))
}

/// (policy name, [(param, integer)]) for every item of an sf-list.
fn items(list: &List) -> Vec<(String, Vec<(String, i64)>)> {
    list.iter()
        .map(|entry| match entry {
            ListEntry::Item(item) => {
                let name = match &item.bare_item {
                    BareItem::String(s) => s.as_str().to_owned(),
                    other => panic!("policy must be an sf-string, got {other:?}"),
                };
                let params = item
                    .params
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.as_str().to_owned(),
                            v.as_integer().map(i64::from).expect("integer param"),
                        )
                    })
                    .collect();
                (name, params)
            }
            ListEntry::InnerList(_) => panic!("inner lists are not expected"),
        })
        .collect()
}

fn p(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admissions_carry_ratelimit_fields_and_rejections_the_full_429_contract() {
    let server = TestServer::start(CONFIG).await;
    for remaining in [1, 0] {
        let r = authorize(
            &server,
            "POST",
            "/api/orders?page=2",
            &[("x-tenant", "acme")],
        )
        .await;
        assert_eq!(r.status(), 200);
        assert_eq!(
            items(&list(r.headers(), "ratelimit-policy")),
            vec![
                ("write-api".to_owned(), p(&[("q", 2), ("w", 7200)])),
                ("per-ip".to_owned(), p(&[("q", 3), ("w", 10800)])),
            ]
        );
        let reset_write = if remaining == 1 { 3600 } else { 7200 };
        let reset_ip = if remaining == 1 { 3600 } else { 7200 };
        assert_eq!(
            items(&list(r.headers(), "ratelimit")),
            vec![
                (
                    "write-api".to_owned(),
                    p(&[("r", remaining), ("t", reset_write)])
                ),
                (
                    "per-ip".to_owned(),
                    p(&[("r", remaining + 1), ("t", reset_ip)])
                ),
            ]
        );
        assert!(r.headers().get("retry-after").is_none());
    }
    server.clock.advance(1_000);
    let r = authorize(&server, "POST", "/api/orders", &[("x-tenant", "acme")]).await;
    assert_eq!(r.status(), 429);
    let h = r.headers().clone();
    assert_eq!(h["content-type"], "application/problem+json");
    assert_eq!(h["cache-control"], "no-store");
    // 3,599,000 ms until one token is back: rounded up to whole seconds.
    assert_eq!(h["retry-after"], "3599");
    assert_eq!(
        items(&list(&h, "ratelimit")),
        vec![
            ("write-api".to_owned(), p(&[("r", 0), ("t", 7199)])),
            ("per-ip".to_owned(), p(&[("r", 1), ("t", 7199)])),
        ]
    );
    assert_eq!(items(&list(&h, "ratelimit-policy")).len(), 2);
    let problem_header = h["tollgate-problem"].to_str().expect("ascii").to_owned();
    let body: serde_json::Value = r.json().await.expect("json body");
    assert_eq!(
        body,
        serde_json::json!({
            "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
            "title": "Too Many Requests",
            "status": 429,
            "detail": "rate limit exceeded for policy write-api; retry after 3599000 ms",
            "violated-policies": ["write-api"],
        })
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&problem_header).expect("json"),
        body
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_whole_seconds_rounded_up() {
    let server = TestServer::start(RETRY).await;
    for (path, expected) in [("/r/400", "1"), ("/r/1000", "1"), ("/r/1001", "2")] {
        let first = authorize(&server, "GET", path, &[]).await;
        assert_eq!(first.status(), 200, "{path}");
        let second = authorize(&server, "GET", path, &[]).await;
        assert_eq!(second.status(), 429, "{path}");
        assert_eq!(second.headers()["retry-after"], expected, "{path}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matching_policies_are_decided_all_or_nothing() {
    let server = TestServer::start(CONFIG).await;
    // Use up per-ip (3) with requests write-api does not match.
    for _ in 0..3 {
        assert_eq!(
            authorize(&server, "GET", "/elsewhere", &[]).await.status(),
            200
        );
    }
    // write-api admits, per-ip rejects: nothing may be taken from write-api.
    let r = authorize(&server, "POST", "/api/orders", &[("x-tenant", "t1")]).await;
    assert_eq!(r.status(), 429);
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(body["violated-policies"], serde_json::json!(["per-ip"]));
    let check = server
        .check(r#"{"policy":"write-api","key":{"x-tenant":"t1"},"cost":0}"#)
        .await
        .1;
    assert_eq!(
        check["remaining"], 2,
        "the rejected request consumed nothing from write-api"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_identity_part_is_a_400_not_a_shared_bucket() {
    let server = TestServer::start(CONFIG).await;
    let r = authorize(&server, "POST", "/api/orders", &[]).await;
    assert_eq!(r.status(), 400);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(
        body["detail"],
        "policy write-api: identity part header x-tenant is missing from the request"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_no_policy_matches_is_admitted_without_fields() {
    let server = TestServer::start(
        "server: {trusted_proxies: [127.0.0.1]}\npolicies:\n  - {name: only-post, algorithm: fixed_window, limit: 1, window: 1s, match: {methods: [POST]}}\n",
    )
    .await;
    let r = authorize(&server, "GET", "/", &[]).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("ratelimit").is_none());
    server.stop().await;
}

const PARTS: &str = r#"
server:
  trusted_proxies: [127.0.0.1]
  deny_status: 403
policies:
  - name: keyed
    algorithm: fixed_window
    limit: 1
    window: 1h
    match: { host: "*.example.com", path: "/v1/items/{id}" }
    identity: [{ api_key: X-Api-Key }, method, route, host]
  - name: tokens
    algorithm: fixed_window
    limit: 1
    window: 1h
    match: { path_prefix: /tok }
    identity: [bearer, path]
  - name: by-ip
    algorithm: fixed_window
    limit: 1
    window: 1h
    match: { path_prefix: /ip }
    identity: [client_ip]
  - name: costly
    algorithm: fixed_window
    limit: 10
    window: 1h
    match: { path_prefix: /cost }
    identity: [{ literal: all }]
    cost: { header: X-Cost, max: 8, default: 2 }
"#;

fn env(name: &str) -> Option<String> {
    (name == "TOLLGATE_IDENTITY_KEY").then(|| "test-hashing-key-of-thirty-two-bytes".to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_parts_come_from_the_forwarded_request() {
    let server = TestServer::start_with_env(PARTS, env).await;
    let host = [("host", "api.example.com"), ("x-api-key", "sk_live_1")];
    assert_eq!(
        authorize(&server, "GET", "/v1/items/1", &host)
            .await
            .status(),
        200
    );
    // Same key, method, route and host (another id): the same bucket.
    let r = authorize(&server, "GET", "/v1/items/2", &host).await;
    assert_eq!(r.status(), 403, "deny_status applies");
    assert!(r.headers().get("tollgate-problem").is_some());
    // Another API key, another method or another host: other buckets.
    let other_key = [("host", "api.example.com"), ("x-api-key", "sk_live_2")];
    assert_eq!(
        authorize(&server, "GET", "/v1/items/1", &other_key)
            .await
            .status(),
        200
    );
    assert_eq!(
        authorize(&server, "PUT", "/v1/items/1", &host)
            .await
            .status(),
        200
    );
    let other_host = [("host", "eu.example.com"), ("x-api-key", "sk_live_1")];
    assert_eq!(
        authorize(&server, "GET", "/v1/items/1", &other_host)
            .await
            .status(),
        200
    );
    // Not the matched host: no policy applies.
    let elsewhere = [("host", "example.org"), ("x-api-key", "sk_live_1")];
    assert_eq!(
        authorize(&server, "GET", "/v1/items/1", &elsewhere)
            .await
            .status(),
        200
    );

    let bearer = [("authorization", "Bearer abc")];
    assert_eq!(
        authorize(&server, "GET", "/tok/a", &bearer).await.status(),
        200
    );
    assert_eq!(
        authorize(&server, "GET", "/tok/a", &bearer).await.status(),
        403
    );
    assert_eq!(
        authorize(&server, "GET", "/tok/b", &bearer).await.status(),
        200,
        "path is part of the identity"
    );
    let r = authorize(&server, "GET", "/tok/a", &[("authorization", "Basic abc")]).await;
    assert_eq!(r.status(), 400);

    // The test client is 127.0.0.1, a trusted proxy: X-Forwarded-For is believed.
    let a = [("x-forwarded-for", "203.0.113.7")];
    let b = [("x-forwarded-for", "203.0.113.8")];
    assert_eq!(authorize(&server, "GET", "/ip", &a).await.status(), 200);
    assert_eq!(authorize(&server, "GET", "/ip", &a).await.status(), 403);
    assert_eq!(authorize(&server, "GET", "/ip", &b).await.status(), 200);

    let costly = |c: &'static str| [("x-cost", c)];
    assert_eq!(
        authorize(&server, "GET", "/cost", &costly("8"))
            .await
            .status(),
        200
    );
    let r = authorize(&server, "GET", "/cost", &costly("9")).await;
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(
        body["detail"],
        "policy costly: header x-cost is 9, above the maximum 8"
    );
    let r = authorize(&server, "GET", "/cost", &costly("-1")).await;
    assert_eq!(r.status(), 400);
    assert_eq!(
        authorize(&server, "GET", "/cost", &[]).await.status(),
        200,
        "default cost 2 fits"
    );
    let r = authorize(&server, "GET", "/cost", &costly("1")).await;
    assert_eq!(r.status(), 403, "10 of 10 used");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_for_is_ignored_from_untrusted_peers() {
    let server = TestServer::start(
        "policies:\n  - {name: by-ip, algorithm: fixed_window, limit: 1, window: 1h, identity: [client_ip]}\n",
    )
    .await;
    // No proxy describes the request: the call describes itself.
    let call = |xff: &'static str| {
        server
            .client
            .get(server.url("/v1/authorize"))
            .header("x-forwarded-for", xff)
            .send()
    };
    assert_eq!(call("203.0.113.1").await.expect("request").status(), 200);
    let r = call("203.0.113.2").await.expect("request");
    assert_eq!(
        r.status(),
        429,
        "a spoofed X-Forwarded-For is not a new identity"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_above_the_limit_gets_429_without_retry_after() {
    let server = TestServer::start(
        "server: {trusted_proxies: [127.0.0.1]}\npolicies:\n  - {name: tiny, algorithm: sliding_window, limit: 3, window: 1s, identity: [{literal: x}], cost: {header: X-Cost, max: 100}}\n",
    )
    .await;
    let r = authorize(&server, "GET", "/", &[("x-cost", "4")]).await;
    assert_eq!(r.status(), 429);
    assert!(r.headers().get("retry-after").is_none());
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(
        body["detail"],
        "the request's cost 4 exceeds the limit 3 of policy tiny and can never be admitted"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traefik_style_forwarded_headers_are_read() {
    let traefik = CONFIG.replace(
        "trusted_proxies: [127.0.0.1]",
        "trusted_proxies: [127.0.0.1]\n  forward_auth: traefik",
    );
    let server = TestServer::start(&traefik).await;
    for expected in [200, 200, 429] {
        let r = server
            .client
            .get(server.url("/v1/authorize"))
            .header("x-forwarded-method", "POST")
            .header("x-forwarded-uri", "/api/x")
            .header("host", "shop.example")
            .header("x-tenant", "traefik")
            .send()
            .await
            .expect("request");
        assert_eq!(r.status(), expected);
    }
    server.stop().await;
}
