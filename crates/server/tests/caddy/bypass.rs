//! Nobody gets around a limit through Caddy: spellings of a path, floods of
//! headers, repeated and forged fields, and callers that are not Caddy.

use serde_json::json;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_spelling_of_a_login_gets_more_than_the_limit_through() {
    let stack = Stack::start().await;
    let caddy = stack.caddy.addr();
    let client = [127, 0, 0, 7];
    // Each spelling routes to the login in some application router: all of
    // them share one limit of 5. Caddy passes the target on as it came
    // (`{uri}`, still escaped), and tollgate normalizes it.
    let spellings = [
        "/login",
        "//login",
        "/./login",
        "/%6Cogin",
        "/api/../login",
        "/login;jsessionid=x",
        "/LOGIN",
        "/login/",
        "/%4Cogin",
        "/./login/",
        "/api/..;/login",
        "/api/%2e%2e/login",
        "///login//",
        "/%2e/login",
        "/login?next=/about",
        "http://shop.example/login",
    ];
    let mut statuses = Vec::new();
    for path in spellings {
        let (status, _) = raw(client, caddy, &post(path, "")).await;
        statuses.push((path, status));
    }
    let expected: Vec<(&str, u16)> = spellings
        .iter()
        .enumerate()
        .map(|(i, path)| (*path, if i < 5 { 200 } else { 429 }))
        .collect();
    assert_eq!(statuses, expected);
    assert_eq!(stack.upstream.count(), 5, "{:?}", stack.upstream.seen());

    // An HTTP/1.0 client is the same client.
    let old = "POST /Login HTTP/1.0\r\nHost: shop.example\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(raw(client, caddy, old).await.0, 429);

    // A path that climbs above the root: tollgate refuses it (400), and
    // Caddy passes that on, never to the application.
    let (status, body) = raw([127, 0, 0, 8], caddy, &post("/%2e%2e/login", "")).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(stack.upstream.count(), 5);

    // Twenty logins at once from a fresh address: five get through.
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..20 {
        tasks.spawn(async move { raw([127, 0, 0, 9], caddy, &post("/login", "")).await.0 });
    }
    let mut admitted = 0;
    while let Some(status) = tasks.join_next().await {
        match status.expect("a login task") {
            200 => admitted += 1,
            429 => {}
            other => panic!("a login at once answered {other}"),
        }
    }
    assert_eq!(admitted, 5);
    assert_eq!(stack.upstream.count(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_forwarded_headers_neither_describe_the_request_nor_make_a_new_client() {
    let stack = Stack::start().await;
    let caddy = stack.caddy.addr();
    // Each attempt forges another part of the description Caddy sends,
    // once or twice over; all are the same client's logins.
    let forgeries = [
        "X-Forwarded-Uri: /about\r\n",
        "X-Forwarded-Method: GET\r\n",
        "X-Forwarded-Uri: /about\r\nX-Forwarded-Uri: /about\r\n",
        "X-Forwarded-Host: admin.example\r\nX-Forwarded-Method: GET\r\n",
        "X-Forwarded-For: 203.0.113.1\r\n",
        "X-Forwarded-For: 203.0.113.2\r\nX-Forwarded-For: 203.0.113.3\r\n",
        "X-Real-IP: 203.0.113.4\r\n",
        "Forwarded: for=203.0.113.5\r\n",
        "X-Original-URI: /about\r\nX-Original-Method: GET\r\n",
        "X_Forwarded_Uri: /about\r\n",
    ];
    let mut statuses = Vec::new();
    for extra in forgeries {
        statuses.push(raw([127, 0, 0, 11], caddy, &post("/login", extra)).await.0);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429, 429, 429]);

    // A fresh X-Forwarded-For on every attempt is not a fresh bucket.
    let mut statuses = Vec::new();
    for i in 0..8 {
        let extra = format!("X-Forwarded-For: 198.51.100.{i}\r\n");
        statuses.push(raw([127, 0, 0, 12], caddy, &post("/login", &extra)).await.0);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);

    // Naming a forwarding header in Connection (hop-by-hop, for Caddy to
    // drop) does not drop Caddy's own: had X-Forwarded-For gone, tollgate
    // would key Caddy's address (a fresh bucket); had X-Forwarded-Method
    // gone, the call would describe itself (no login at all).
    for hop in ["X-Forwarded-For", "X-Forwarded-Method", "X-Forwarded-Uri"] {
        let extra = format!("Connection: {hop}\r\n");
        let (status, body) = raw([127, 0, 0, 12], caddy, &post("/login", &extra)).await;
        assert_eq!(status, 429, "Connection: {hop}: {body}");
    }

    // What reached the application carries Caddy's own forwarding headers,
    // the client's address alone, and none of the forged descriptions.
    let headers = stack.upstream.headers();
    assert_eq!(headers.len(), 10);
    for (i, seen) in headers.iter().enumerate() {
        let client = if i < 5 { "127.0.0.11" } else { "127.0.0.12" };
        let forwarding: Vec<(&str, &str)> = seen
            .iter()
            .filter(|(name, _)| name.as_str().starts_with("x-forwarded"))
            .map(|(name, value)| (name.as_str(), value.to_str().expect("ASCII")))
            .collect();
        assert_eq!(
            forwarding,
            [
                ("x-forwarded-for", client),
                ("x-forwarded-host", "shop.example"),
                ("x-forwarded-proto", "http"),
            ],
            "request {i}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_that_flood_or_repeat_or_cost_nothing_never_get_past_a_limit() {
    let stack = Stack::start().await;
    let caddy = stack.caddy.addr();

    // 110 extra headers: decided like any other login, 5 of 8 through.
    let flood = padding(110);
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(raw([127, 0, 0, 13], caddy, &post("/login", &flood)).await.0);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);
    assert_eq!(stack.upstream.count(), 5);

    // More headers than server.max_headers: tollgate's HTTP layer answers
    // a bare 431, and Caddy gives it the example's problem: never the
    // application, with or without an API key.
    let deluge = padding(300);
    for (path, extra) in [
        ("/login", deluge.clone()),
        ("/api/orders", format!("X-API-Key: k3\r\n{deluge}")),
        ("/api/orders", deluge.clone()),
    ] {
        let (status, body) = raw([127, 0, 0, 14], caddy, &post(path, &extra)).await;
        assert_eq!(status, 431, "{path}: {body}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&body).expect("problem+json"),
            serde_json::json!({
                "type": "about:blank",
                "title": "Request Header Fields Too Large",
                "status": 431,
                "detail": "the rate limiter could not check this request: its headers are too many or too large"
            }),
            "{path}"
        );
    }
    assert_eq!(stack.upstream.count(), 5, "the deluge never reached it");

    // An identity header sent twice is ambiguous: refused, as tollgate said.
    let (status, body) = raw(
        [127, 0, 0, 14],
        caddy,
        &post("/api/orders", "X-API-Key: d1\r\nX-API-Key: d2\r\n"),
    )
    .await;
    assert_eq!(
        (status, detail(&body).as_str()),
        (400, "header x-api-key appears more than once: send it once")
    );

    // A cost of 0 is a client choosing a free request; a cost that is not
    // a number, or given twice, is no cost at all: each refused.
    for (rows, expected) in [
        (
            "X-Export-Rows-Thousands: 0\r\n",
            "policy exports: header x-export-rows-thousands is 0, below the minimum 1",
        ),
        (
            "X-Export-Rows-Thousands: -5\r\n",
            "policy exports: header x-export-rows-thousands must be a whole number from 1 to 100, got \"-5\"",
        ),
        (
            "X-Export-Rows-Thousands: 1\r\nX-Export-Rows-Thousands: 1\r\n",
            "header x-export-rows-thousands appears more than once: send it once",
        ),
    ] {
        let extra = format!("X-API-Key: k4\r\n{rows}");
        let (status, body) = raw([127, 0, 0, 14], caddy, &get("/api/exports/orders", &extra)).await;
        assert_eq!((status, detail(&body).as_str()), (400, expected), "{rows}");
    }
    assert_eq!(stack.upstream.count(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_caller_cannot_describe_a_request_to_tollgate() {
    let stack = Stack::start().await;
    let tollgate = stack.tollgate_addr();
    // Straight at /v1/authorize from 127.0.0.2, not in trusted_proxies,
    // even with the authorize token (stolen, say): every description of a
    // login is refused, however it is spelled.
    for (uri, method) in [
        ("/login", "POST"),
        ("//login", "POST"),
        ("/%6Cogin", "POST"),
        ("/api/../login", "POST"),
        ("/LOGIN", "POST"),
    ] {
        let request = format!(
            "GET /v1/authorize HTTP/1.1\r\nHost: shop.example\r\nX-Forwarded-Method: {method}\r\nX-Forwarded-Uri: {uri}\r\nConnection: close\r\n\r\n"
        );
        let (status, body) = raw([127, 0, 0, 2], tollgate, &with_authorize_token(&request)).await;
        assert_eq!(status, 400, "{uri}: {body}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&body).expect("problem+json"),
            json!({
                "type": "about:blank",
                "title": "Bad Request",
                "status": 400,
                "detail": "header x-forwarded-uri describes the request, but this caller (127.0.0.2) is not in server.trusted_proxies: only a trusted proxy may describe a request",
            })
        );
    }
    // nginx's family is never believed under forward_auth: traefik, from
    // anyone: the call describes itself (GET /v1/authorize), which no
    // policy matches.
    let request = "GET /v1/authorize HTTP/1.1\r\nHost: shop.example\r\nX-Original-Method: POST\r\nX-Original-URI: /login\r\nConnection: close\r\n\r\n";
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
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429]);
    assert_eq!(stack.upstream.count(), 0);
}
