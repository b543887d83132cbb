//! Nobody gets around a limit: spellings of a path, floods of headers,
//! callers that are not the proxy, and request ids.

use std::net::{Ipv4Addr, SocketAddr};

use serde_json::json;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_spelling_of_a_login_gets_more_than_the_limit_through() {
    let stack = Stack::start().await;
    let nginx = SocketAddr::from((Ipv4Addr::LOCALHOST, stack.nginx.port));
    let client = [127, 0, 0, 7];
    // Each spelling routes to the login (nginx's location or the
    // application's router): all of them share one limit of 5.
    let spellings = [
        "/login",
        "//login",
        "/./login",
        "/%6Cogin",
        "/api/../login",
        "/login;jsessionid=x",
        "/LOGIN",
        "/login/",
        "///login//",
        "/%2e/login",
    ];
    let mut statuses = Vec::new();
    for path in spellings {
        let (status, _) = raw(client, nginx, &post(path, "")).await;
        statuses.push((path, status));
    }
    let expected: Vec<(&str, u16)> = spellings
        .iter()
        .enumerate()
        .map(|(i, path)| (*path, if i < 5 { 200 } else { 429 }))
        .collect();
    assert_eq!(statuses, expected);
    assert_eq!(stack.upstream.count(), 5, "{:?}", stack.upstream.seen());

    // A path that climbs above the root: nginx refuses it itself (tollgate
    // would too: http_authorize.rs), never failing it open.
    let (status, body) = raw([127, 0, 0, 8], nginx, &post("/%2e%2e/login", "")).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(stack.upstream.count(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_that_flood_or_repeat_or_cost_nothing_never_get_past_a_limit() {
    let stack = Stack::start().await;
    let nginx = SocketAddr::from((Ipv4Addr::LOCALHOST, stack.nginx.port));

    // 110 extra headers (past hyper's old default of 100): decided like any
    // other login, 5 of 8 through.
    let flood = padding(110);
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(raw([127, 0, 0, 9], nginx, &post("/login", &flood)).await.0);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);
    assert_eq!(stack.upstream.count(), 5);

    // More headers than server.max_headers: tollgate's HTTP layer answers
    // 431 and nginx refuses the request (400), never fails it open, with or
    // without an API key.
    let deluge = padding(300);
    for (path, extra) in [
        ("/login", deluge.clone()),
        ("/api/orders", format!("X-API-Key: k3\r\n{deluge}")),
        ("/api/orders", deluge.clone()),
    ] {
        let (status, body) = raw([127, 0, 0, 10], nginx, &post(path, &extra)).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&body).expect("problem+json"),
            json!({
                "type": "about:blank",
                "title": "Bad Request",
                "status": 400,
                "detail": "the rate limiter could not check this request: its headers are too many, too large or malformed",
            })
        );
    }
    assert_eq!(
        stack.upstream.count(),
        5,
        "the deluge never reached the upstream"
    );

    // An identity header sent twice is ambiguous: refused.
    let (status, body) = raw(
        [127, 0, 0, 10],
        nginx,
        &post("/api/orders", "X-API-Key: d1\r\nX-API-Key: d2\r\n"),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).expect("problem+json")["detail"],
        "header x-api-key appears more than once: send it once"
    );

    // A cost of 0 is a client choosing a free request: refused.
    let (status, body) = raw(
        [127, 0, 0, 10],
        nginx,
        &post(
            "/api/exports/orders",
            "X-API-Key: k4\r\nX-Export-Rows-Thousands: 0\r\n",
        ),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).expect("problem+json")["detail"],
        "policy exports: header x-export-rows-thousands is 0, below the minimum 1"
    );
    assert_eq!(stack.upstream.count(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_caller_cannot_describe_a_request_to_tollgate() {
    let stack = Stack::start().await;
    let tollgate: SocketAddr = stack
        .tollgate
        .as_ref()
        .expect("tollgate runs")
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("tollgate's address");
    // Straight at /v1/authorize from 127.0.0.2, not in trusted_proxies,
    // even with the authorize token (stolen, say): every description of a
    // login is refused, however it is spelled.
    for uri in [
        "/login",
        "//login",
        "/./login",
        "/%6Cogin",
        "/api/../login",
        "/LOGIN",
    ] {
        let request = format!(
            "GET /v1/authorize HTTP/1.1\r\nHost: shop.example\r\nX-Original-Method: POST\r\nX-Original-URI: {uri}\r\nConnection: close\r\n\r\n"
        );
        let (status, body) = raw([127, 0, 0, 2], tollgate, &with_authorize_token(&request)).await;
        assert_eq!(status, 400, "{uri}: {body}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&body).expect("problem+json")["detail"],
            "header x-original-uri describes the request, but this caller (127.0.0.2) is not in server.trusted_proxies: only a trusted proxy may describe a request"
        );
    }
    // Another family's headers are never believed, from anyone: the call
    // describes itself (GET /v1/authorize), which no policy matches.
    let request = "GET /v1/authorize HTTP/1.1\r\nHost: shop.example\r\nX-Forwarded-Method: POST\r\nX-Forwarded-Uri: /login\r\nConnection: close\r\n\r\n";
    assert_eq!(
        raw([127, 0, 0, 2], tollgate, &with_authorize_token(request))
            .await
            .0,
        200
    );
    // Describing itself, the caller is limited as the client it is: its own
    // address, five logins.
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let request = "POST /v1/authorize//login HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        statuses.push(
            raw([127, 0, 0, 2], tollgate, &with_authorize_token(request))
                .await
                .0,
        );
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 403]);
    // The header attempts, straight at tollgate: refused as through nginx.
    let own = |path: &str, extra: &str| {
        format!(
            "GET /v1/authorize{path} HTTP/1.1\r\nHost: shop.example\r\n{extra}Connection: close\r\n\r\n"
        )
    };
    for (request, status, detail) in [
        (
            own(
                "/api/exports/x",
                "X-API-Key: k5\r\nX-Export-Rows-Thousands: 0\r\n",
            ),
            400,
            "policy exports: header x-export-rows-thousands is 0, below the minimum 1",
        ),
        (
            own("/api/orders", "X-API-Key: d1\r\nX-API-Key: d2\r\n"),
            400,
            "header x-api-key appears more than once: send it once",
        ),
        (
            own("/api/orders", &format!("X-API-Key: k6\r\n{}", padding(300))),
            431,
            "",
        ),
    ] {
        let (got, body) = raw([127, 0, 0, 2], tollgate, &with_authorize_token(&request)).await;
        let found = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["detail"].as_str().map(str::to_owned))
            .unwrap_or_default();
        assert_eq!((got, found.as_str()), (status, detail), "{request:.60}");
    }
}

