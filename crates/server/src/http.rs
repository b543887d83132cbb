//! The HTTP adapter: requests in, core decisions out, the response contract
//! of DESIGN.md §8 back. Handlers translate; they decide nothing themselves.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{self, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, get, post};
use bytes::{Buf, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Body as HttpBody;
use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};
use tollgate_core::{Decision, Identity};
use tollgate_store::{DecisionPath, GuardedCheck, GuardedDecisions, StoreError};

use crate::app::{App, LivePolicy, Runtime};
use crate::linger::LingerOnClose;
use crate::metrics::{DegradedLabels, EndpointLabels, ErrorLabels, StatusLabels};
use crate::request::{Forwarded, RequestFault, cost_of, identity_of};
use crate::response::{DEGRADED_HEADER, PROBLEM_HEADER, Problem, ratelimit_headers, rejection};
use crate::tokens::{self, Guarded};

pub fn router(app: Arc<App>) -> Router {
    let authorize_any = AUTHORIZE_METHODS
        .iter()
        .filter_map(|method| MethodFilter::try_from(method.clone()).ok())
        .fold(MethodRouter::new(), |router, filter| {
            router.on(filter, authorize)
        });
    Router::new()
        .route("/v1/check", post(check))
        .route(AUTHORIZE, authorize_any.clone())
        // Envoy's HTTP ext_authz calls `path_prefix` + the original path.
        .route("/v1/authorize/", authorize_any.clone())
        .route("/v1/authorize/{*original}", authorize_any)
        .route("/v1/policies", get(policies))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(app)
}

async fn not_found() -> Problem {
    Problem::not_found("no such endpoint")
}

async fn method_not_allowed() -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "Method Not Allowed",
        "this endpoint does not take that method",
    )
}

/// The 401 for a request to `endpoint` without `group`'s token, counted.
fn unauthorized(app: &App, group: Guarded, endpoint: &'static str) -> Response {
    app.metrics
        .unauthorized
        .get_or_create(&EndpointLabels { endpoint })
        .inc();
    tokens::unauthorized(group)
}

fn refuse(app: &App, problem: Problem) -> Response {
    app.metrics
        .bad_requests
        .get_or_create(&StatusLabels {
            status: problem.status.as_u16(),
        })
        .inc();
    problem.into_response()
}

// ---------- POST /v1/check ----------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckBody<'a> {
    #[serde(borrow, default)]
    policy: Option<Text<'a>>,
    #[serde(borrow, default)]
    key: Option<KeyJson<'a>>,
    #[serde(default)]
    cost: Option<u64>,
    #[serde(borrow, default)]
    checks: Option<Vec<CheckItem<'a>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckItem<'a> {
    #[serde(borrow)]
    policy: Text<'a>,
    #[serde(borrow)]
    key: KeyJson<'a>,
    #[serde(default = "one")]
    cost: u64,
}

fn one() -> u64 {
    1
}

/// A JSON string, borrowed from the body unless it has escapes. (serde's
/// own `Cow<str>` borrows only as a bare field, not inside an `Option`.)
struct Text<'a>(Cow<'a, str>);

impl std::ops::Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text<'de>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Text(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Text(Cow::Owned(v.to_owned())))
    }
}

/// `"acme"` or `{"tenant": "acme", "route": "/orders"}`.
enum KeyJson<'a> {
    Value(Text<'a>),
    Parts(Vec<(Text<'a>, Text<'a>)>),
}

impl<'de: 'a, 'a> Deserialize<'de> for KeyJson<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = KeyJson<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or an object of string parts")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                TextVisitor.visit_borrowed_str(v).map(KeyJson::Value)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                TextVisitor.visit_str(v).map(KeyJson::Value)
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut parts = Vec::new();
                while let Some(part) = map.next_entry::<Text<'de>, Text<'de>>()? {
                    parts.push(part);
                }
                Ok(KeyJson::Parts(parts))
            }
        }
        d.deserialize_any(KeyVisitor)
    }
}

impl KeyJson<'_> {
    fn identity(&self, max_key_bytes: usize) -> Result<Identity, Problem> {
        let identity = match self {
            KeyJson::Value(v) if v.is_empty() => {
                return Err(Problem::unprocessable("key must not be empty"));
            }
            KeyJson::Value(v) => Identity::value(v),
            KeyJson::Parts(parts) => Identity::composite(parts.iter().map(|(k, v)| (&**k, &**v)))
                .map_err(|e| Problem::unprocessable(format!("key: {e}")))?,
        };
        if identity.as_bytes().len() > max_key_bytes {
            return Err(Problem::too_large(format!(
                "key is longer than {max_key_bytes} bytes"
            )));
        }
        Ok(identity)
    }
}

