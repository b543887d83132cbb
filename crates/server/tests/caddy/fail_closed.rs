//! With tollgate down or stalled, nothing tollgate counts as a login or an
//! export reaches the application, however the client spells it: the
//! example fails closed by default and fails open only for plain paths
//! under `/api/`, where tollgate never counts a login, and never for exports.

use std::net::SocketAddr;

use serde_json::json;

use crate::harness::*;
use crate::support::{TollgateProcess, free_port};

/// Spellings tollgate counts as `POST /login` (request_path.rs and the
/// login policy's `case_insensitive`, `trailing_slash: ignore`).
const LOGIN_SPELLINGS: [&str; 10] = [
    "/LOGIN",
    "/login/",
    "/login;jsessionid=x",
    "/%4Cogin",
    "/./login/",
    "//login",
    "/api/..;/login",
    "/api/%2e%2e/login",
    "/api/x/..;/../login",
    "/api/../login",
];

/// Spellings tollgate counts as exports (`path_prefix: /api/exports`,
/// case-insensitive).
const EXPORT_SPELLINGS: [&str; 7] = [
    "/api/exports/orders",
    "/API/exports/orders",
    "/api/EXPORTS/orders",
    "/api/exports",
    "/api/exports.csv",
    "/api/exports;x/orders",
    "/api/%65xports/orders",
];

/// An export that can never be admitted: 500 thousand rows on a budget of 100.
const NEVER_ADMITTED: &str = "X-API-Key: key-fail-closed\r\nX-Export-Rows-Thousands: 500\r\n";