/// The example with request ids switched on, as docs/request-ids.md says
/// to for an application that honours Idempotency-Key: the header named,
/// and the API and its exports (whose application keeps an idempotency
/// record) asking for client ids; the login does not.
fn with_client_ids(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let config = dir.path().join("tollgate.yaml");
    let example_text =
        std::fs::read_to_string(example("nginx-tollgate.yaml")).expect("read the example");
    let mut text = example_text.replace(
        "\nserver:\n",
        "\nserver:\n  request_id_header: Idempotency-Key\n",
    );
    for name in ["api", "exports"] {
        let entry = format!("\n  - name: {name}\n");
        assert_eq!(text.matches(&entry).count(), 1, "{entry}");
        text = text.replace(&entry, &format!("{entry}    client_request_ids: true\n"));
    }
    assert_ne!(text, example_text);
    std::fs::write(&config, text).expect("write config");
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_its_idempotency_key_is_charged_once_through_nginx() {
    let dir = tempfile::tempdir().expect("temp dir");
    let stack = Stack::start_with(&with_client_ids(&dir)).await;
    let client = client_at([127, 0, 0, 9]);
    let url = stack.nginx.url("/api/exports/orders");
    let export = |key: &'static str, rows: &'static str| {
        client
            .get(&url)
            .header("X-API-Key", "key-idempotent")
            .header("X-Export-Rows-Thousands", rows)
            .header("Idempotency-Key", key)
    };
    // The whole hourly budget in one export.
    let first = Answer::of(export("export-1", "100")).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let spent = vec![
        member("api", &[("r", 19), ("t", 1)]),
        member("exports", &[("r", 0), ("t", 3600)]),
    ];
    assert_eq!(sf_list(first.one("ratelimit")), spent);
    // The client timed out and retries under the same key: admitted again,
    // nothing spent (api still at 19), and the application sees the retry
    // (it answers it from its own idempotency record).
    let retry = Answer::of(export("export-1", "100")).await;
    assert_eq!(retry.status, 200, "{}", retry.body);
    assert_eq!(sf_list(retry.one("ratelimit")), spent);
    assert_eq!(stack.upstream.count(), 2);
    // A new export is a new request, and the budget is spent.
    let new = Answer::of(export("export-2", "100")).await;
    assert_eq!(new.status, 429, "{}", new.body);
    // The same key with another cost is refused with tollgate's 422.
    let other = Answer::of(export("export-1", "50")).await;
    assert_eq!(other.status, 422, "{}", other.body);
    assert_eq!(other.one("content-type"), "application/problem+json");
    assert_eq!(
        other.json(),
        json!({
            "type": "about:blank",
            "title": "Unprocessable Content",
            "status": 422,
            "detail": "this request id was first admitted for a different request (other policies, identities, costs, or method and path): a retry must repeat its request, and a new request needs a new id",
        })
    );
    assert_eq!(stack.upstream.count(), 2);
}

/// A client that sends one Idempotency-Key on every export, hoping each is
/// taken for a retry of the first: the shipped example does not read client
/// ids (server.request_id_header is off unless named), so the hourly budget
/// of 100 admits two exports of 50 and refuses the third.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_idempotency_key_on_every_request_does_not_get_past_the_limit() {
    let stack = Stack::start().await;
    let client = client_at([127, 0, 0, 10]);
    let url = stack.nginx.url("/api/exports/orders");
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let answer = Answer::of(
            client
                .get(&url)
                .header("X-API-Key", "key-reuses-one-id")
                .header("X-Export-Rows-Thousands", "50")
                .header("Idempotency-Key", "the-same-id"),
        )
        .await;
        assert_eq!(answer.header("tollgate-replayed"), None);
        statuses.push(answer.status);
    }
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(stack.upstream.count(), 2);
}