/// Errors a request body may fail with.
type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// How much of an oversized body is read and thrown away before the 413, so
/// that the connection can serve the client's next request. Past this, the
/// 413 goes at once and the connection closes lingering (crate::linger), so
/// the client still reads the answer instead of a reset connection.
const DISCARD_AT_MOST: u64 = 1 << 20;

/// Why a body was not taken, and whether some of it is still unread.
struct BodyRefused {
    problem: Problem,
    /// The client may still be sending: answer, then close lingering.
    left_unread: bool,
}

impl From<Problem> for BodyRefused {
    fn from(problem: Problem) -> Self {
        Self {
            problem,
            left_unread: false,
        }
    }
}

/// The body, whole, within `limit` bytes and `timeout` (a slow client's
/// request cannot hold its connection open for longer).
async fn read_body<B>(
    req: http::Request<B>,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, BodyRefused>
where
    B: HttpBody,
    B::Error: Into<BodyError>,
{
    let too_large = |left_unread| BodyRefused {
        problem: Problem::too_large(format!("request body is larger than {limit} bytes")),
        left_unread,
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let discard_up_to = (limit as u64).saturating_add(DISCARD_AT_MOST);
    if declared.is_some_and(|len| len > discard_up_to) {
        return Err(too_large(true));
    }
    let collect = async {
        let mut body = std::pin::pin!(req.into_body());
        let mut first = Bytes::new();
        let mut rest: Option<BytesMut> = None;
        let mut seen: u64 = 0;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                tracing::debug!(error = %Into::<BodyError>::into(e), "a request body broke off");
                Problem::bad_request("the request body broke off before its end")
            })?;
            let Ok(mut data) = frame.into_data() else {
                continue;
            };
            let data = data.copy_to_bytes(data.remaining());
            seen += data.len() as u64;
            if seen > limit as u64 {
                if seen > discard_up_to {
                    return Err(too_large(true));
                }
                continue;
            }
            if first.is_empty() {
                first = data;
            } else {
                rest.get_or_insert_with(|| BytesMut::from(&first[..]))
                    .extend_from_slice(&data);
            }
        }
        if seen > limit as u64 {
            return Err(too_large(false));
        }
        Ok(rest.map_or(first, BytesMut::freeze))
    };
    // A body that came with its headers is whole at the first poll; the
    // timer (~440 instructions to arm, bench/instructions.sh) is armed only
    // for a body still on its way.
    let mut collect = std::pin::pin!(collect);
    let first = std::future::poll_fn(|cx| Poll::Ready(collect.as_mut().poll(cx))).await;
    if let Poll::Ready(body) = first {
        return body;
    }
    tokio::time::timeout(timeout, collect)
        .await
        .unwrap_or_else(|_| {
            Err(Problem::new(
                StatusCode::REQUEST_TIMEOUT,
                "Request Timeout",
                format!(
                    "the request body did not arrive within {} ms",
                    timeout.as_millis()
                ),
            )
            .into())
        })
}

/// A body the typed parse refused, named in tollgate's words (cold path).
fn json_fault(body: &[u8], typed: Option<serde_json::Error>) -> Problem {
    crate::check_fault::diagnose(body, typed.as_ref())
}

async fn check(State(app): State<Arc<App>>, req: Request) -> Response {
    check_request(&app, req).await
}

