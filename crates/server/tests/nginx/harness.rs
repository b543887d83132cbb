//! The stack every nginx test runs: a small upstream that records what
//! reaches it, the real nginx serving examples/nginx.conf, and a real
//! `tollgate serve` of examples/nginx-tollgate.yaml; and their clients.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{TollgateProcess, free_port};
use axum::Router;
use axum::body::to_bytes;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use reqwest::header::HeaderMap;

pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";
/// The login policy's window, in ms.
pub const LOGIN_WINDOW_MS: u64 = 600_000;

pub fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
}

// ---------- the upstream: counts and records what reaches it ----------

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub method: String,
    pub uri: String,
    pub body: String,
}

/// The application behind nginx. `/api/broken` answers 503, anything else
/// 200 with a fixed body.
pub struct Upstream {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Upstream {
    pub async fn start() -> Self {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let app = Router::new().fallback(record).with_state(Arc::clone(&seen));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the upstream");
        let addr = listener.local_addr().expect("upstream address");
        // An application that takes as many headers as any client sends,
        // so what the header tests see is tollgate's doing, not its own 431.
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let app = app.clone();
                let service =
                    hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        tower::ServiceExt::oneshot(app.clone(), req.map(axum::body::Body::new))
                    });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .max_headers(1024)
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
                );
            }
        });
        Self { addr, seen }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("upstream record").clone()
    }

    pub fn count(&self) -> usize {
        self.seen.lock().expect("upstream record").len()
    }
}

async fn record(State(seen): State<Arc<Mutex<Vec<Seen>>>>, req: Request) -> (StatusCode, String) {
    let (parts, body) = req.into_parts();
    let body = to_bytes(body, 1 << 20).await.expect("upstream body");
    seen.lock().expect("upstream record").push(Seen {
        method: parts.method.to_string(),
        uri: parts.uri.to_string(),
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    if parts.uri.path() == "/api/broken" {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "upstream is broken\n".into(),
        )
    } else {
        (StatusCode::OK, "hello from upstream\n".into())
    }
}

// ---------- nginx: the real binary, everything under a temp prefix ----------

fn nginx_binary() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/usr/local/nginx/sbin"].map(PathBuf::from))
        .map(|dir| dir.join("nginx"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "the nginx binary is missing (looked in PATH and /usr/sbin): \
                 install it with `apt-get install -y nginx` (scripts/test does this)"
            )
        })
}

/// examples/nginx.conf with free ports in place of its three addresses, and
/// one location more: [`READY_PATH`], outside the limiter, answering `marker`.
fn render_example(listen: u16, tollgate: &str, upstream: SocketAddr, marker: &str) -> String {
    let mut text =
        std::fs::read_to_string(example("nginx.conf")).expect("read examples/nginx.conf");
    for (directive, replacement) in [
        (
            "listen 127.0.0.1:8000;",
            format!(
                "listen 127.0.0.1:{listen};\n        \
                 location = {READY_PATH} {{ auth_request off; return 200 \"{marker}\"; }}"
            ),
        ),
        ("server 127.0.0.1:8080;", format!("server {tollgate};")),
        ("server 127.0.0.1:3000;", format!("server {upstream};")),
    ] {
        assert_eq!(
            text.matches(directive).count(),
            1,
            "examples/nginx.conf must contain `{directive}` exactly once"
        );
        text = text.replace(directive, &replacement);
    }
    text
}

/// `nginx -p DIR -c DIR/nginx.conf -g 'daemon off;'`; stopped on drop.
pub struct Nginx {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Nginx {
    /// Starts nginx on a free port. Another process may take that port
    /// between `free_port` and nginx's bind (nginx then exits with "Address
    /// already in use"), so a taken port is retried on a fresh one; any other
    /// failure to start is the test's failure.
    pub fn start(tollgate_base: &str, upstream: SocketAddr) -> Self {
        for _ in 0..5 {
            match Self::start_on(free_port(), tollgate_base, upstream) {
                Ok(nginx) => return nginx,
                Err(PortTaken) => continue,
            }
        }
        panic!("nginx found every one of 5 free ports taken before it could bind");
    }

