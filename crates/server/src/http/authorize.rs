//! `/v1/authorize`, forward auth for nginx `auth_request`, Traefik
//! ForwardAuth and Envoy ext_authz: the forwarded request's matching
//! policies, decided by the limiter, answered by status and header fields.

use axum::body::Body;
use axum::http::{self, HeaderName, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use tollgate_core::Identity;
use tollgate_http::{
    Answer, Forwarded, Matched, PROBLEM_HEADER, Peer, Problem, RequestFault, policy_check,
    problem_header, request_id_from_header,
};

use super::{ProblemResponse, refuse, unauthorized};
use crate::app::App;
use crate::config::ServerSettings;
use crate::limiter::{Check, Decided};
use crate::live::LivePolicy;
use crate::tokens::Guarded;

/// The endpoint's path.
const AUTHORIZE: &str = "/v1/authorize";

/// The methods `/v1/authorize` takes: whatever the original request used.
pub(super) const AUTHORIZE_METHODS: [Method; 7] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
    Method::HEAD,
    Method::OPTIONS,
];

/// What a 405 on `/v1/authorize` lists, in the operations router's order.
pub(super) const AUTHORIZE_ALLOW: &str = "GET,HEAD,POST,PUT,DELETE,PATCH,OPTIONS";

/// `/v1/authorize`, or below it the original path (Envoy's ext_authz
/// calls `path_prefix` + the original path).
pub(super) fn is_authorize_path(path: &str) -> bool {
    path.strip_prefix(AUTHORIZE)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// `/v1/authorize`: the forwarded request's checks, decided by the limiter.
pub(super) async fn authorize_request<B>(app: &App, peer: Peer, req: http::Request<B>) -> Response {
    let live_config = app.live.load();
    if live_config.config.server.forward_auth.is_off() {
        return Problem::not_found("forward auth is off here (server.forward_auth: off)")
            .into_response();
    }
    // The proxy's own token (never the client's Authorization): without
    // it, any process that reaches the listener could describe a login
    // from any address and lock that address out.
    if !live_config
        .config
        .tokens
        .admits_headers(Guarded::Authorize, req.headers())
    {
        return unauthorized(app, Guarded::Authorize, "authorize");
    }
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
        &settings.forward_auth,
        &settings.trusted_proxies,
    ) {
        Ok(request) => request,
        Err(fault) => return client_fault(app, fault),
    };
    let mut matched: Vec<(&LivePolicy, Identity, u64)> = Vec::new();
    for live in &live_config.policies {
        // Forward auth never hears that a request ended, so it takes no
        // permits: a concurrency policy is refused here with `match`
        // (config load), and one without is for /v1/check + /v1/release.
        if live.serve.declared.limits().holds_permits() {
            continue;
        }
        let hasher = live_config.config.hasher.as_ref();
        match policy_check(&live.serve, &request, hasher, settings.max_key_bytes) {
            Ok(Some((identity, cost))) => matched.push((live, identity, cost)),
            Ok(None) => {}
            Err(fault) => return client_fault(app, fault),
        }
    }
    if matched.is_empty() {
        return StatusCode::OK.into_response();
    }
    // The id in server.request_id_header is the client's own choice: it
    // replays admissions only when every matched policy asks for it
    // (`client_request_ids`), so naming the header never makes a login's
    // retries free; otherwise it is a header like any other.
    let honoured = matched
        .iter()
        .all(|(live, ..)| live.serve.client_request_ids);
    let id = match settings
        .request_id_header
        .as_ref()
        .filter(|_| honoured)
        .map(|name| request_id_from_header(&parts.headers, name))
        .transpose()
    {
        Ok(id) => id.flatten(),
        Err(fault) => return client_fault(app, fault),
    };
    let checks: Vec<Check<'_>> = matched
        .iter()
        .map(|(live, identity, cost)| Check::new(&live.plan, identity, *cost))
        .collect();
    // The id is bound to the request's method and normalized path too, so
    // it never admits another route's request from its record.
    let shape = id
        .as_ref()
        .map(|_| format!("{} {}", request.method, request.path));
    let decided = app
        .limiter
        .decide_request(&checks, id.as_ref(), shape.as_deref())
        .await;
    answer(settings, &matched, &decided).unwrap_or_else(|problem| client_problem(app, problem))
}

/// The answer to a decided forward auth request: 200 when every matching
/// policy admits, else the deny status with the rejection's problem; a
/// request id sent with another request is the client's fault.
fn answer(
    settings: &ServerSettings,
    matched: &[(&LivePolicy, Identity, u64)],
    decided: &Decided,
) -> Result<Response, Problem> {
    let answered = matched.iter().map(|(live, _, cost)| Matched {
        policy_item: &live.policy_item,
        policy_value: None,
        policy: &live.serve.policy,
        shadow: live.plan.shadow(),
        cost: *cost,
    });
    let deny = StatusCode::from_u16(settings.deny_status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
    Ok(match tollgate_http::answer(answered, decided, deny)? {
        Answer::Admit(admission) => {
            let mut response = StatusCode::OK.into_response();
            admission.write_headers(response.headers_mut());
            response
        }
        Answer::Deny(response) => response.map(Body::from),
    })
}

/// A 400 for what the client sent (a missing or ambiguous identity part, a
/// bad cost, a path that climbs above the root, a request description from
/// an untrusted caller): never a status a proxy fails open on.
fn client_fault(app: &App, RequestFault(detail): RequestFault) -> Response {
    client_problem(app, Problem::bad_request(detail))
}

/// The client's fault on `/v1/authorize` (a 400, or a 422 for a request id
/// sent with a different request), its problem copied into a header.
fn client_problem(app: &App, problem: Problem) -> Response {
    // auth_request drops the body; nginx relays the fault from this header.
    let copy = problem_header(&problem.body());
    let mut response = refuse(app, problem);
    if let Some(v) = copy {
        response
            .headers_mut()
            .insert(HeaderName::from_static(PROBLEM_HEADER), v);
    }
    response
}
