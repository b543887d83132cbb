//! The HTTP adapter: requests in, limiter decisions out, the response
//! contract of docs/design.md §8 back. This file routes; each endpoint's
//! handler lives in its own file and translates, deciding nothing itself.

use std::sync::Arc;
use tollgate_http::Peer;

use crate::limiter::DecidedBy;
use crate::limiter::Replay;
use axum::Router;
use axum::body::Body;
use axum::http::{self, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use axum::routing::get;
use tower::ServiceExt;

use crate::app::App;
use crate::metrics::{EndpointLabels, HttpLabels, RouteLabels, StatusLabels};
use crate::otlp::request_span;
use crate::tokens::{self, Guarded};
use authorize::{AUTHORIZE_ALLOW, AUTHORIZE_METHODS, authorize_request, is_authorize_path};
use check::{CHECK, CHECK_ALLOW, check_request};
use release::{RELEASE, RELEASE_ALLOW, release_request};
use tollgate_http::Problem;

// One file an endpoint…
mod authorize;
mod check;
mod operations;
mod release;
mod ui;
// …and what they share: reading a body and request ids. Problems, fields,
// keys, the `/v1/check` schemas and the forwarded request (its peer, match,
// identity and cost) are the contract every HTTP door shares (`tollgate-http`).
mod body;
pub(crate) mod linger;
#[cfg(test)]
mod quoted_input;
pub(crate) mod request_id;

/// Every route, as `tollgate_http_requests_total{endpoint}` names it.
const ENDPOINTS: [&str; 13] = [
    CHECK,
    RELEASE,
    "/v1/authorize",
    "/v1/policies",
    "/v1/state",
    "/v1/hot",
    "/healthz",
    "/readyz",
    "/metrics",
    "/ui",
    "/ui/ui.js",
    "/ui/ui.css",
    crate::ui::STATE_PATH,
];

/// The route template `path` takes, or `unmatched`: a bounded label,
/// never the raw path (`/v1/authorize/…` is `/v1/authorize`).
fn endpoint_of(path: &str) -> &'static str {
    if is_authorize_path(path) {
        return "/v1/authorize";
    }
    ENDPOINTS
        .into_iter()
        .find(|e| *e == path)
        .unwrap_or("unmatched")
}

/// The one routing of every request ([`dispatch`]), counted and timed by
/// endpoint and status.
pub(crate) async fn route(
    app: &Arc<App>,
    operations: Router,
    peer: Peer,
    req: http::Request<hyper::body::Incoming>,
) -> Response {
    let endpoint = endpoint_of(req.uri().path());
    let started_us = app.limiter.clock().monotonic_us();
    let response = dispatch(app, operations, peer, req).await;
    let took_us = app
        .limiter
        .clock()
        .monotonic_us()
        .saturating_sub(started_us);
    let metrics = &app.metrics;
    metrics
        .http_requests
        .get_or_create(&HttpLabels {
            endpoint,
            status: response.status().as_u16(),
        })
        .inc();
    metrics
        .http_seconds
        .get_or_create(&RouteLabels { endpoint })
        .observe_us(took_us);
    response
}

/// The decision endpoints straight to their handlers on hyper (the hot
/// paths), everything else through the operations router.
async fn dispatch(
    app: &Arc<App>,
    operations: Router,
    peer: Peer,
    req: http::Request<hyper::body::Incoming>,
) -> Response {
    let path = req.uri().path();
    if path == CHECK {
        return if req.method() == Method::POST {
            let span = request_span("check", req.headers());
            tollgate_limiter::within_span!(span, check_request(app, req))
        } else {
            method_not_allowed(CHECK_ALLOW)
        };
    }
    if path == RELEASE {
        return if req.method() == Method::POST {
            release_request(app, req).await
        } else {
            method_not_allowed(RELEASE_ALLOW)
        };
    }
    if is_authorize_path(path) {
        return if AUTHORIZE_METHODS.contains(req.method()) {
            let span = request_span("authorize", req.headers());
            tollgate_limiter::within_span!(span, authorize_request(app, peer, req))
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
pub(crate) fn operations_router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/policies", get(operations::policies))
        .route(
            "/v1/state",
            get(operations::peek_state).delete(operations::reset_state),
        )
        .route("/v1/hot", get(operations::hot))
        .route("/healthz", get(operations::healthz))
        .route("/readyz", get(operations::readyz))
        .route("/metrics", get(operations::metrics))
        .route(crate::ui::STATE_PATH, get(ui::ui_state))
        .route("/ui", get(ui::page))
        .route("/ui/ui.js", get(ui::page))
        .route("/ui/ui.css", get(ui::page))
        .fallback(not_found)
        .method_not_allowed_fallback(|| async {
            Problem::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "Method Not Allowed",
                "this endpoint does not take that method",
            )
            .into_response()
        })
        .with_state(app)
}

async fn not_found() -> Response {
    Problem::not_found("no such endpoint").into_response()
}

/// A [`Problem`] as axum's response (the contract's own, its body made
/// axum's).
pub(crate) trait ProblemResponse {
    /// The response, the refusal logged at debug when it is the client's fault.
    fn into_response(self) -> Response;
}

impl ProblemResponse for Problem {
    fn into_response(self) -> Response {
        // Every refused request, with why, for an operator at debug: the
        // client was told the same, so nothing here is news to it.
        if self.status.is_client_error() {
            tracing::debug!(
                target: "tollgate::request",
                status = self.status.as_u16(),
                title = self.title,
                reason = %tollgate_core::without_controls(&self.detail),
                "request refused"
            );
        }
        self.response().map(Body::from)
    }
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

/// The client's fault answered, and counted by its status.
fn refuse(app: &App, problem: Problem) -> Response {
    app.metrics
        .bad_requests
        .get_or_create(&StatusLabels {
            status: problem.status.as_u16(),
        })
        .inc();
    problem.into_response()
}

/// The 404 for a policy no loaded config has.
fn unknown_policy(name: &str) -> Problem {
    Problem::not_found(format!("unknown policy {}", tollgate_core::quote(name)))
}

/// Whether the request id replayed the decisions; a 422 when it was
/// recorded for a different request.
fn replayed(replay: &Replay) -> Result<bool, Problem> {
    match replay {
        Replay::Fresh => Ok(false),
        Replay::Replayed => Ok(true),
        Replay::Mismatch => Err(tollgate_http::request_id_mismatch()),
    }
}

/// The path that made a degraded decision, for the answer to name; `None`
/// when the shared store made it.
fn degraded_path(by: DecidedBy) -> Option<&'static str> {
    by.is_degraded().then(|| by.name())
}

/// A 200 with `answer`, one of the contract's schemas, as its JSON body.
fn json_answer(answer: &impl serde::Serialize) -> Result<Response, Problem> {
    // The schemas hold strings and numbers only, which always serialize.
    serde_json::to_string(answer)
        .map(json_response)
        .map_err(|_| Problem::unavailable("the decision could not be written"))
}

/// A 200 with a JSON body.
fn json_response(body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