    fn start_on(port: u16, tollgate_base: &str, upstream: SocketAddr) -> Result<Self, PortTaken> {
        let binary = nginx_binary();
        let dir = tempfile::tempdir().expect("nginx prefix");
        // Workers run as an unprivileged user when the test runs as root;
        // they must be able to reach their temp directories.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod the nginx prefix");
        let tollgate = tollgate_base
            .strip_prefix("http://")
            .expect("tollgate's base is http://host:port");
        let conf = dir.path().join("nginx.conf");
        let marker = path_marker(dir.path());
        std::fs::write(&conf, render_example(port, tollgate, upstream, &marker))
            .expect("write nginx.conf");
        let stderr = std::fs::File::create(dir.path().join("stderr.log")).expect("stderr log");
        let child = Command::new(&binary)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf)
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let mut nginx = Self { child, port, dir };
        nginx.wait_until_serving(&marker)?;
        Ok(nginx)
    }

    /// Polls until this nginx answers its readiness location with its own
    /// marker (readiness, not a timing check). A bare TCP connect is not
    /// enough: when another process holds the port, the connect succeeds
    /// while this nginx is failing to bind.
    #[allow(clippy::disallowed_methods)] // a deadline on a real process's start
    fn wait_until_serving(&mut self, marker: &str) -> Result<(), PortTaken> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let logs = self.logs();
                if logs.contains("Address already in use") {
                    return Err(PortTaken);
                }
                panic!("nginx exited with {status}:\n{logs}");
            }
            if readiness_answer(addr).is_some_and(|body| body == marker) {
                return Ok(());
            }
            assert!(
                Instant::now() < deadline,
                "nginx did not serve on {addr}:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn logs(&self) -> String {
        ["stderr.log", "error.log"]
            .iter()
            .map(|name| {
                let text = std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
                format!("--- {name}\n{text}")
            })
            .collect()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: the master stops its workers too (SIGKILL would orphan them).
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// nginx could not bind its port: another process holds it.
struct PortTaken;

/// The readiness location's path, which only examples/nginx.conf as the
/// tests render it serves.
const READY_PATH: &str = "/.tollgate-test-ready";

/// What this nginx alone answers at [`READY_PATH`]: its prefix directory.
fn path_marker(prefix: &Path) -> String {
    prefix.display().to_string()
}

/// The body of `GET READY_PATH` on `addr`, if something answered it.
fn readiness_answer(addr: SocketAddr) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {READY_PATH} HTTP/1.0\r\nHost: ready\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

// ---------- the stack and its clients ----------

/// Test values of the variables the example's run command may set.
const EXAMPLE_VARIABLES: [(&str, &str); 4] = [
    (
        "TOLLGATE_IDENTITY_KEY",
        "nginx-test-identity-key-of-32-bytes!",
    ),
    ("TOLLGATE_CHECK_TOKEN", CHECK_TOKEN),
    ("TOLLGATE_ADMIN_TOKEN", ADMIN_TOKEN),
    ("TOLLGATE_METRICS_TOKEN", "nginx-test-metrics-token"),
];

/// The variables examples/nginx-tollgate.yaml's run command (its header
/// comment) sets, with test values: the stack runs the example as a user
/// following it would, no more guarded than that.
pub fn example_env() -> Vec<(&'static str, &'static str)> {
    let text = std::fs::read_to_string(example("nginx-tollgate.yaml")).expect("read the example");
    let header: String = text
        .lines()
        .take_while(|line| line.starts_with('#'))
        .collect();
    EXAMPLE_VARIABLES
        .into_iter()
        .filter(|(name, _)| header.contains(&format!("{name}=")))
        .collect()
}

/// `TOLLGATE_CHECK_TOKEN` of the stack's tollgate.
pub const CHECK_TOKEN: &str = "nginx-test-check-token";
/// `TOLLGATE_ADMIN_TOKEN` of the stack's tollgate.
pub const ADMIN_TOKEN: &str = "nginx-test-admin-token";

pub struct Stack {
    pub nginx: Nginx,
    pub tollgate: Option<TollgateProcess>,
    pub upstream: Upstream,
}

impl Stack {
    pub async fn start() -> Self {
        Self::start_with(&example("nginx-tollgate.yaml")).await
    }

    /// The stack with another tollgate config in place of the example's.
    pub async fn start_with(config: &Path) -> Self {
        let upstream = Upstream::start().await;
        let tollgate = TollgateProcess::spawn(config, &example_env());
        let nginx = Nginx::start(&tollgate.base, upstream.addr);
        Self {
            nginx,
            tollgate: Some(tollgate),
            upstream,
        }
    }

    pub fn stop_tollgate(&mut self) {
        // Dropping the process kills it and waits for it.
        drop(self.tollgate.take());
    }
}

/// A client with its own loopback address, so each is a distinct client IP
/// to nginx (127.0.0.1 is nginx itself, the trusted proxy).
pub fn client_at(ip: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from(ip))
        .build()
        .expect("client")
}

