//! The 429 contract through nginx, and what fails open or closed.

use std::time::Instant;

use serde_json::json;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// Real nginx and tollgate run on the wall clock: the elapsed time bounds
// the figures that depend on it.
#[allow(clippy::disallowed_methods)]
async fn clients_see_ratelimit_fields_until_the_limit_then_the_full_429_contract() {
    let stack = Stack::start().await;
    let alice = client_at([127, 0, 0, 2]);
    let login = stack.nginx.url("/login");
    let form = "user=alice&password=hunter2";

    let started = Instant::now();
    for remaining in (0..5).rev() {
        let answer = Answer::of(alice.post(&login).body(form)).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.body, "hello from upstream\n");
        assert_eq!(answer.names(), ADMITTED_FIELDS);
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
    assert_eq!(
        rejected.names(),
        [
            "cache-control",
            "connection",
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

    // A forged X-Forwarded-For does not make alice someone else: nginx
    // appends the address it saw, and tollgate believes only the hop that
    // its trusted proxy (nginx, 127.0.0.1) vouches for.
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
    // (the auth subrequest never took them), and none of the rejected ones.
    let attempt = |body: &str| Seen {
        method: "POST".into(),
        uri: "/login".into(),
        body: body.into(),
    };
    let mut expected = vec![attempt(form); 5];
    expected.push(attempt("user=bob&password=x"));
    assert_eq!(stack.upstream.seen(), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_that_can_never_be_admitted_gets_429_without_retry_after() {
    let costly = tempfile::tempdir().expect("temp dir");
    let stack = Stack::start_with(&costly_exports("nginx-tollgate.yaml", costly.path())).await;
    let client = client_at([127, 0, 0, 4]);
    // The .html extension would make nginx's `return` send text/html had the
    // example not emptied `types` in @ratelimited.
    let url = stack.nginx.url("/api/exports/orders.html");

    let rejected = Answer::of(
        client
            .get(&url)
            .header("X-API-Key", "key-exports")
            .header("X-Export-Rows-Thousands", "500"),
    )
    .await;
    assert_eq!(rejected.status, 429, "{}", rejected.body);
    // No Retry-After at all: tollgate sent none, and nginx skips an
    // add_header whose value is empty instead of sending an empty field.
    assert_eq!(
        rejected.names(),
        [
            "cache-control",
            "connection",
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

    let refused = Answer::of(client.get(stack.nginx.url("/api/orders"))).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(refused.one("content-type"), "application/problem+json");
    assert_eq!(refused.one("cache-control"), "no-store");
    assert_eq!(refused.header("ratelimit"), None);
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
    // errors included (add_header ... always).
    for (path, status, body) in [
        ("/api/orders", 200, "hello from upstream\n"),
        ("/api/broken", 503, "upstream is broken\n"),
    ] {
        let answer = Answer::of(client.get(stack.nginx.url(path)).header("X-API-Key", path)).await;
        assert_eq!(answer.status, status, "{path}: {}", answer.body);
        assert_eq!(answer.body, body);
        assert_eq!(
            sf_list(answer.one("ratelimit-policy")),
            vec![member("api", &[("q", 20), ("w", 4)])]
        );
        assert_eq!(
            sf_list(answer.one("ratelimit")),
            vec![member("api", &[("r", 19), ("t", 1)])]
        );
    }

    // A request no policy matches is admitted with no fields at all.
    let unlimited = Answer::of(client.get(stack.nginx.url("/about"))).await;
    assert_eq!(unlimited.status, 200, "{}", unlimited.body);
    assert_eq!(
        unlimited.names(),
        [
            "connection",
            "content-length",
            "content-type",
            "date",
            "server"
        ]
    );
    assert_eq!(stack.upstream.count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tollgate_down_logins_fail_closed_and_the_api_fails_open() {
    let mut stack = Stack::start().await;
    let client = client_at([127, 0, 0, 6]);
    // One admitted login first, so nginx holds a keep-alive connection to
    // the tollgate that is about to disappear.
    let answer = Answer::of(client.post(stack.nginx.url("/login"))).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    stack.stop_tollgate();

    let closed = Answer::of(client.post(stack.nginx.url("/login"))).await;
    assert_eq!(closed.status, 503, "{}", closed.body);
    assert_eq!(closed.one("content-type"), "application/problem+json");
    assert_eq!(closed.one("cache-control"), "no-store");
    assert_eq!(closed.header("ratelimit"), None);
    assert_eq!(closed.header("retry-after"), None);
    assert_eq!(
        closed.json(),
        json!({
            "type": "about:blank",
            "title": "Service Unavailable",
            "status": 503,
            "detail": "the rate limiter cannot be reached, and this endpoint does not admit requests without it",
        })
    );
    assert_eq!(
        stack.upstream.count(),
        1,
        "the failed-closed login never arrives"
    );

    // The rest of the API is served unlimited, with no fields: with
    // tollgate gone nothing can tell a missing key either.
    for key in [Some("key-open"), None] {
        let mut request = client.get(stack.nginx.url("/api/orders"));
        if let Some(key) = key {
            request = request.header("X-API-Key", key);
        }
        let open = Answer::of(request).await;
        assert_eq!(open.status, 200, "{}", open.body);
        assert_eq!(open.body, "hello from upstream\n");
        assert_eq!(open.header("ratelimit"), None);
        assert_eq!(open.header("ratelimit-policy"), None);
    }
    let uris: Vec<String> = stack.upstream.seen().into_iter().map(|s| s.uri).collect();
    assert_eq!(uris, ["/login", "/api/orders", "/api/orders"]);
}