/// `POST /v1/check`, for the router and for the workers' direct path.
pub(crate) async fn check_request<B>(app: &App, req: http::Request<B>) -> Response
where
    B: HttpBody,
    B::Error: Into<BodyError>,
{
    let started = Instant::now();
    // One load a request: the config the body is read under decides it too.
    let runtime = app.runtime.load();
    if !runtime
        .config
        .tokens
        .admits_headers(Guarded::Check, req.headers())
    {
        // The body is left unread: close lingering, as after an oversized body.
        let mut response = unauthorized(app, Guarded::Check, "check");
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        response.extensions_mut().insert(LingerOnClose);
        return response;
    }
    let settings = &runtime.config.server;
    let (limit, max_key, max_checks, timeout) = (
        settings.max_body_bytes,
        settings.max_key_bytes,
        settings.max_checks,
        Duration::from_millis(settings.request_timeout_ms),
    );
    let body = match read_body(req, limit, timeout).await {
        Ok(b) => b,
        Err(BodyRefused {
            problem,
            left_unread,
        }) => {
            let mut response = refuse(app, problem);
            if left_unread {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                response.extensions_mut().insert(LingerOnClose);
            }
            return response;
        }
    };
    let parsed: CheckBody<'_> = match serde_json::from_slice(&body) {
        // serde also reads a struct from a list (`["p","k"]`): only an object is a check.
        Ok(b) if crate::check_fault::opens_an_object(&body) => b,
        other => return refuse(app, json_fault(&body, other.err())),
    };
    let response = match parsed {
        CheckBody {
            checks: Some(items),
            policy: None,
            key: None,
            cost: None,
        } => check_batch(app, &runtime, &items, max_key, max_checks).await,
        CheckBody {
            checks: None,
            policy: Some(policy),
            key: Some(key),
            cost,
        } => check_one(app, &runtime, &policy, &key, cost.unwrap_or(1), max_key).await,
        CheckBody {
            checks: Some(_), ..
        } => Err(Problem::unprocessable(
            "give either checks or policy/key/cost, not both",
        )),
        CheckBody { policy: None, .. } => Err(Problem::unprocessable("missing field `policy`")),
        CheckBody { key: None, .. } => Err(Problem::unprocessable("missing field `key`")),
    };
    match response {
        Ok(r) => {
            app.metrics
                .decision_seconds
                .observe(started.elapsed().as_secs_f64());
            r
        }
        Err(p) => refuse(app, p),
    }
}

fn unknown_policy(name: &str) -> Problem {
    Problem::not_found(format!("unknown policy {name:?}"))
}

async fn check_one(
    app: &App,
    runtime: &Runtime,
    name: &str,
    key: &KeyJson<'_>,
    cost: u64,
    max_key: usize,
) -> Result<Response, Problem> {
    let live = runtime.policy(name).ok_or_else(|| unknown_policy(name))?;
    let identity = key.identity(max_key)?;
    let decided = decide(app, &[live.guarded(&identity, cost)]).await;
    let decision = decided.decisions.first().ok_or_else(|| {
        Problem::unavailable("the limiter could not decide: the store answered nothing")
    })?;
    count(app, live, &identity, decision);
    let mut body = String::with_capacity(160);
    write_decision(&mut body, live.serve.policy.name(), decision, decided.path);
    Ok(json_response(body))
}

async fn check_batch(
    app: &App,
    runtime: &Runtime,
    items: &[CheckItem<'_>],
    max_key: usize,
    max_checks: usize,
) -> Result<Response, Problem> {
    if items.is_empty() {
        return Err(Problem::unprocessable("checks must not be empty"));
    }
    if items.len() > max_checks {
        return Err(Problem::too_large(format!(
            "more than {max_checks} checks in one request"
        )));
    }
    let mut lives = Vec::with_capacity(items.len());
    let mut identities = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let live = runtime.policy(&item.policy).ok_or_else(|| {
            Problem::not_found(format!("checks[{i}]: unknown policy {:?}", &*item.policy))
        })?;
        let identity = item.key.identity(max_key).map_err(|mut p| {
            p.detail = format!("checks[{i}]: {}", p.detail);
            p
        })?;
        lives.push(live);
        identities.push(identity);
    }
    let checks: Vec<GuardedCheck<'_>> = lives
        .iter()
        .zip(&identities)
        .zip(items)
        .map(|((live, identity), item)| live.guarded(identity, item.cost))
        .collect();
    let decided = decide(app, &checks).await;
    let allowed = decided.decisions.iter().all(|d| d.allowed);
    let mut body = String::with_capacity(48 + 160 * decided.decisions.len());
    let _ = write!(body, "{{\"allowed\":{allowed},");
    if decided.path.is_degraded() {
        let _ = write!(
            body,
            "\"degraded\":true,\"path\":\"{}\",",
            decided.path.name()
        );
    }
    body.push_str("\"decisions\":[");
    for (i, ((live, identity), decision)) in lives
        .iter()
        .zip(&identities)
        .zip(&decided.decisions)
        .enumerate()
    {
        count(app, live, identity, decision);
        if i > 0 {
            body.push(',');
        }
        write_decision(&mut body, live.serve.policy.name(), decision, decided.path);
    }
    body.push_str("]}");
    Ok(json_response(body))
}

/// How often a degraded decision may be logged (the rest are counted).
const DEGRADED_LOG_EVERY_MS: u64 = 10_000;