/// The attacker's test through the example with request ids on: one export
/// admitted under an Idempotency-Key, then 50 logins from one address, 25
/// under that key and 25 under keys of their own. The login does not ask
/// for client ids (`client_request_ids`), so every login is decided and
/// charged: exactly the login limit, 5, is admitted, none replayed. Before,
/// a login's own record replayed it under one key until the window ended:
/// 50 of 50.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_logins_under_client_chosen_ids_get_exactly_the_login_limit_through_nginx() {
    let dir = tempfile::tempdir().expect("temp dir");
    let stack = Stack::start_with(&with_client_ids(&dir)).await;
    let client = client_at([127, 0, 0, 11]);
    let export = Answer::of(
        client
            .get(stack.nginx.url("/api/exports/orders"))
            .header("X-API-Key", "key-one-record")
            .header("X-Export-Rows-Thousands", "1")
            .header("Idempotency-Key", "one-record"),
    )
    .await;
    assert_eq!(export.status, 200, "{}", export.body);
    let login = stack.nginx.url("/login");
    let mut seen = Vec::new();
    for i in 0..50 {
        let key = if i < 25 {
            "one-record".to_owned()
        } else {
            format!("login-{i}")
        };
        let answer = Answer::of(client.post(&login).header("Idempotency-Key", key)).await;
        seen.push((answer.status, answer.header("tollgate-replayed").is_some()));
    }
    let mut want = vec![(200, false); 5];
    want.extend([(429, false); 45]);
    assert_eq!(seen, want);
    assert_eq!(stack.upstream.count(), 1 + 5);
}
