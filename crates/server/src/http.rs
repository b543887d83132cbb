//! The HTTP adapter: requests in, core decisions out, the response contract
//! of docs/design.md §8 back. Handlers translate; they decide nothing themselves.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{self, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::{Buf, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Body as HttpBody;
use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};
use tollgate_core::{Decision, Identity};
use tollgate_store::{DecidedBy, Replay, RequestId};
use tower::ServiceExt;

use crate::app::App;
use crate::limiter::Check;
use crate::linger::LingerOnClose;
use crate::live::{LiveConfig, LivePolicy};
use crate::metrics::{EndpointLabels, PolicyLabels, StatusLabels};
use crate::request::{Forwarded, RequestFault, cost_of, identity_of};
use crate::request_id::{self, REPLAYED_HEADER};
use crate::response::{DEGRADED_HEADER, PROBLEM_HEADER, Problem, ratelimit_headers, rejection};
use crate::tokens::{self, Guarded};

/// The one routing of every request: the decision endpoints straight to
/// their handlers on hyper (the hot paths), everything else through the
/// operations router.
pub(crate) async fn route(
    app: &Arc<App>,
    operations: Router,
    peer: SocketAddr,
    req: http::Request<hyper::body::Incoming>,
) -> Response {
    let path = req.uri().path();
    if path == CHECK {
        return if req.method() == Method::POST {
            check_request(app, req).await
        } else {
            method_not_allowed(CHECK_ALLOW)
        };
    }
    if is_authorize_path(path) {
        return if AUTHORIZE_METHODS.contains(req.method()) {
            authorize_request(app, peer, req).await
        } else {
            method_not_allowed(AUTHORIZE_ALLOW)
        };
    }
    // Boxed: the operations router's future is large, and the hot paths'
    // futures would otherwise carry (and move) its size.
    Box::pin(operations.oneshot(req.map(Body::new)))
        .await
        .unwrap_or_else(|never| match never {})
}

/// The operations endpoints: what is not a decision.
pub fn operations_router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/policies", get(policies))
        .route("/v1/state", get(peek_state).delete(reset_state))
        .route("/v1/hot", get(hot))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(|| async {
            Problem::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "Method Not Allowed",
                "this endpoint does not take that method",
            )
        })
        .with_state(app)
}

async fn not_found() -> Problem {
    Problem::not_found("no such endpoint")
}

/// A 405 with its `Allow` field, as the operations router answers one.
fn method_not_allowed(allow: &'static str) -> Response {
    let mut response = Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "Method Not Allowed",
        "this endpoint does not take that method",
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

/// The 401 for an admin `endpoint` asked without the admin token, if it was.
fn admin_refusal(
    app: &App,
    live_config: &LiveConfig,
    headers: &HeaderMap,
    endpoint: &'static str,
) -> Option<Response> {
    (!live_config
        .config
        .tokens
        .admits_headers(Guarded::Admin, headers))
    .then(|| unauthorized(app, Guarded::Admin, endpoint))
}

/// The 401 for a request to `endpoint` without `group`'s token, counted.
fn unauthorized(app: &App, group: Guarded, endpoint: &'static str) -> Response {
    app.metrics
        .unauthorized
        .get_or_create(&EndpointLabels { endpoint })
        .inc();
    let mut response = Problem::new(
        StatusCode::UNAUTHORIZED,
        "Unauthorized",
        tokens::needs_token(group),
    )
    .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"tollgate\""),
    );
    response
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

const CHECK: &str = "/v1/check";
/// What a 405 on `/v1/check` lists.
const CHECK_ALLOW: &str = "POST";

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
    /// The client's id for this unit of work: a retry under it inside its
    /// policy's `retry_window` is answered again, not charged again.
    #[serde(borrow, default)]
    request_id: Option<Text<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckItem<'a> {
    #[serde(borrow)]
    policy: Text<'a>,
    #[serde(borrow)]
    key: KeyJson<'a>,
    #[serde(default = "default_cost")]
    cost: u64,
}