/// Asks the store, and records what the store did: its latency, its
/// errors, and decisions made without it.
async fn decide(app: &App, checks: &[GuardedCheck<'_>]) -> GuardedDecisions {
    let decided = app.store.decide_all(checks).await;
    if let Some(ms) = decided.store_ms {
        app.metrics.store_seconds.observe(ms as f64 / 1000.0);
    }
    if let Some(error) = &decided.error {
        app.metrics
            .store_errors
            .get_or_create(&ErrorLabels {
                kind: error_kind(error),
            })
            .inc();
    }
    if decided.path.is_degraded() {
        let allowed = decided.decisions.iter().all(|d| d.allowed);
        app.metrics
            .degraded
            .get_or_create(&DegradedLabels {
                path: decided.path.name(),
                outcome: if allowed { "allowed" } else { "rejected" },
            })
            .inc();
        if app.degraded_log.should_log() {
            tracing::warn!(
                path = decided.path.name(),
                error = decided.error.as_ref().map(ToString::to_string),
                "deciding without the shared store (logged at most every {} s)",
                DEGRADED_LOG_EVERY_MS / 1000
            );
        }
    }
    decided
}

fn error_kind(error: &StoreError) -> &'static str {
    match error {
        StoreError::Timeout { .. } => "timeout",
        StoreError::Unavailable(_) => "unavailable",
        StoreError::Protocol(_) => "protocol",
        StoreError::Config(_) => "config",
    }
}

fn count(app: &App, live: &LivePolicy, identity: &Identity, decision: &Decision) {
    if decision.allowed {
        live.counters.allowed.inc();
    } else {
        live.counters.rejected.inc();
        app.metrics
            .hot
            .record(live.serve.policy.name(), identity, app.clock.now_ms());
    }
}

/// The decision as JSON; `remaining` is shown as 0 when a stepped-back
/// clock made gcra's internal figure negative. Written by hand, not by
/// `write!`: the formatting machinery cost ~1,400 instructions a decision,
/// more than the decision itself (callgrind, docs/benchmarks.md).
fn write_decision(out: &mut String, policy: &str, d: &Decision, path: DecisionPath) {
    let mut number = itoa::Buffer::new();
    out.push_str(if d.allowed {
        "{\"allowed\":true,\"policy\":\""
    } else {
        "{\"allowed\":false,\"policy\":\""
    });
    out.push_str(policy);
    out.push_str("\",\"limit\":");
    out.push_str(number.format(d.limit));
    out.push_str(",\"remaining\":");
    out.push_str(number.format(d.remaining.max(0)));
    out.push_str(",\"retry_after_ms\":");
    match d.retry_after_ms {
        Some(ms) => out.push_str(number.format(ms)),
        None => out.push_str("null"),
    }
    out.push_str(",\"reset_after_ms\":");
    out.push_str(number.format(d.reset_after_ms));
    if path.is_degraded() {
        out.push_str(",\"degraded\":true,\"path\":\"");
        out.push_str(path.name());
        out.push('"');
    }
    out.push('}');
}

fn json_response(body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

// ---------- /v1/authorize (forward auth) ----------

const AUTHORIZE: &str = "/v1/authorize";

/// The methods `/v1/authorize` takes: whatever the original request used.
const AUTHORIZE_METHODS: [Method; 7] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
    Method::HEAD,
    Method::OPTIONS,
];

/// Whether the router would send this request to `authorize`.
pub(crate) fn is_authorize(method: &Method, path: &str) -> bool {
    path.strip_prefix(AUTHORIZE)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        && AUTHORIZE_METHODS.contains(method)
}

async fn authorize(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    authorize_request(&app, peer, req).await
}

