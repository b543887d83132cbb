//! Connections are never the weak point: a flood of idle connections to
//! tollgate from an address that is not nginx's fills what it may, and
//! nginx's calls are still decided exactly — over TCP, where the trusted
//! proxies keep a reserve of `server.max_connections`, and over the proxy
//! socket, which no one else reaches. Before, the flood locked nginx out,
//! its calls got 502, and `/api/` failed open.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use tokio::net::{TcpSocket, TcpStream};

use crate::harness::*;
use crate::support::{TollgateProcess, metric};

/// The flooding peer: another loopback address (nginx is 127.0.0.1, the
/// example's one trusted proxy).
const FLOODER: [u8; 4] = [127, 0, 0, 2];
/// `server.max_connections` in the tests' copies of the example; a quarter
/// of it (10) is the trusted proxies' reserve.
const MAX_CONNECTIONS: usize = 40;
/// `TOLLGATE_METRICS_TOKEN` of the stack's tollgate.
const METRICS_TOKEN: &str = "proxy-test-metrics-token";

/// The example's API bucket refills 5 a second; here 5 an hour, so its 40
/// calls are decided exactly however long a loaded machine takes to send
/// them (at 5 a second, a call 200 ms late found one more token).
const API_REFILL: (&str, &str) = (
    "refill: { tokens: 5, per: 1s }",
    "refill: { tokens: 5, per: 1h }",
);

/// examples/nginx-tollgate.yaml with `lines` added to its `server:`
/// section and the API's refill of [`API_REFILL`], written into `dir`.
fn example_with(dir: &Path, lines: &str) -> PathBuf {
    let text = std::fs::read_to_string(example("nginx-tollgate.yaml")).expect("read the example");
    assert_eq!(text.matches("\nserver:\n").count(), 1, "one server section");
    assert_eq!(text.matches(API_REFILL.0).count(), 1, "one API refill");
    let text = text
        .replacen("\nserver:\n", &format!("\nserver:\n{lines}"), 1)
        .replacen(API_REFILL.0, API_REFILL.1, 1);
    let path = dir.join("nginx-tollgate.yaml");
    std::fs::write(&path, text).expect("write the config");
    path
}

/// `count` connections from [`FLOODER`] to `to`, each connected (so in
/// tollgate's accept queue before anything connected after) and silent.
async fn flood(to: SocketAddr, count: usize) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(count);
    for _ in 0..count {
        let socket = TcpSocket::new_v4().expect("socket");
        socket
            .bind(SocketAddr::from((FLOODER, 0)))
            .expect("bind the flooding address");
        held.push(socket.connect(to).await.expect("connect"));
    }
    held
}

/// tollgate's HTTP address.
fn tcp_address(tollgate: &TollgateProcess) -> SocketAddr {
    tollgate
        .base
        .strip_prefix("http://")
        .and_then(|addr| addr.parse().ok())
        .expect("tollgate's base is http://IP:PORT")
}