/// A check's cost when the body leaves it out.
fn default_cost() -> u64 {
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
    crate::deadline::within(timeout, collect)
        .await
        .unwrap_or_else(|| {
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

/// `POST /v1/check`: the body's checks, decided by the limiter.
pub(crate) async fn check_request<B>(app: &App, req: http::Request<B>) -> Response
where
    B: HttpBody,
    B::Error: Into<BodyError>,
{
    // One load a request: the config the body is read under decides it too.
    let live_config = app.live.load();
    if !live_config
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
    let settings = &live_config.config.server;
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
    let id = match request_id::from_body(parsed.request_id.as_deref()) {
        Ok(id) => id,
        Err(problem) => return refuse(app, problem),
    };
    let id = id.as_ref();
    let response = match parsed {
        CheckBody {
            checks: Some(items),
            policy: None,
            key: None,
            cost: None,
            ..
        } => check_batch(app, &live_config, &items, id, max_key, max_checks).await,
        CheckBody {
            checks: None,
            policy: Some(policy),
            key: Some(key),
            cost,
            ..
        } => {
            let cost = cost.unwrap_or(1);
            check_one(app, &live_config, &policy, &key, cost, id, max_key).await
        }
        CheckBody {
            checks: Some(_), ..
        } => Err(Problem::unprocessable(
            "give either checks or policy/key/cost, not both",
        )),
        CheckBody { policy: None, .. } => Err(Problem::unprocessable("missing field `policy`")),
        CheckBody { key: None, .. } => Err(Problem::unprocessable("missing field `key`")),
    };
    response.unwrap_or_else(|p| refuse(app, p))
}

fn unknown_policy(name: &str) -> Problem {
    Problem::not_found(format!("unknown policy {name:?}"))
}

async fn check_one(
    app: &App,
    live_config: &LiveConfig,
    name: &str,
    key: &KeyJson<'_>,
    cost: u64,
    id: Option<&RequestId>,
    max_key: usize,
) -> Result<Response, Problem> {
    let live = live_config
        .policy(name)
        .ok_or_else(|| unknown_policy(name))?;
    let identity = key.identity(max_key)?;
    let checks = [Check::new(&live.plan, &identity, cost)];
    let decided = match id {
        None => app.limiter.decide(&checks).await,
        Some(id) => app.limiter.decide_request(&checks, Some(id)).await,
    };
    let replayed = replayed(&decided.replay, &checks)?;
    let decision = decided.decisions.first().ok_or_else(|| {
        Problem::unavailable("the limiter could not decide: the store answered nothing")
    })?;
    let mut body = String::with_capacity(160);
    write_decision(&mut body, live.serve.policy.name(), decision, decided.by);
    if replayed {
        mark_replayed(&mut body);
    }
    Ok(json_response(body))
}

/// Whether the request id replayed the decisions; a 422 when it was
/// recorded with other costs.
fn replayed(replay: &Replay, checks: &[Check<'_>]) -> Result<bool, Problem> {
    match replay {
        Replay::Fresh => Ok(false),
        Replay::Replayed => Ok(true),
        Replay::CostMismatch { recorded } => Err(request_id::cost_mismatch(
            recorded,
            checks.iter().map(|c| c.cost),
        )),
    }
}

/// `"replayed":true` before a JSON object's closing brace.
fn mark_replayed(body: &mut String) {
    if body.ends_with('}') {
        body.pop();
        body.push_str(",\"replayed\":true}");
    }
}

async fn check_batch(
    app: &App,
    live_config: &LiveConfig,
    items: &[CheckItem<'_>],
    id: Option<&RequestId>,
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
        let live = live_config.policy(&item.policy).ok_or_else(|| {
            Problem::not_found(format!("checks[{i}]: unknown policy {:?}", &*item.policy))
        })?;
        let identity = item.key.identity(max_key).map_err(|mut p| {
            p.detail = format!("checks[{i}]: {}", p.detail);
            p
        })?;
        lives.push(live);
        identities.push(identity);
    }
    let checks: Vec<Check<'_>> = lives
        .iter()
        .zip(&identities)
        .zip(items)
        .map(|((live, identity), item)| Check::new(&live.plan, identity, item.cost))
        .collect();
    let decided = app.limiter.decide_request(&checks, id).await;
    let replayed = replayed(&decided.replay, &checks)?;
    let allowed = decided.decisions.iter().all(|d| d.allowed);
    let mut body = String::with_capacity(48 + 160 * decided.decisions.len());
    let _ = write!(body, "{{\"allowed\":{allowed},");
    if replayed {
        body.push_str("\"replayed\":true,");
    }
    if decided.by.is_degraded() {
        let _ = write!(
            body,
            "\"degraded\":true,\"path\":\"{}\",",
            decided.by.name()
        );
    }
    body.push_str("\"decisions\":[");
    for (i, (live, decision)) in lives.iter().zip(&decided.decisions).enumerate() {
        if i > 0 {
            body.push(',');
        }
        write_decision(&mut body, live.serve.policy.name(), decision, decided.by);
        if replayed {
            mark_replayed(&mut body);
        }
    }
    body.push_str("]}");
    Ok(json_response(body))
}

/// The decision as JSON; `remaining` is shown as 0 when a stepped-back
/// clock made gcra's internal figure negative. Written by hand, not by
/// `write!`: the formatting machinery cost more than the decision itself
/// (docs/benchmarks.md).
fn write_decision(out: &mut String, policy: &str, d: &Decision, by: DecidedBy) {
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
    if by.is_degraded() {
        out.push_str(",\"degraded\":true,\"path\":\"");
        out.push_str(by.name());
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

/// What a 405 on `/v1/authorize` lists, in the operations router's order.
const AUTHORIZE_ALLOW: &str = "GET,HEAD,POST,PUT,DELETE,PATCH,OPTIONS";

/// `/v1/authorize`, or below it the original path (Envoy's ext_authz
/// calls `path_prefix` + the original path).
fn is_authorize_path(path: &str) -> bool {
    path.strip_prefix(AUTHORIZE)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// `/v1/authorize`: the forwarded request's checks, decided by the limiter.
pub(crate) async fn authorize_request<B>(
    app: &App,
    peer: SocketAddr,
    req: http::Request<B>,
) -> Response {
    let live_config = app.live.load();
    let settings = &live_config.config.server;
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
    let id = match settings
        .request_id_header
        .as_ref()
        .map(|name| request_id::from_header(&parts.headers, name))
        .transpose()
    {
        Ok(id) => id.flatten(),
        Err(fault) => return client_fault(app, fault),
    };
    let mut matched: Vec<(&LivePolicy, Identity, u64)> = Vec::new();
    for live in &live_config.policies {
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
            live_config.config.hasher.as_ref(),
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
    let checks: Vec<Check<'_>> = matched
        .iter()
        .map(|(live, identity, cost)| Check::new(&live.plan, identity, *cost))
        .collect();
    let decided = app.limiter.decide_request(&checks, id.as_ref()).await;
    let replayed = match replayed(&decided.replay, &checks) {
        Ok(replayed) => replayed,
        Err(problem) => return client_problem(app, problem),
    };
    let decisions = decided.decisions.as_slice();
    let mut headers = HeaderMap::new();
    if replayed {
        headers.insert(
            HeaderName::from_static(REPLAYED_HEADER),
            HeaderValue::from_static("true"),
        );
    }
    if decided.by.is_degraded() {
        headers.insert(
            HeaderName::from_static(DEGRADED_HEADER),
            HeaderValue::from_static(decided.by.name()),
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
    let cause = (decided.by == DecidedBy::FailClosed).then(|| {
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
    client_problem(app, Problem::bad_request(detail))
}

/// The client's fault on `/v1/authorize` (a 400, or a 422 for a request id
/// retried with other costs), its problem copied into a header.
fn client_problem(app: &App, problem: Problem) -> Response {
    // auth_request drops the body; nginx relays the fault from this header.
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

/// The policy and identity `?policy=P&key=K` (or `key.NAME=VALUE` parts,
/// as forward auth's composite identities) names, for `/v1/state`.
fn state_target<'c>(
    live_config: &'c LiveConfig,
    query: Option<&str>,
) -> Result<(&'c LivePolicy, Identity), Problem> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or(""))
        .map_err(|_| Problem::bad_request("the query string is not valid form encoding"))?;
    let mut policy = None;
    let mut value = None;
    let mut parts: Vec<(&str, &str)> = Vec::new();
    for (name, v) in &pairs {
        match name.as_str() {
            "policy" if policy.is_none() => policy = Some(v.as_str()),
            "key" if value.is_none() => value = Some(v.as_str()),
            "policy" | "key" => {
                return Err(Problem::unprocessable(format!("{name} is given twice")));
            }
            other => match other.strip_prefix("key.") {
                Some(part) if !part.is_empty() => parts.push((part, v.as_str())),
                _ => {
                    return Err(Problem::unprocessable(format!(
                        "unknown parameter {other:?} (expected: policy, key or key.NAME)"
                    )));
                }
            },
        }
    }
    let name = policy.ok_or_else(|| Problem::unprocessable("missing parameter policy"))?;
    let live = live_config
        .policy(name)
        .ok_or_else(|| unknown_policy(name))?;
    let identity = match (value, parts.is_empty()) {
        (Some(""), _) => return Err(Problem::unprocessable("key must not be empty")),
        (Some(v), true) => Identity::value(v),
        (None, false) => Identity::composite(parts.iter().copied())
            .map_err(|e| Problem::unprocessable(format!("key: {e}")))?,
        (Some(_), false) => {
            return Err(Problem::unprocessable(
                "give key or key.NAME parts, not both",
            ));
        }
        (None, true) => return Err(Problem::unprocessable("missing parameter key")),
    };
    let max = live_config.config.server.max_key_bytes;
    if identity.as_bytes().len() > max {
        return Err(Problem::too_large(format!(
            "key is longer than {max} bytes"
        )));
    }
    Ok((live, identity))
}

/// The admin token's check, then [`state_target`]: what both `/v1/state`
/// methods do first.
fn admitted_state_target<'c>(
    app: &App,
    live_config: &'c LiveConfig,
    headers: &HeaderMap,
    query: Option<String>,
) -> Result<(&'c LivePolicy, Identity), Box<Response>> {
    if let Some(refusal) = admin_refusal(app, live_config, headers, "state") {
        return Err(Box::new(refusal));
    }
    state_target(live_config, query.as_deref()).map_err(|problem| Box::new(refuse(app, problem)))
}

/// `GET /v1/state?policy=P&key=K`: what a peek says — the decision a cost
/// of 0 gets, which spends nothing (Limitador's `/counters`, one identity
/// at a time, never a listing of every key).
async fn peek_state(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let live_config = app.live.load();
    let (live, identity) = match admitted_state_target(&app, &live_config, &headers, query) {
        Ok(target) => target,
        Err(refusal) => return *refusal,
    };
    let peek = Check::new(&live.plan, &identity, 0).uncounted();
    let decided = app.limiter.decide(&[peek]).await;
    match decided.decisions.first() {
        Some(decision) => {
            let mut body = String::with_capacity(160);
            write_decision(&mut body, live.serve.policy.name(), decision, decided.by);
            json_response(body)
        }
        None => Problem::unavailable("the limiter could not decide: the store answered nothing")
            .into_response(),
    }
}

/// `DELETE /v1/state?policy=P&key=K`: an operator resets one identity —
/// its state is forgotten, so it starts afresh as a new identity does.
/// Logged and counted (`tollgate_state_resets_total`).
async fn reset_state(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let live_config = app.live.load();
    let (live, identity) = match admitted_state_target(&app, &live_config, &headers, query) {
        Ok(target) => target,
        Err(refusal) => return *refusal,
    };
    let policy = live.serve.policy.name();
    match app.limiter.forget_plan(&live.plan, &identity).await {
        Ok(existed) => {
            app.metrics
                .state_resets
                .get_or_create(&PolicyLabels {
                    policy: policy.to_owned(),
                })
                .inc();
            tracing::info!(policy, %identity, existed, "an operator reset an identity (DELETE /v1/state)");
            json_response(format!(
                "{{\"policy\":\"{policy}\",\"reset\":true,\"had_state\":{existed}}}"
            ))
        }
        Err(e) => {
            tracing::warn!(policy, %identity, error = %e, "an identity could not be reset: the store did not answer");
            Problem::unavailable("the identity could not be reset: its store did not answer")
                .into_response()
        }
    }
}

async fn policies(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let live_config = app.live.load();
    if let Some(refusal) = admin_refusal(&app, &live_config, &headers, "policies") {
        return refusal;
    }
    let list: Vec<serde_json::Value> = live_config
        .policies
        .iter()
        .map(|live| crate::explain::policy_json(&live.serve, &live_config.config.stores))
        .collect();
    let body = serde_json::json!({
        "config_hash": live_config.config.hash,
        "ratelimit_headers": crate::ratelimit_fields::ratelimit_draft::VERSION,
        "store": crate::explain::store_json(&live_config.config.stores.list[0].1),
        "stores": crate::explain::stores_json(&live_config.config.stores),
        "policies": list,
        "envoy_rules": crate::explain::envoy_rules_json(&live_config.config.envoy),
    });
    json_response(body.to_string())
}

/// The identities behind each policy's most decisions and rejections in
/// the last whole window (admin token): who is hot, even under its limit.
/// Secret identity parts show only as their keyed hash, as everywhere.
async fn hot(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let live_config = app.live.load();
    if let Some(refusal) = admin_refusal(&app, &live_config, &headers, "hot") {
        return refusal;
    }
    let now_ms = app.limiter.clock().now_ms();
    let window_ms = tollgate_limiter::HOT_WINDOW_MS;
    let started_ms = now_ms - now_ms % window_ms;
    // Rates over the window's length, or what of the current one passed
    // (at least a second, so a fresh window does not inflate them).
    let list = |entries: &[(String, u64)], what: &str, over_ms: u64| -> Vec<serde_json::Value> {
        let seconds = over_ms.max(1_000) as f64 / 1000.0;
        entries
            .iter()
            .map(|(identity, n)| {
                serde_json::json!({
                    "identity": identity,
                    what: n,
                    "per_second": (*n as f64 / seconds * 1000.0).round() / 1000.0,
                })
            })
            .collect()
    };
    let elapsed_ms = now_ms - started_ms;
    let policies: Vec<serde_json::Value> = app
        .metrics
        .limiter
        .hot
        .report(now_ms)
        .iter()
        .map(|(policy, report)| {
            serde_json::json!({
                "policy": policy,
                "by_decisions": list(&report.decisions, "decisions", window_ms),
                "by_rejections": list(&report.rejections, "rejections", window_ms),
                "now": {
                    "by_decisions": list(&report.current_decisions, "decisions", elapsed_ms),
                    "by_rejections": list(&report.current_rejections, "rejections", elapsed_ms),
                },
            })
        })
        .collect();
    let body = serde_json::json!({
        "window_ms": window_ms,
        "window_start_ms": started_ms.saturating_sub(window_ms),
        "now_start_ms": started_ms,
        "top": tollgate_limiter::HOT_IDENTITIES,
        "policies": policies,
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
    let store = match app.limiter.store_answers().await {
        Ok(()) => "up",
        Err(e) => {
            tracing::debug!(error = %e, "readiness: the store did not answer its ping");
            "down"
        }
    };
    json_response(format!("{{\"ready\":true,\"store\":\"{store}\"}}"))
}

async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if !app
        .live
        .load()
        .config
        .tokens
        .admits_headers(Guarded::Metrics, &headers)
    {
        return unauthorized(&app, Guarded::Metrics, "metrics");
    }
    app.limiter.maintain_gauges();
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.encode(),
    )
        .into_response()
}
