//! What the tests of a real proxy in front of tollgate share, whichever
//! proxy it is (nginx, Caddy): the examples, a small upstream that records
//! what reaches it, and clients that send requests as a proxy's clients do.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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

// ---------- the example's tollgate: the variables its run command sets ----------

/// `TOLLGATE_CHECK_TOKEN` of the stack's tollgate.
pub const CHECK_TOKEN: &str = "proxy-test-check-token";
/// `TOLLGATE_ADMIN_TOKEN` of the stack's tollgate.
pub const ADMIN_TOKEN: &str = "proxy-test-admin-token";
/// `TOLLGATE_AUTHORIZE_TOKEN` of the stack's tollgate, which the proxy sends.
pub const AUTHORIZE_TOKEN: &str = "proxy-test-authorize-token";
/// `TOLLGATE_IDENTITY_KEY` of the stack's tollgate.
pub const IDENTITY_KEY: &str = "proxy-test-identity-key-of-32-bytes!";

/// Test values of the variables an example's run command may set.
const EXAMPLE_VARIABLES: [(&str, &str); 5] = [
    ("TOLLGATE_IDENTITY_KEY", IDENTITY_KEY),
    ("TOLLGATE_CHECK_TOKEN", CHECK_TOKEN),
    ("TOLLGATE_ADMIN_TOKEN", ADMIN_TOKEN),
    ("TOLLGATE_METRICS_TOKEN", "proxy-test-metrics-token"),
    ("TOLLGATE_AUTHORIZE_TOKEN", AUTHORIZE_TOKEN),
];

/// The variables the run command in examples/`config`'s header comment
/// sets, with test values: the stack runs the example as a user following
/// it would, no more guarded than that.
pub fn example_env(config: &str) -> Vec<(&'static str, &'static str)> {
    let text = std::fs::read_to_string(example(config)).expect("read the example");
    let header: String = text
        .lines()
        .take_while(|line| line.starts_with('#'))
        .collect();
    EXAMPLE_VARIABLES
        .into_iter()
        .filter(|(name, _)| header.contains(&format!("{name}=")))
        .collect()
}

// ---------- the upstream: counts and records what reaches it ----------

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub method: String,
    pub uri: String,
    pub body: String,
}

/// The application behind the proxy. `/api/broken` answers 503, anything
/// else 200 with a fixed body.
pub struct Upstream {
    pub addr: SocketAddr,
    seen: Record,
}

/// Each request that reached the upstream, with the headers it came with.
type Record = Arc<Mutex<Vec<(Seen, axum::http::HeaderMap)>>>;

impl Upstream {
    pub async fn start() -> Self {
        let seen: Record = Arc::default();
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
        let record = self.seen.lock().expect("upstream record");
        record.iter().map(|(seen, _)| seen.clone()).collect()
    }

    /// The headers of each request that reached the upstream, in order.
    pub fn headers(&self) -> Vec<axum::http::HeaderMap> {
        let record = self.seen.lock().expect("upstream record");
        record.iter().map(|(_, headers)| headers.clone()).collect()
    }

    pub fn count(&self) -> usize {
        self.seen.lock().expect("upstream record").len()
    }
}

async fn record(State(seen): State<Record>, req: Request) -> (StatusCode, String) {
    let (parts, body) = req.into_parts();
    let body = to_bytes(body, 1 << 20).await.expect("upstream body");
    let seen_here = Seen {
        method: parts.method.to_string(),
        uri: parts.uri.to_string(),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    seen.lock()
        .expect("upstream record")
        .push((seen_here, parts.headers.clone()));
    if parts.uri.path() == "/api/broken" {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "upstream is broken\n".into(),
        )
    } else {
        (StatusCode::OK, "hello from upstream\n".into())
    }
}

// ---------- clients ----------

/// A client with its own loopback address, so each is a distinct client IP
/// to the proxy (127.0.0.1 is the proxy itself, the trusted one).
pub fn client_at(ip: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from(ip))
        .build()
        .expect("client")
}