/// Each login spelling and each never-admitted export, ten times, all at
/// once (a stalled tollgate holds each for the response header timeout):
/// the statuses Caddy answered, by path, in order.
async fn every_spelling_ten_times(caddy: SocketAddr) -> Vec<(String, Vec<u16>)> {
    let mut requests = Vec::new();
    for path in LOGIN_SPELLINGS {
        requests.push((path, post(path, "")));
    }
    for path in EXPORT_SPELLINGS {
        requests.push((path, get(path, NEVER_ADMITTED)));
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (i, (_, request)) in requests.iter().enumerate() {
        for n in 0..10 {
            let request = request.clone();
            tasks.spawn(async move { (i, n, raw([127, 0, 0, 30], caddy, &request).await) });
        }
    }
    let mut statuses = vec![vec![0; 10]; requests.len()];
    while let Some(done) = tasks.join_next().await {
        let (i, n, (status, body)) = done.expect("a request task");
        assert!(
            status != 503 || body == FAILED_CLOSED,
            "{}: {body}",
            requests[i].0
        );
        statuses[i][n] = status;
    }
    requests
        .iter()
        .map(|(path, _)| (*path).to_owned())
        .zip(statuses)
        .collect()
}

/// Every spelling failed closed, ten times each.
fn all_failed_closed() -> Vec<(String, Vec<u16>)> {
    LOGIN_SPELLINGS
        .iter()
        .chain(EXPORT_SPELLINGS.iter())
        .map(|path| ((*path).to_owned(), vec![503; 10]))
        .collect()
}

/// Plain API paths fail open; any other spelling of an API path fails
/// closed, since tollgate might read it as something else.
const API_PATHS: [(&str, u16); 10] = [
    ("/api/orders", 200),
    ("/api/v1/items.json", 200),
    ("/api/orders?next=/../login", 200),
    ("/api/", 503),
    ("/API/orders", 503),
    ("/api//orders", 503),
    ("/api/./orders", 503),
    ("/api/orders;x", 503),
    ("/api/%6Frders", 503),
    ("/api/.hidden", 503),
];

/// Each of [`API_PATHS`] once with an API key and once without, all at
/// once: the statuses, by path, in order.
async fn api_paths(caddy: SocketAddr) -> Vec<(&'static str, u16, u16)> {
    let mut tasks = tokio::task::JoinSet::new();
    for (i, (path, _)) in API_PATHS.iter().enumerate() {
        for (keyed, extra) in [(true, "X-API-Key: k\r\n"), (false, "")] {
            let request = get(path, extra);
            tasks.spawn(async move { (i, keyed, raw([127, 0, 0, 31], caddy, &request).await.0) });
        }
    }
    let mut statuses: Vec<_> = API_PATHS.iter().map(|(path, _)| (*path, 0, 0)).collect();
    while let Some(done) = tasks.join_next().await {
        let (i, keyed, status) = done.expect("a request task");
        if keyed {
            statuses[i].1 = status;
        } else {
            statuses[i].2 = status;
        }
    }
    statuses
}

fn api_paths_expected() -> Vec<(&'static str, u16, u16)> {
    API_PATHS
        .iter()
        .map(|(path, status)| (*path, *status, *status))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tollgate_killed_every_login_spelling_fails_closed_through_caddy() {
    let costly = tempfile::tempdir().expect("temp dir");
    let mut stack = Stack::start_with(&costly_exports("caddy-tollgate.yaml", costly.path())).await;
    let caddy = stack.caddy.addr();
    // While tollgate runs, every spelling is one login limit of 5, and
    // every spelling of the export is one that can never be admitted.
    let mut statuses = Vec::new();
    for path in LOGIN_SPELLINGS {
        statuses.push(raw([127, 0, 0, 29], caddy, &post(path, "")).await.0);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429, 429, 429]);
    for path in EXPORT_SPELLINGS {
        let (status, body) = raw([127, 0, 0, 29], caddy, &get(path, NEVER_ADMITTED)).await;
        assert_eq!(status, 429, "{path}: {body}");
    }
    assert_eq!(stack.upstream.count(), 5);

    // Killed: Caddy's call is refused (502), and nothing gets through.
    stack.stop_tollgate();
    assert_eq!(every_spelling_ten_times(caddy).await, all_failed_closed());
    assert_eq!(stack.upstream.count(), 5, "{:?}", stack.upstream.seen());

    // The plain API still fails open, key or no key: nothing can tell a
    // missing one with tollgate gone. The answer has no RateLimit fields.
    assert_eq!(api_paths(caddy).await, api_paths_expected());
    let open = Answer::of(
        client_at([127, 0, 0, 31])
            .post(stack.caddy.url("/api/orders"))
            .header("X-API-Key", "k")
            .body("order=1"),
    )
    .await;
    assert_eq!(
        (open.status, open.body.as_str()),
        (200, "hello from upstream\n")
    );
    assert_eq!(
        open.names(),
        ["content-length", "content-type", "date", "server"]
    );
    let mut uris: Vec<String> = stack.upstream.seen()[5..]
        .iter()
        .map(|seen| format!("{} {} {}", seen.method, seen.uri, seen.body))
        .collect();
    uris.sort_unstable();
    assert_eq!(
        uris,
        [
            "GET /api/orders ",
            "GET /api/orders ",
            "GET /api/orders?next=/../login ",
            "GET /api/orders?next=/../login ",
            "GET /api/v1/items.json ",
            "GET /api/v1/items.json ",
            "POST /api/orders order=1",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tollgate_stalled_every_login_spelling_fails_closed_through_caddy() {
    let stack = Stack::start().await;
    let caddy = stack.caddy.addr();
    let tollgate = stack.tollgate.as_ref().expect("tollgate runs");
    // Stopped: it accepts connections (the kernel does) and never answers,
    // so Caddy's call times out (response_header_timeout, 504).
    tollgate.signal("STOP");
    let statuses = every_spelling_ten_times(caddy).await;
    let api = api_paths(caddy).await;
    tollgate.signal("CONT");
    assert_eq!(statuses, all_failed_closed());
    assert_eq!(api, api_paths_expected());
    assert_eq!(
        stack.upstream.count(),
        6,
        "only the plain API paths: {:?}",
        stack.upstream.seen()
    );
    // Woken, the same tollgate decides again: it was stalled, not gone.
    // It first works off the connections queued while it slept (Caddy gave
    // up on those), so a login may still fail closed for a moment.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let woken = loop {
        let (status, body) = raw([127, 0, 0, 31], caddy, &post("/login", "")).await;
        if status != 503 || tokio::time::Instant::now() > deadline {
            break (status, body);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(woken.0, 200, "{}", woken.1);
    assert_eq!(stack.upstream.count(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_application_is_its_own_failure_never_the_limiters() {
    // tollgate runs; the application's address refuses connections.
    let tollgate = TollgateProcess::spawn(
        &example("caddy-tollgate.yaml"),
        &example_env("caddy-tollgate.yaml"),
    );
    let no_app = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let caddy = Caddy::start(&tollgate.base, no_app);
    let client = client_at([127, 0, 0, 32]);

    // Admitted, then the application fails: Caddy's bare 502, never the
    // fail-closed problem, and never a second try through the fail-open
    // route (a POST the application took before dying would run twice).
    // Each attempt was still a login: the sixth is refused.
    let mut answers = Vec::new();
    for _ in 0..6 {
        let answer = Answer::of(client.post(caddy.url("/login"))).await;
        answers.push((answer.status, answer.body));
    }
    let failed = (502, String::new());
    let mut expected = vec![failed.clone(); 5];
    expected.push((429, answers[5].1.clone()));
    assert_eq!(answers, expected);
    let api = Answer::of(
        client
            .get(caddy.url("/api/orders"))
            .header("X-API-Key", "k"),
    )
    .await;
    assert_eq!((api.status, api.body.as_str()), (502, ""));

    // With tollgate gone too, a login gets the fixed fail-closed problem.
    drop(tollgate);
    let closed = Answer::of(client.post(caddy.url("/login"))).await;
    assert_eq!(closed.status, 503, "{}", closed.body);
    assert_eq!(
        closed.names(),
        [
            "cache-control",
            "content-length",
            "content-type",
            "date",
            "server"
        ]
    );
    assert_eq!(closed.one("content-type"), "application/problem+json");
    assert_eq!(closed.one("cache-control"), "no-store");
    assert_eq!(
        closed.json(),
        json!({
            "type": "about:blank",
            "title": "Service Unavailable",
            "status": 503,
            "detail": "the rate limiter cannot be reached, and this endpoint does not admit requests without it",
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_an_export_spends_the_one_hourly_budget() {
    let stack = Stack::start().await;
    let caddy = stack.caddy.addr();
    // The whole hourly budget (100) at each request, under one key: one
    // export in all, whichever way it is spelled.
    let spellings = [
        "/API/exports/orders",
        "/api/EXPORTS/orders",
        "/api/exports",
        "/api/exports.csv",
        "/api/exports/",
        "/api/%65xports/orders",
    ];
    let mut statuses = Vec::new();
    for path in spellings {
        let extra = "X-API-Key: key-one-budget\r\nX-Export-Rows-Thousands: 100\r\n";
        statuses.push(raw([127, 0, 0, 33], caddy, &get(path, extra)).await.0);
    }
    assert_eq!(statuses, [200, 429, 429, 429, 429, 429]);
    assert_eq!(stack.upstream.count(), 1);

    // /API/… is the API: it needs its key like /api/….
    for path in ["/API/orders", "/Api/exports/x", "/api/"] {
        let (status, body) = raw([127, 0, 0, 33], caddy, &get(path, "")).await;
        assert_eq!(
            (status, detail(&body).as_str()),
            (
                400,
                "policy api: identity part api_key (header x-api-key) is missing from the request"
            ),
            "{path}"
        );
    }
    assert_eq!(stack.upstream.count(), 1);
}