/// tollgate's `/metrics` (its token given), over its TCP listener.
async fn tollgate_metrics(tollgate: &TollgateProcess) -> String {
    let request = format!(
        "GET /metrics HTTP/1.1\r\nHost: tollgate\r\nAuthorization: Bearer {METRICS_TOKEN}\r\nConnection: close\r\n\r\n"
    );
    let (status, body) = raw([127, 0, 0, 1], tcp_address(tollgate), &request).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// What nginx answered: 40 calls on one key with a burst of 20, one call
/// without a key, 7 logins from one client address and 1 from another.
async fn decisions_through(nginx: SocketAddr) -> (Vec<u16>, u16, Vec<u16>, u16) {
    let mut api = Vec::new();
    for _ in 0..40 {
        let extra = "X-API-Key: key-under-flood\r\n";
        api.push(
            raw([127, 0, 0, 60], nginx, &get("/api/orders", extra))
                .await
                .0,
        );
    }
    let keyless = raw([127, 0, 0, 60], nginx, &get("/api/orders", "")).await.0;
    let mut logins = Vec::new();
    for _ in 0..7 {
        logins.push(raw([127, 0, 0, 61], nginx, &post("/login", "")).await.0);
    }
    let other_client = raw([127, 0, 0, 62], nginx, &post("/login", "")).await.0;
    (api, keyless, logins, other_client)
}

/// Exactly what an unflooded stack answers: 20 of 40 admitted, the keyless
/// call refused (400), 5 logins then 429s, and another client's login
/// admitted (its own address, not a shared bucket).
fn assert_decided_exactly(decided: &(Vec<u16>, u16, Vec<u16>, u16)) {
    let (api, keyless, logins, other_client) = decided;
    let admitted = api.iter().filter(|s| **s == 200).count();
    let limited = api.iter().filter(|s| **s == 429).count();
    assert_eq!((admitted, limited), (20, 20), "{api:?}");
    assert_eq!(*keyless, 400);
    assert_eq!(logins, &[200, 200, 200, 200, 200, 429, 429]);
    assert_eq!(*other_client, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_another_address_leaves_nginx_its_reserve_and_exact_decisions() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = example_with(
        dir.path(),
        &format!("  max_connections: {MAX_CONNECTIONS}\n"),
    );
    let stack = Stack::start_with(&config).await;
    let tollgate = stack.tollgate.as_ref().expect("tollgate runs");
    let nginx = SocketAddr::from((Ipv4Addr::LOCALHOST, stack.nginx.port));

    // All of max_connections asked for, from one address that is not nginx.
    let _held = flood(tcp_address(tollgate), MAX_CONNECTIONS).await;
    let decided = decisions_through(nginx).await;
    assert_decided_exactly(&decided);
    assert_eq!(stack.upstream.count(), 20 + 5 + 1);

    // The flood got what is not the proxies' (30); the other 10 were
    // refused by the reserve, and no one was refused for max_connections.
    let metrics = tollgate_metrics(tollgate).await;
    // The flood connects faster than tollgate accepts: a refused
    // connection's slot may still be counted as the next one arrives, so
    // the reserve can refuse one more than the plain count, never fewer.
    let refused = metric(
        &metrics,
        r#"tollgate_connections_refused_total{rule="proxy_reserved_connections"}"#,
    );
    assert!(
        refused.is_some_and(|r| (10.0..=11.0).contains(&r)),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "tollgate_refused_connections_total"),
        Some(0.0)
    );
}

/// A directory nginx's workers (an unprivileged user when the tests run as
/// root) can reach a socket in.
fn socket_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("socket dir");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod the socket dir");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_on_the_proxy_socket_is_decided_exactly_while_tcp_is_flooded() {
    let dir = socket_dir();
    let socket = dir.path().join("tollgate.sock");
    let config = example_with(
        dir.path(),
        &format!(
            "  max_connections: {MAX_CONNECTIONS}\n  proxy_socket: {{path: {}, mode: \"0666\"}}\n",
            socket.display()
        ),
    );
    let upstream = Upstream::start().await;
    let tollgate = TollgateProcess::spawn(&config, &example_env("nginx-tollgate.yaml"));
    // The socket is bound before tollgate says where it listens.
    assert!(socket.exists(), "{} is bound", socket.display());
    let nginx = Nginx::start_to(&format!("unix:{}", socket.display()), upstream.addr);
    let stack = Stack {
        nginx,
        tollgate: Some(tollgate),
        upstream,
    };
    let tollgate = stack.tollgate.as_ref().expect("tollgate runs");
    let nginx = SocketAddr::from((Ipv4Addr::LOCALHOST, stack.nginx.port));

    // More than max_connections from elsewhere: TCP is full for them.
    let _held = flood(tcp_address(tollgate), MAX_CONNECTIONS + 10).await;
    let decided = decisions_through(nginx).await;
    assert_decided_exactly(&decided);
    assert_eq!(stack.upstream.count(), 20 + 5 + 1);
    let metrics = tollgate_metrics(tollgate).await;
    // The flood connects faster than tollgate accepts: a refused
    // connection's slot may still be counted as the next one arrives, so
    // the reserve can refuse one more than the plain count, never fewer.
    let refused = metric(
        &metrics,
        r#"tollgate_connections_refused_total{rule="proxy_reserved_connections"}"#,
    );
    assert!(
        refused.is_some_and(|r| (20.0..=21.0).contains(&r)),
        "{metrics}"
    );
}