/// What nginx's client received.
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    pub async fn of(request: reqwest::RequestBuilder) -> Self {
        let response = request.send().await.expect("request through nginx");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.text().await.expect("body");
        Self {
            status,
            headers,
            body,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("ASCII header"))
    }

    /// The header's value, which must be present exactly once.
    pub fn one(&self, name: &str) -> &str {
        let values: Vec<_> = self.headers.get_all(name).iter().collect();
        assert_eq!(
            values.len(),
            1,
            "{name} must appear once: {:?}",
            self.headers
        );
        values[0].to_str().expect("ASCII header")
    }

    /// Every field name the client received, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.headers.keys().map(|k| k.as_str()).collect();
        names.sort_unstable();
        names
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }
}

/// A RateLimit or RateLimit-Policy field parsed as a Structured Field List:
/// each member's sf-string name and its integer parameters, in order.
pub type FieldList = Vec<(String, Vec<(String, i64)>)>;

pub fn sf_list(field: &str) -> FieldList {
    let list: sfv::List = sfv::Parser::new(field)
        .parse()
        .unwrap_or_else(|e| panic!("{field:?} is not a Structured Field List: {e}"));
    list.into_iter()
        .map(|member| match member {
            sfv::ListEntry::Item(item) => {
                let name = item
                    .bare_item
                    .as_string()
                    .unwrap_or_else(|| panic!("{field:?}: a member is not an sf-string"))
                    .as_str()
                    .to_owned();
                let params = item
                    .params
                    .iter()
                    .map(|(key, value)| {
                        let value = value
                            .as_integer()
                            .unwrap_or_else(|| panic!("{field:?}: {key} is not an integer"));
                        (key.as_str().to_owned(), i64::from(value))
                    })
                    .collect();
                (name, params)
            }
            sfv::ListEntry::InnerList(_) => panic!("{field:?}: unexpected inner list"),
        })
        .collect()
}

pub fn member(name: &str, params: &[(&str, i64)]) -> (String, Vec<(String, i64)>) {
    (
        name.to_owned(),
        params.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
    )
}

/// The fields of an admitted answer that nginx passed from the upstream.
pub const ADMITTED_FIELDS: [&str; 7] = [
    "connection",
    "content-length",
    "content-type",
    "date",
    "ratelimit",
    "ratelimit-policy",
    "server",
];

/// One request written byte for byte (paths as the client spells them:
/// reqwest would resolve `/./` and `..` itself), from `ip`, on a fresh
/// connection; returns the status and the body.
pub async fn raw(ip: [u8; 4], to: SocketAddr, request: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::from((ip, 0)))
        .expect("bind the client address");
    let mut stream = socket.connect(to).await.expect("connect");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("write the request");
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .await
        .expect("read the answer");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, body)| body)
        .to_owned();
    (status, body)
}

pub fn post(path: &str, extra: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 0\r\n{extra}Connection: close\r\n\r\n"
    )
}

/// `count` headers `X-Pad-<i>: v`, each on its own line.
pub fn padding(count: usize) -> String {
    (0..count).map(|i| format!("X-Pad-{i}: v\r\n")).collect()
}