/// What the proxy's client received.
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    pub async fn of(request: reqwest::RequestBuilder) -> Self {
        let response = request.send().await.expect("request through the proxy");
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

pub fn get(path: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: shop.example\r\n{extra}Connection: close\r\n\r\n")
}

/// `count` headers `X-Pad-<i>: v`, each on its own line.
pub fn padding(count: usize) -> String {
    (0..count).map(|i| format!("X-Pad-{i}: v\r\n")).collect()
}

/// The problem+json body's `detail`, or "" when the body is not one.
pub fn detail(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["detail"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The rejection's body, Retry-After and RateLimit fields, each agreeing
/// with the wait its detail states, which the attempts' `elapsed_ms` bounds.
pub fn assert_the_429_states_its_wait(rejected: &Answer, elapsed_ms: u64) {
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
        serde_json::json!({
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
}

pub fn head(path: &str, extra: &str) -> String {
    format!("HEAD {path} HTTP/1.1\r\nHost: shop.example\r\n{extra}Connection: close\r\n\r\n")
}

// ---------- attacks every proxy's example must stop ----------

/// `example`'s config with one policy more: GETs of `/reports/{id}`, 2 an
/// hour per client address. The examples limit no GET route by method, so
/// this is what shows a HEAD spends a GET limit.
pub fn with_reports_policy(example_name: &str, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(example(example_name)).expect("read the example");
    let config = dir.join("tollgate.yaml");
    std::fs::write(
        &config,
        format!(
            "{text}\n  - name: reports\n    algorithm: fixed_window\n    limit: 2\n    window: 1h\n    match: {{ methods: [GET], path: \"/reports/{{id}}\", case_insensitive: true, trailing_slash: ignore }}\n    identity: [client_ip]\n    on_store_failure: fail_closed\n"
        ),
    )
    .expect("write the config");
    config
}

/// Logins in the spellings a framework routes to the login: Rails'
/// format suffixes among them. One limit of 5 for all.
pub const LOGIN_SPELLINGS: [&str; 7] = [
    "/login.json",
    "/LOGIN.xml",
    "/Login/",
    "/login",
    "/login.JSON",
    "/%6Cogin.json",
    "//login.json",
];

/// The statuses the proxy at `to` answers [`LOGIN_SPELLINGS`] with, from `ip`.
pub async fn login_spellings(ip: [u8; 4], to: SocketAddr) -> Vec<(&'static str, u16)> {
    let mut statuses = Vec::new();
    for path in LOGIN_SPELLINGS {
        statuses.push((path, raw(ip, to, &post(path, "")).await.0));
    }
    statuses
}

/// What [`login_spellings`] must answer: the limit, then 429s.
pub fn five_logins_then_429() -> Vec<(&'static str, u16)> {
    LOGIN_SPELLINGS
        .iter()
        .enumerate()
        .map(|(i, path)| (*path, if i < 5 { 200 } else { 429 }))
        .collect()
}

/// HEAD, HEAD, GET, HEAD of a report through the proxy at `to`: the GET
/// limit of 2 counts the HEADs.
pub async fn heads_then_get(ip: [u8; 4], to: SocketAddr) -> Vec<u16> {
    let mut statuses = Vec::new();
    for request in [
        head("/reports/7", ""),
        head("/Reports/7/", ""),
        get("/reports/7", ""),
        head("/reports/7", ""),
    ] {
        statuses.push(raw(ip, to, &request).await.0);
    }
    statuses
}

/// `/v1/authorize` called directly at `tollgate` from a local process (a
/// trusted address: the proxy's own) describing a login from `victim`:
/// the status, with `token` in Tollgate-Authorization when given.
pub async fn describe_a_login(tollgate: SocketAddr, victim: &str, token: Option<&str>) -> u16 {
    let token = token.map_or(String::new(), |t| {
        format!("Tollgate-Authorization: Bearer {t}\r\n")
    });
    let request = format!(
        "GET /v1/authorize HTTP/1.1\r\nHost: shop.example\r\nX-Original-URI: /login\r\nX-Original-Method: POST\r\nX-Forwarded-Method: POST\r\nX-Forwarded-Uri: /login\r\nX-Forwarded-For: {victim}\r\nX-Real-IP: {victim}\r\n{token}Connection: close\r\n\r\n"
    );
    raw([127, 0, 0, 1], tollgate, &request).await.0
}

/// `request` with the authorize token the proxy sends: what a caller that
/// holds the token (the proxy, or one that stole it) sends tollgate.
pub fn with_authorize_token(request: impl AsRef<str>) -> String {
    request.as_ref().replacen(
        "\r\n",
        &format!("\r\nTollgate-Authorization: Bearer {AUTHORIZE_TOKEN}\r\n"),
        1,
    )
}

/// `example_name`'s config with exports' `cost.max` raised to 1000, past
/// its budget of 100: a cost of 500 is then never admitted (429 without
/// Retry-After) rather than refused as out of range.
pub fn costly_exports(example_name: &str, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(example(example_name)).expect("read the example");
    let bounded = "max: 100, default: 1 }";
    assert_eq!(
        text.matches(bounded).count(),
        1,
        "{example_name}: exports' cost"
    );
    let config = dir.join("costly-exports.yaml");
    std::fs::write(&config, text.replace(bounded, "max: 1000, default: 1 }"))
        .expect("write the config");
    config
}
