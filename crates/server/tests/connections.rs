//! Who may hold a connection, and for how long: a silent peer is closed
//! after `server.header_timeout_ms` while a trusted proxy's idle connection
//! stays; one address past `max_connections_per_peer` is refused while
//! another is served; and the file descriptors `max_connections` needs are
//! raised to at start, or the start refused (serve and validate alike).
//! (docs/deploy.md, "What a flood can and cannot do".)

mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use support::{TestServer, TollgateProcess, metric, metrics_text, tollgate_bin};

const POLICY: &str = "policies:\n  - {name: p, algorithm: token_bucket, capacity: 10, refill: {tokens: 1, per: 1s}, identity: [client_ip]}\n";

/// A generous bound on what must happen "eventually": never a measure.
const EVENTUALLY: Duration = Duration::from_secs(20);

/// A connection from `ip` to `to`.
async fn connect_from(ip: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::from((ip, 0)))
        .expect("bind the client address");
    socket.connect(to).await.expect("connect")
}

/// `GET /healthz` on a kept-alive connection: the status, or `None` when
/// the server closed it instead of answering.
async fn healthz(stream: &mut TcpStream) -> Option<u16> {
    let request = "GET /healthz HTTP/1.1\r\nHost: tollgate\r\n\r\n";
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    // The answer is small; read until its (empty-or-short) body is in.
    loop {
        let read = tokio::time::timeout(EVENTUALLY, stream.read(&mut buf))
            .await
            .expect("an answer or a close, eventually")
            .ok()?;
        if read == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..read]);
        let text = String::from_utf8_lossy(&answer);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_owned)
                })
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            if body.len() >= length {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&answer);
    text.split(' ').nth(1).and_then(|code| code.parse().ok())
}

/// Waits (bounded by [`EVENTUALLY`]) until the server closes `stream`
/// without having answered anything; panics if it sends a byte.
async fn closed_unanswered(stream: &mut TcpStream) {
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(EVENTUALLY, stream.read(&mut buf))
        .await
        .expect("closed within the generous bound");
    // A reset is a close too.
    assert_eq!(read.unwrap_or(0), 0, "{:?}", &buf[..]);
}

