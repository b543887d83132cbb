//! With tollgate down or stalled, nothing tollgate counts as a login or an
//! export reaches the application, however the client spells it: the
//! example fails closed by default and fails open only under `/api/`,
//! where tollgate never counts a login, and never for exports.

use std::net::{Ipv4Addr, SocketAddr};

use crate::harness::*;

/// Spellings tollgate counts as `POST /login` (request_path.rs and the
/// login policy's `case_insensitive`, `trailing_slash: ignore`).
const LOGIN_SPELLINGS: [&str; 8] = [
    "/LOGIN",
    "/login/",
    "/login;jsessionid=x",
    "/%4Cogin",
    "/./login/",
    "//login",
    "/api/..;/login",
    "/api/%2e%2e/login",
];

/// Spellings tollgate counts as exports (`path_prefix: /api/exports`,
/// case-insensitive).
const EXPORT_SPELLINGS: [&str; 6] = [
    "/api/exports/orders",
    "/API/exports/orders",
    "/api/EXPORTS/orders",
    "/api/exports",
    "/api/exports.csv",
    "/api/exports;x/orders",
];

/// An export that can never be admitted: 500 thousand rows on a budget of 100.
const NEVER_ADMITTED: &str = "X-API-Key: key-fail-closed\r\nX-Export-Rows-Thousands: 500\r\n";

/// The failed-closed answer of examples/nginx.conf.
const FAILED_CLOSED: &str = r#"{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the rate limiter cannot be reached, and this endpoint does not admit requests without it"}"#;

/// Each login spelling and each never-admitted export, ten times, all at
/// once (a stalled tollgate holds each for proxy_read_timeout): the
/// statuses nginx answered, by path, in order.
async fn every_spelling_ten_times(nginx: SocketAddr) -> Vec<(String, Vec<u16>)> {
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
            tasks.spawn(async move { (i, n, raw([127, 0, 0, 30], nginx, &request).await) });
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tollgate_down_every_login_spelling_fails_closed_through_nginx() {
    let costly = tempfile::tempdir().expect("temp dir");
    let mut stack = Stack::start_with(&costly_exports("nginx-tollgate.yaml", costly.path())).await;
    let nginx = SocketAddr::from((Ipv4Addr::LOCALHOST, stack.nginx.port));
    // While tollgate runs, every spelling is one login limit of 5, and
    // every spelling of the export is one that can never be admitted.
    let mut statuses = Vec::new();
    for path in LOGIN_SPELLINGS {
        statuses.push(raw([127, 0, 0, 29], nginx, &post(path, "")).await.0);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);
    for path in EXPORT_SPELLINGS {
        let (status, body) = raw([127, 0, 0, 29], nginx, &get(path, NEVER_ADMITTED)).await;
        assert_eq!(status, 429, "{path}: {body}");
    }
    assert_eq!(stack.upstream.count(), 5);

    // Killed: nginx's subrequest gets 502, and nothing gets through.
    stack.stop_tollgate();
    assert_eq!(every_spelling_ten_times(nginx).await, all_failed_closed());
    assert_eq!(stack.upstream.count(), 5, "{:?}", stack.upstream.seen());
    assert!(stack.nginx.logs().contains("Connection refused"));

    // The API proper still fails open.
    let (status, body) = raw(
        [127, 0, 0, 29],
        nginx,
        &get("/api/orders", "X-API-Key: k\r\n"),
    )
    .await;
    assert_eq!((status, body.as_str()), (200, "hello from upstream\n"));
    assert_eq!(stack.upstream.count(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tollgate_stalled_every_login_spelling_fails_closed_through_nginx() {
    let stack = Stack::start().await;
    let nginx = SocketAddr::from((Ipv4Addr::LOCALHOST, stack.nginx.port));
    let tollgate = stack.tollgate.as_ref().expect("tollgate runs");
    // Stopped: it accepts connections (the kernel does) and never answers,
    // so nginx's subrequest times out (proxy_read_timeout, 504).
    tollgate.signal("STOP");
    let statuses = every_spelling_ten_times(nginx).await;
    tollgate.signal("CONT");
    assert_eq!(statuses, all_failed_closed());
    assert_eq!(stack.upstream.count(), 0, "{:?}", stack.upstream.seen());
    assert!(
        stack
            .nginx
            .logs()
            .contains("upstream timed out (110: Connection timed out) while reading response header from upstream"),
        "{}",
        stack.nginx.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_an_export_spends_the_one_hourly_budget() {
    let stack = Stack::start().await;
    let nginx = SocketAddr::from((Ipv4Addr::LOCALHOST, stack.nginx.port));
    // The whole hourly budget (100) at each request, under one key: one
    // export in all, whichever way it is spelled.
    let spellings = [
        "/API/exports/orders",
        "/api/EXPORTS/orders",
        "/api/exports",
        "/api/exports.csv",
        "/api/exports/",
    ];
    let mut statuses = Vec::new();
    for path in spellings {
        let extra = "X-API-Key: key-one-budget\r\nX-Export-Rows-Thousands: 100\r\n";
        statuses.push(raw([127, 0, 0, 31], nginx, &get(path, extra)).await.0);
    }
    assert_eq!(statuses, [200, 429, 429, 429, 429]);
    assert_eq!(stack.upstream.count(), 1);

    // /API/… is the API: it needs its key like /api/….
    for path in ["/API/orders", "/Api/exports/x", "/api/"] {
        let (status, body) = raw([127, 0, 0, 31], nginx, &get(path, "")).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&body).expect("problem+json")["detail"],
            "policy api: identity part api_key (header x-api-key) is missing from the request",
            "{path}"
        );
    }
    assert_eq!(stack.upstream.count(), 1);
}