/// `/v1/authorize`, for the router and for the workers' direct path.
pub(crate) async fn authorize_request<B>(
    app: &App,
    peer: SocketAddr,
    req: http::Request<B>,
) -> Response {
    let started = Instant::now();
    let runtime = app.runtime.load();
    let settings = &runtime.config.server;
    let (parts, _body) = req.into_parts();
    // Below `/v1/authorize/` is the original path (Envoy ext_authz).
    let own_path = match parts.uri.path().strip_prefix(AUTHORIZE) {
        Some(original) if original.starts_with('/') => original,
        _ => parts.uri.path(),
    };
    let request = match Forwarded::read(
        &parts.headers,
        parts.method.as_str(),
        own_path,
        peer,
        settings,
    ) {
        Ok(request) => request,
        Err(fault) => return client_fault(app, fault),
    };
    let mut matched: Vec<(&LivePolicy, Identity, u64)> = Vec::new();
    for live in &runtime.policies {
        let serve = &live.serve;
        if !serve
            .matcher
            .matches(request.method, &request.path, request.host)
        {
            continue;
        }
        let prepared = identity_of(
            serve,
            &request,
            runtime.config.hasher.as_ref(),
            settings.max_key_bytes,
        )
        .and_then(|identity| Ok((identity, cost_of(serve, &parts.headers)?)));
        match prepared {
            Ok((identity, cost)) => matched.push((live, identity, cost)),
            Err(fault) => return client_fault(app, fault),
        }
    }
    if matched.is_empty() {
        return StatusCode::OK.into_response();
    }
    let checks: Vec<GuardedCheck<'_>> = matched
        .iter()
        .map(|(live, identity, cost)| live.guarded(identity, *cost))
        .collect();
    let decided = decide(app, &checks).await;
    let decisions = decided.decisions.as_slice();
    app.metrics
        .decision_seconds
        .observe(started.elapsed().as_secs_f64());
    for ((live, identity, _), decision) in matched.iter().zip(decisions) {
        count(app, live, identity, decision);
    }
    let mut headers = HeaderMap::new();
    if decided.path.is_degraded() {
        headers.insert(
            HeaderName::from_static(DEGRADED_HEADER),
            HeaderValue::from_static(decided.path.name()),
        );
    }
    ratelimit_headers(
        &mut headers,
        matched
            .iter()
            .zip(decisions)
            .map(|((live, _, _), d)| (live.policy_item.as_str(), &live.serve.policy, d)),
    );
    if decisions.iter().all(|d| d.allowed) {
        return (StatusCode::OK, headers).into_response();
    }
    let violated = matched
        .iter()
        .zip(decisions)
        .filter(|(_, d)| !d.allowed)
        .map(|((live, _, _), d)| (&live.serve.policy, d));
    // The store's own error goes to the log and the metrics (`decide`),
    // never to the client.
    let cause = (decided.path == DecisionPath::FailClosed).then(|| {
        "the limiter could not decide: its shared store is unavailable, and a matching policy fails closed".to_owned()
    });
    let reject = rejection(
        violated,
        |policy| {
            matched
                .iter()
                .find(|(live, _, _)| live.serve.policy.name() == policy.name())
                .map_or(0, |(_, _, cost)| *cost)
        },
        cause,
    );
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(seconds) = reject.retry_after_seconds {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    if let Ok(v) = HeaderValue::from_str(&reject.body) {
        headers.insert(HeaderName::from_static(PROBLEM_HEADER), v);
    }
    let status =
        StatusCode::from_u16(settings.deny_status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
    (status, headers, reject.body).into_response()
}

/// A 400 for what the client sent (a missing or ambiguous identity part, a
/// bad cost, a path that climbs above the root, a request description from
/// an untrusted caller): never a status a proxy fails open on.
fn client_fault(app: &App, RequestFault(detail): RequestFault) -> Response {
    // auth_request drops the body; nginx relays the fault from this header.
    let problem = Problem::bad_request(detail);
    let copy = HeaderValue::from_bytes(problem.body().as_bytes());
    let mut response = refuse(app, problem);
    if let Ok(v) = copy {
        response
            .headers_mut()
            .insert(HeaderName::from_static(PROBLEM_HEADER), v);
    }
    response
}

// ---------- operations ----------

async fn policies(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let runtime = app.runtime.load();
    if !runtime
        .config
        .tokens
        .admits_headers(Guarded::Admin, &headers)
    {
        return unauthorized(&app, Guarded::Admin, "policies");
    }
    let list: Vec<serde_json::Value> = runtime
        .policies
        .iter()
        .map(|live| crate::explain::policy_json(&live.serve))
        .collect();
    let body = serde_json::json!({
        "config_hash": runtime.config.hash,
        "ratelimit_headers": crate::response::ratelimit_draft::VERSION,
        "store": crate::explain::store_json(&runtime.config.store),
        "policies": list,
    });
    json_response(body.to_string())
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready means "can answer every policy per its failure mode", which a
/// serving instance always can: with its store down, each policy fails open,
/// fails closed or decides locally, as configured. So a store outage never
/// fails readiness — an orchestrator pulling every instance at once would
/// override those failure modes and take the service down. The store's
/// state is a field here and the `tollgate_store_up` gauge.
async fn readyz(State(app): State<Arc<App>>) -> Response {
    let store = match app.store.ready().await {
        Ok(()) => "up",
        Err(e) => {
            tracing::debug!(error = %e, "readiness: the store did not answer its ping");
            "down"
        }
    };
    app.metrics.store_up.set(i64::from(store == "up"));
    json_response(format!("{{\"ready\":true,\"store\":\"{store}\"}}"))
}

async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if !app
        .runtime
        .load()
        .config
        .tokens
        .admits_headers(Guarded::Metrics, &headers)
    {
        return unauthorized(&app, Guarded::Metrics, "metrics");
    }
    app.store.maintain_gauges(&app.metrics);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.encode(),
    )
        .into_response()
}
