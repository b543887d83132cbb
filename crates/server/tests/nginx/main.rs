//! A real nginx in front of a small upstream, asking a real `tollgate serve`
//! through `auth_request`. What runs is examples/nginx.conf (with free ports
//! in place of its three addresses) and examples/nginx-tollgate.yaml, so the
//! examples are what these tests hold to the 429 contract of docs/design.md §8.

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::to_bytes;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::json;
use support::{TollgateProcess, free_port};

const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";
/// The login policy's window, in ms.
const LOGIN_WINDOW_MS: u64 = 600_000;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
}

// ---------- the upstream: counts and records what reaches it ----------

#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    method: String,
    uri: String,
    body: String,
}

/// The application behind nginx. `/api/broken` answers 503, anything else
/// 200 with a fixed body.
struct Upstream {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Upstream {
    async fn start() -> Self {
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

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("upstream record").clone()
    }

    fn count(&self) -> usize {
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
struct Nginx {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Nginx {
    /// Starts nginx on a free port. Another process may take that port
    /// between `free_port` and nginx's bind (nginx then exits with "Address
    /// already in use"), so a taken port is retried on a fresh one; any other
    /// failure to start is the test's failure.
    fn start(tollgate_base: &str, upstream: SocketAddr) -> Self {
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

    fn logs(&self) -> String {
        ["stderr.log", "error.log"]
            .iter()
            .map(|name| {
                let text = std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
                format!("--- {name}\n{text}")
            })
            .collect()
    }

    fn url(&self, path: &str) -> String {
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

struct Stack {
    nginx: Nginx,
    tollgate: Option<TollgateProcess>,
    upstream: Upstream,
}

impl Stack {
    async fn start() -> Self {
        Self::start_with(&example("nginx-tollgate.yaml")).await
    }

    /// The stack with another tollgate config in place of the example's.
    async fn start_with(config: &Path) -> Self {
        let upstream = Upstream::start().await;
        let tollgate = TollgateProcess::spawn(
            config,
            &[(
                "TOLLGATE_IDENTITY_KEY",
                "nginx-test-identity-key-of-32-bytes!",
            )],
        );
        let nginx = Nginx::start(&tollgate.base, upstream.addr);
        Self {
            nginx,
            tollgate: Some(tollgate),
            upstream,
        }
    }

    fn stop_tollgate(&mut self) {
        // Dropping the process kills it and waits for it.
        drop(self.tollgate.take());
    }
}

/// A client with its own loopback address, so each is a distinct client IP
/// to nginx (127.0.0.1 is nginx itself, the trusted proxy).
fn client_at(ip: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from(ip))
        .build()
        .expect("client")
}

/// What nginx's client received.
struct Answer {
    status: u16,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    async fn of(request: reqwest::RequestBuilder) -> Self {
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

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("ASCII header"))
    }

    /// The header's value, which must be present exactly once.
    fn one(&self, name: &str) -> &str {
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
    fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.headers.keys().map(|k| k.as_str()).collect();
        names.sort_unstable();
        names
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }
}

/// A RateLimit or RateLimit-Policy field parsed as a Structured Field List:
/// each member's sf-string name and its integer parameters, in order.
type FieldList = Vec<(String, Vec<(String, i64)>)>;

fn sf_list(field: &str) -> FieldList {
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

fn member(name: &str, params: &[(&str, i64)]) -> (String, Vec<(String, i64)>) {
    (
        name.to_owned(),
        params.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
    )
}

/// The fields of an admitted answer that nginx passed from the upstream.
const ADMITTED_FIELDS: [&str; 7] = [
    "connection",
    "content-length",
    "content-type",
    "date",
    "ratelimit",
    "ratelimit-policy",
    "server",
];

// ---------- the tests ----------

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

    // The body is tollgate's problem+json, byte for byte what it put in
    // Tollgate-Problem; its detail states the exact wait in ms.
    let body = rejected.json();
    let detail = body["detail"].as_str().expect("detail");
    let retry_ms: u64 = detail
        .strip_prefix("rate limit exceeded for policy login; retry after ")
        .and_then(|rest| rest.strip_suffix(" ms"))
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("unexpected detail {detail:?}"));
    assert_eq!(
        body,
        json!({
            "type": QUOTA_EXCEEDED,
            "title": "Too Many Requests",
            "status": 429,
            "detail": format!("rate limit exceeded for policy login; retry after {retry_ms} ms"),
            "violated-policies": ["login"],
        })
    );
    // The oldest attempt leaves the log one window after it was made.
    assert!(
        (LOGIN_WINDOW_MS.saturating_sub(elapsed_ms)..=LOGIN_WINDOW_MS).contains(&retry_ms),
        "retry after {retry_ms} ms, {elapsed_ms} ms into the window"
    );
    let retry_after: u64 = rejected.one("retry-after").parse().expect("whole seconds");
    assert_eq!(
        retry_after,
        retry_ms.div_ceil(1000),
        "rounded up, never early"
    );

    assert_eq!(
        sf_list(rejected.one("ratelimit-policy")),
        vec![member("login", &[("q", 5), ("w", 600)])]
    );
    let state = sf_list(rejected.one("ratelimit"));
    let reset = state
        .first()
        .and_then(|(_, params)| params.iter().find(|(key, _)| key == "t"))
        .map_or(-1, |(_, t)| *t);
    assert_eq!(
        state,
        vec![member("login", &[("r", 0), ("t", reset)])],
        "nothing remains"
    );
    // The log is fully clear when the newest attempt leaves it: no sooner
    // than the oldest one, no later than a window from now.
    let reset = u64::try_from(reset).expect("t ≥ 0");
    assert!(
        (retry_after..=LOGIN_WINDOW_MS / 1000).contains(&reset),
        "t={reset}, Retry-After {retry_after}"
    );

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
    let stack = Stack::start().await;
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

// ---------- nobody gets around a limit ----------

/// One request written byte for byte (paths as the client spells them:
/// reqwest would resolve `/./` and `..` itself), from `ip`, on a fresh
/// connection; returns the status and the body.
async fn raw(ip: [u8; 4], to: SocketAddr, request: &str) -> (u16, String) {
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

fn post(path: &str, extra: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 0\r\n{extra}Connection: close\r\n\r\n"
    )
}

/// `count` headers `X-Pad-<i>: v`, each on its own line.
fn padding(count: usize) -> String {
    (0..count).map(|i| format!("X-Pad-{i}: v\r\n")).collect()
}

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
    // Straight at /v1/authorize from 127.0.0.2, not in trusted_proxies:
    // every description of a login is refused, however it is spelled.
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
        let (status, body) = raw([127, 0, 0, 2], tollgate, &request).await;
        assert_eq!(status, 400, "{uri}: {body}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&body).expect("problem+json")["detail"],
            "header x-original-uri describes the request, but this caller (127.0.0.2) is not in server.trusted_proxies: only a trusted proxy may describe a request"
        );
    }
    // Another family's headers are never believed, from anyone: the call
    // describes itself (GET /v1/authorize), which no policy matches.
    let request = "GET /v1/authorize HTTP/1.1\r\nHost: shop.example\r\nX-Forwarded-Method: POST\r\nX-Forwarded-Uri: /login\r\nConnection: close\r\n\r\n";
    assert_eq!(raw([127, 0, 0, 2], tollgate, request).await.0, 200);
    // Describing itself, the caller is limited as the client it is: its own
    // address, five logins.
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let request = "POST /v1/authorize//login HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        statuses.push(raw([127, 0, 0, 2], tollgate, request).await.0);
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
        let (got, body) = raw([127, 0, 0, 2], tollgate, &request).await;
        let found = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["detail"].as_str().map(str::to_owned))
            .unwrap_or_default();
        assert_eq!((got, found.as_str()), (status, detail), "{request:.60}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_its_idempotency_key_is_charged_once_through_nginx() {
    // The example with request ids switched on, as docs/request-ids.md says
    // to for an application that honours Idempotency-Key.
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.yaml");
    let example_text =
        std::fs::read_to_string(example("nginx-tollgate.yaml")).expect("read the example");
    assert_eq!(example_text.matches("\nserver:\n").count(), 1);
    std::fs::write(
        &config,
        example_text.replace(
            "\nserver:\n",
            "\nserver:\n  request_id_header: Idempotency-Key\n",
        ),
    )
    .expect("write config");
    let stack = Stack::start_with(&config).await;
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

/// The reviewer's attack through the shipped example with request ids on:
/// one export admitted under an Idempotency-Key, then logins from the same
/// address under that key, hoping to be answered from the export's record.
/// The record belongs to the export alone: the first such login is decided
/// and charged as a new request (the login budget goes 5 → 4), its repeats
/// are retries of that login, charged once; and the login limit then holds
/// at exactly 5 in all for logins under their own keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exports_idempotency_key_does_not_admit_logins_through_nginx() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.yaml");
    let example_text =
        std::fs::read_to_string(example("nginx-tollgate.yaml")).expect("read the example");
    std::fs::write(
        &config,
        example_text.replace(
            "\nserver:\n",
            "\nserver:\n  request_id_header: Idempotency-Key\n",
        ),
    )
    .expect("write config");
    let stack = Stack::start_with(&config).await;
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
    let mut borrowed = Vec::new();
    for _ in 0..10 {
        let answer = Answer::of(client.post(&login).header("Idempotency-Key", "one-record")).await;
        borrowed.push((answer.status, answer.one("ratelimit").to_owned()));
    }
    let charged_once = (200, r#""login";r=4;t=600"#.to_owned());
    assert_eq!(borrowed, vec![charged_once; 10]);
    let mut own = Vec::new();
    for i in 0..10 {
        let key = format!("login-{i}");
        own.push(
            Answer::of(client.post(&login).header("Idempotency-Key", key))
                .await
                .status,
        );
    }
    assert_eq!(own, [200, 200, 200, 200, 429, 429, 429, 429, 429, 429]);
    assert_eq!(stack.upstream.count(), 1 + 10 + 4);
}