fn addr(server: &TestServer) -> SocketAddr {
    server
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("IP:PORT")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_peer_is_closed_after_the_header_timeout_but_a_trusted_proxy_is_kept() {
    let server = TestServer::start(&format!(
        "server: {{header_timeout_ms: 300, proxy_idle_timeout_ms: 600000, trusted_proxies: [127.0.0.1]}}\n{POLICY}"
    ))
    .await;
    let to = addr(&server);
    let mut proxy = connect_from([127, 0, 0, 1], to).await;
    assert_eq!(healthz(&mut proxy).await, Some(200));
    // Sends nothing at all.
    let mut silent = connect_from([127, 0, 0, 2], to).await;
    // Sends one request, then stays idle on its keep-alive connection.
    let mut idle = connect_from([127, 0, 0, 3], to).await;
    assert_eq!(healthz(&mut idle).await, Some(200));
    closed_unanswered(&mut silent).await;
    closed_unanswered(&mut idle).await;
    // Both closed past the header timeout: the proxy's connection, idle as
    // long, still answers.
    assert_eq!(healthz(&mut proxy).await, Some(200));
    let metrics = metrics_text(&server.client, &server.base).await;
    assert_eq!(
        metric(&metrics, "tollgate_header_timeouts_total"),
        Some(2.0)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_past_its_cap_is_refused_while_another_address_is_served() {
    let server = TestServer::start(&format!(
        "server: {{max_connections_per_peer: 3, header_timeout_ms: 600000}}\n{POLICY}"
    ))
    .await;
    let to = addr(&server);
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut stream = connect_from([127, 0, 0, 2], to).await;
        assert_eq!(healthz(&mut stream).await, Some(200));
        held.push(stream);
    }
    let mut fourth = connect_from([127, 0, 0, 2], to).await;
    assert_eq!(healthz(&mut fourth).await, None, "the fourth is refused");
    let mut other = connect_from([127, 0, 0, 3], to).await;
    assert_eq!(healthz(&mut other).await, Some(200));
    // Its held connections still answer.
    for stream in &mut held {
        assert_eq!(healthz(stream).await, Some(200));
    }
    let metrics = metrics_text(&server.client, &server.base).await;
    assert_eq!(
        metric(
            &metrics,
            r#"tollgate_connections_refused_total{rule="max_connections_per_peer"}"#
        ),
        Some(1.0),
        "{metrics}"
    );
    // Open now: the three, the other address's, and the one reading this.
    assert_eq!(
        metric(&metrics, r#"tollgate_open_connections{peer="other"}"#),
        Some(5.0)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_listener_shares_the_budget_and_closes_a_peer_that_sends_no_first_byte() {
    let server = TestServer::start(&format!(
        "server: {{header_timeout_ms: 300, max_connections_per_peer: 2}}\n{POLICY}"
    ))
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let grpc = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(tollgate::serve_grpc(
        std::sync::Arc::clone(&server.app),
        listener,
        async {
            let _ = stopped.await;
        },
    ));
    // Sends no HTTP/2 preface: closed after the header timeout.
    let mut silent = connect_from([127, 0, 0, 2], grpc).await;
    closed_unanswered(&mut silent).await;
    // One peer's cap counts its connections on both listeners: with two
    // HTTP connections held, its gRPC connection is refused at once.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = connect_from([127, 0, 0, 3], addr(&server)).await;
        assert_eq!(healthz(&mut stream).await, Some(200));
        held.push(stream);
    }
    let mut third = connect_from([127, 0, 0, 3], grpc).await;
    closed_unanswered(&mut third).await;
    let metrics = metrics_text(&server.client, &server.base).await;
    assert_eq!(
        metric(&metrics, "tollgate_header_timeouts_total"),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &metrics,
            r#"tollgate_connections_refused_total{rule="max_connections_per_peer"}"#
        ),
        Some(1.0),
        "{metrics}"
    );
    let _ = stop.send(());
    served.await.expect("gRPC task").expect("served cleanly");
    server.stop().await;
}

/// `prlimit --nofile=SOFT:HARD tollgate ARGS --config CONFIG`.
fn limited(nofile: &str, args: &[&str], config: &Path) -> Command {
    let mut cmd = Command::new("prlimit");
    cmd.arg(format!("--nofile={nofile}"))
        .arg(tollgate_bin())
        .args(args)
        .arg("--config")
        .arg(config);
    cmd
}

/// `tollgate serve` on a free port under `prlimit --nofile=NOFILE`, once it
/// listens, and the address it listens on.
fn serve_limited(nofile: &str, config: &Path, stderr: Stdio) -> (TollgateProcess, SocketAddr) {
    let mut child = limited(nofile, &["serve", "--listen", "127.0.0.1:0"], config)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("prlimit runs tollgate serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the listen line");
    let process = TollgateProcess {
        base: line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("not a listen line: {line:?}"))
            .to_owned(),
        child,
    };
    let to = process
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("IP:PORT");
    (process, to)
}

fn write_config(dir: &Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("tollgate.yaml");
    std::fs::write(&path, format!("server: {server}\n{POLICY}")).expect("write config");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_raises_its_soft_descriptor_limit_and_holds_more_connections_than_it_allowed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(dir.path(), "{max_connections: 1000}");
    let (process, to) = serve_limited("256:4096", &config, Stdio::null());
    // 300 connections, each answered and kept open: more than the 256 the
    // soft limit allowed (from three addresses, 100 each: within
    // max_connections_per_peer).
    let mut held = Vec::new();
    for n in 0..300u16 {
        let mut stream = connect_from([127, 0, 0, 2 + (n % 3) as u8], to).await;
        assert_eq!(
            healthz(&mut stream).await,
            Some(200),
            "connection {}",
            held.len() + 1
        );
        held.push(stream);
    }
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", process.child.id()))
        .expect("the process's limits");
    let open_files: Vec<&str> = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files")
        .split_whitespace()
        .collect();
    assert_eq!(
        open_files,
        ["Max", "open", "files", "4096", "4096", "files"]
    );

    drop(process);
}

/// What `serve` says when a `max_connections` the config sets needs more
/// descriptors than a hard limit of 1,024 allows.
const TOO_FEW: &str = "server.max_connections 1000 needs 1512 file descriptors (512 more for listeners, stores and files), but this process may open only 1024 (RLIMIT_NOFILE soft 1024, hard 1024): past it connections are not accepted and a proxy's calls time out; raise the limit (ulimit -n, systemd LimitNOFILE=, docker run --ulimit nofile=) or lower server.max_connections to at most 512";

#[test]
fn serve_refuses_a_set_max_connections_the_hard_limit_cannot_hold_and_validate_warns() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(dir.path(), "{max_connections: 1000}");
    let mut child = limited("256:1024", &["serve", "--listen", "127.0.0.1:0"], &config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prlimit runs tollgate");
    // A serve that started says where it listens (and would run on):
    // refused, it prints nothing and exits.
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("stdout");
    if !first.is_empty() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("tollgate ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(first, "", "serve started: {stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.lines().last(),
        Some(format!("tollgate: {TOO_FEW}").as_str())
    );

    // validate runs where CI runs, not where serve will: it warns, and
    // only --strict fails on it.
    let warning = format!("tollgate: warning: on this machine serve would refuse: {TOO_FEW}");
    for (args, code) in [(&["validate"][..], 0), (&["validate", "--strict"][..], 1)] {
        let out = limited("256:1024", args, &config)
            .output()
            .expect("prlimit runs tollgate");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.lines().any(|l| l == warning), "{args:?}: {stderr}");
    }
    // Within the limit validate says nothing of descriptors.
    let out = limited("256:2048", &["validate", "--strict"], &config)
        .output()
        .expect("prlimit runs tollgate");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_max_connections_is_lowered_to_what_the_hard_limit_holds() {
    let dir = tempfile::tempdir().expect("temp dir");
    // The default max_connections; a long header timeout keeps the held
    // connections open while the others are made.
    let config = write_config(dir.path(), "{header_timeout_ms: 600000}");
    let (mut process, to) = serve_limited("256:1024", &config, Stdio::piped());
    let stderr = process.child.stderr.take().expect("stderr");
    // 1,024 descriptors less 512 spare: 512 connections are served (from
    // two addresses, within max_connections_per_peer), the next is closed.
    let mut held = Vec::new();
    for n in 0..512u16 {
        let mut stream = connect_from([127, 0, 0, 2 + (n % 2) as u8], to).await;
        assert_eq!(
            healthz(&mut stream).await,
            Some(200),
            "connection {}",
            n + 1
        );
        held.push(stream);
    }
    let mut over = connect_from([127, 0, 0, 4], to).await;
    assert_eq!(healthz(&mut over).await, None);
    drop(held);
    drop(process);
    let mut logged = String::new();
    std::io::Read::read_to_string(&mut { stderr }, &mut logged).expect("stderr");
    assert!(
        logged.contains("server.max_connections: the default 16384 needs 16896 file descriptors but this process may open only 1024 (RLIMIT_NOFILE soft 1024, hard 1024): serving at most 512 connections"),
        "{logged}"
    );
}

/// One request on the unix socket at `path`, `Connection: close`: the
/// status and the body.
async fn over_socket(path: &Path, request: &str) -> (u16, String) {
    let mut stream = tokio::net::UnixStream::connect(path)
        .await
        .expect("connect to the proxy socket");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("read");
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_socket_is_a_trusted_proxy_with_no_trusted_proxies_listed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(
        &config,
        "server: {proxy_socket: {path: proxy.sock}, deny_status: 403}\npolicies:\n  - {name: login, algorithm: fixed_window, limit: 1, window: 1h, match: {path: /login}, identity: [client_ip]}\n",
    )
    .expect("write config");
    let _tollgate = TollgateProcess::spawn(&config, &[]);
    let socket = dir.path().join("proxy.sock");
    let login = |client: &str| {
        format!(
            "GET /v1/authorize HTTP/1.1\r\nHost: shop\r\nX-Original-URI: /login\r\nX-Original-Method: POST\r\n{client}Connection: close\r\n\r\n"
        )
    };
    // Its description of the request is believed, and X-Forwarded-For
    // names the client: one login each, per client.
    let first = login("X-Forwarded-For: 203.0.113.9\r\n");
    assert_eq!(over_socket(&socket, &first).await.0, 200);
    assert_eq!(over_socket(&socket, &first).await.0, 403);
    let other = login("X-Real-IP: 203.0.113.10\r\n");
    assert_eq!(over_socket(&socket, &other).await.0, 200);
    // Naming no client is a fault, not one bucket for all.
    let (status, body) = over_socket(&socket, &login("")).await;
    assert_eq!(status, 400);
    let body: serde_json::Value = serde_json::from_str(&body).expect("problem+json");
    assert_eq!(
        body["detail"],
        "this request came on server.proxy_socket without X-Forwarded-For or X-Real-IP: the proxy must name the client's address"
    );
}
