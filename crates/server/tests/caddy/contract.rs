//! The 429 contract through Caddy, the RateLimit fields on what it admits,
//! and tollgate's 4xx reaching the client as they are.

use std::time::Instant;

use serde_json::json;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// Real Caddy and tollgate run on the wall clock: the elapsed time bounds
// the figures that depend on it.
#[allow(clippy::disallowed_methods)]
async fn clients_see_ratelimit_fields_until_the_limit_then_the_full_429_contract() {
    let stack = Stack::start().await;
    let alice = client_at([127, 0, 0, 2]);
    let login = stack.caddy.url("/login");
    let form = "user=alice&password=hunter2";

    let started = Instant::now();
    for remaining in (0..5).rev() {
        let answer = Answer::of(alice.post(&login).body(form)).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.body, "hello from upstream\n");
        assert_eq!(answer.names(), ADMITTED_FIELDS);
        assert_eq!(answer.one("server"), "Caddy");
        assert_eq!(
            sf_list(answer.one("ratelimit-policy")),
            vec![member("login", &[("q", 5), ("w", 600)])]
        );
        // Each admitted attempt is the newest, so the log resets a full window later.
        assert_eq!(
            sf_list(answer.one("ratelimit")),
            vec![member("login", &[("r", remaining), ("t", 600)])]
        );
    }

    let rejected = Answer::of(alice.post(&login).body(form)).await;
    // An upper bound on how long the attempts took, to bound the figures that
    // depend on it; exact whenever the run took under a second.
    let elapsed_ms = u64::try_from(started.elapsed().as_millis()).expect("elapsed") + 1;
    assert_eq!(rejected.status, 429, "{}", rejected.body);
    // tollgate's own answer, as it sent it, less Tollgate-Problem (the
    // body again, on one line, for nginx).
    assert_eq!(
        rejected.names(),
        [
            "cache-control",
            "content-length",
            "content-type",
            "date",
            "ratelimit",
            "ratelimit-policy",
            "retry-after",
            "server",
        ]
    );
    assert_eq!(rejected.one("content-type"), "application/problem+json");
    assert_eq!(rejected.one("cache-control"), "no-store");

    assert_the_429_states_its_wait(&rejected, elapsed_ms);

    // A forged X-Forwarded-For does not make alice someone else: Caddy
    // trusts no client's and sends the address it saw.
    let forged = Answer::of(
        alice
            .post(&login)
            .header("X-Forwarded-For", "203.0.113.7")
            .body(form),
    )
    .await;
    assert_eq!(forged.status, 429, "{}", forged.body);
    assert_eq!(forged.json()["violated-policies"], json!(["login"]));

    // Another client address has its own log.
    let bob = client_at([127, 0, 0, 3]);
    let answer = Answer::of(bob.post(&login).body("user=bob&password=x")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        sf_list(answer.one("ratelimit")),
        vec![member("login", &[("r", 4), ("t", 600)])]
    );

    // The upstream saw exactly the six admitted attempts, bodies intact
    // (the call to tollgate never took them), and none of the rejected ones.
    let attempt = |body: &str| Seen {
        method: "POST".into(),
        uri: "/login".into(),
        body: body.into(),
    };
    let mut expected = vec![attempt(form); 5];
    expected.push(attempt("user=bob&password=x"));
    assert_eq!(stack.upstream.seen(), expected);
    // The application sees the fields as request headers, tollgate's only.
    let last = stack.upstream.headers().pop().expect("bob's login");
    assert_eq!(last["ratelimit"], r#""login";r=4;t=600"#);
    assert_eq!(last["ratelimit-policy"], r#""login";q=5;w=600"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_that_can_never_be_admitted_gets_429_without_retry_after() {
    let costly = tempfile::tempdir().expect("temp dir");
    let stack = Stack::start_with(&costly_exports("caddy-tollgate.yaml", costly.path())).await;
    let client = client_at([127, 0, 0, 4]);
    let url = stack.caddy.url("/api/exports/orders.html");

    let rejected = Answer::of(
        client
            .get(&url)
            .header("X-API-Key", "key-exports")
            .header("X-Export-Rows-Thousands", "500"),
    )
    .await;
    assert_eq!(rejected.status, 429, "{}", rejected.body);
    assert_eq!(
        rejected.names(),
        [
            "cache-control",
            "content-length",
            "content-type",
            "date",
            "ratelimit",
            "ratelimit-policy",
            "server",
        ]
    );
    assert_eq!(rejected.one("content-type"), "application/problem+json");
    assert_eq!(rejected.one("cache-control"), "no-store");
    assert_eq!(
        rejected.json(),
        json!({
            "type": QUOTA_EXCEEDED,
            "title": "Too Many Requests",
            "status": 429,
            "detail": "the request's cost 500 exceeds the limit 100 of policy exports and can never be admitted",
            "violated-policies": ["exports"],
        })
    );
    assert_eq!(
        sf_list(rejected.one("ratelimit-policy")),
        vec![
            member("api", &[("q", 20), ("w", 4)]),
            member("exports", &[("q", 100), ("w", 3600)]),
        ]
    );
    // All or nothing: the api policy would have admitted, yet nothing was spent.
    assert_eq!(
        sf_list(rejected.one("ratelimit")),
        vec![
            member("api", &[("r", 20), ("t", 0)]),
            member("exports", &[("r", 100), ("t", 0)]),
        ]
    );
    assert_eq!(stack.upstream.count(), 0);

    // The whole budget at once is admitted, and the fields say it is spent.
    let admitted = Answer::of(
        client
            .get(&url)
            .header("X-API-Key", "key-exports")
            .header("X-Export-Rows-Thousands", "100"),
    )
    .await;
    assert_eq!(admitted.status, 200, "{}", admitted.body);
    assert_eq!(admitted.names(), ADMITTED_FIELDS);
    assert_eq!(
        sf_list(admitted.one("ratelimit")),
        vec![
            member("api", &[("r", 19), ("t", 1)]),
            member("exports", &[("r", 0), ("t", 3600)]),
        ]
    );
    assert_eq!(
        stack.upstream.seen(),
        vec![Seen {
            method: "GET".into(),
            uri: "/api/exports/orders.html".into(),
            body: String::new(),
        }]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_its_api_key_gets_tollgates_400_and_never_reaches_the_upstream() {
    let stack = Stack::start().await;
    let client = client_at([127, 0, 0, 5]);

    let refused = Answer::of(client.get(stack.caddy.url("/api/orders"))).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(
        refused.names(),
        [
            "cache-control",
            "content-length",
            "content-type",
            "date",
            "server"
        ]
    );
    assert_eq!(refused.one("content-type"), "application/problem+json");
    assert_eq!(refused.one("cache-control"), "no-store");
    assert_eq!(
        refused.json(),
        json!({
            "type": "about:blank",
            "title": "Bad Request",
            "status": 400,
            "detail": "policy api: identity part api_key (header x-api-key) is missing from the request",
        })
    );
    assert_eq!(
        stack.upstream.count(),
        0,
        "a missing key is not failed open"
    );

    // With a key, the API answers with the fields, the upstream's own
    // errors included.
    for (path, status, body) in [
        ("/api/orders", 200, "hello from upstream\n"),
        ("/api/broken", 503, "upstream is broken\n"),
    ] {
        let answer = Answer::of(client.get(stack.caddy.url(path)).header("X-API-Key", path)).await;
        assert_eq!(answer.status, status, "{path}: {}", answer.body);
        assert_eq!(answer.body, body);
        assert_eq!(answer.names(), ADMITTED_FIELDS);
        assert_eq!(
            sf_list(answer.one("ratelimit-policy")),
            vec![member("api", &[("q", 20), ("w", 4)])]
        );
        assert_eq!(
            sf_list(answer.one("ratelimit")),
            vec![member("api", &[("r", 19), ("t", 1)])]
        );
    }

    // A request no policy matches is admitted with no fields at all, and
    // fields a client made up reach neither the application nor the client.
    let unlimited = Answer::of(
        client
            .get(stack.caddy.url("/about"))
            .header("RateLimit", r#""login";r=5;t=0"#)
            .header("RateLimit-Policy", r#""login";q=500;w=1"#),
    )
    .await;
    assert_eq!(unlimited.status, 200, "{}", unlimited.body);
    assert_eq!(
        unlimited.names(),
        ["content-length", "content-type", "date", "server"]
    );
    assert_eq!(stack.upstream.count(), 3);
    let about = stack.upstream.headers().pop().expect("the /about request");
    assert_eq!(about.get("ratelimit"), None);
    assert_eq!(about.get("ratelimit-policy"), None);
}
