//! `POST /v1/release`: a permit an admitted concurrency check returned,
//! handed back when its work ends (`{"policy", "key", "permit"}`), freed
//! in the policy's store. The body's and the answer's schemas are the
//! contract's (`tollgate-http`); a refused body releases nothing.

use std::time::Duration;

use axum::http::{self, HeaderValue, header};
use axum::response::Response;
use hyper::body::Body as HttpBody;
use tollgate_http::{Problem, ReleaseAnswer, parse_release_body};

use super::body::{BodyError, BodyRefused, read_body};
use super::linger::LingerOnClose;
use super::{json_answer, refuse, unauthorized, unknown_policy};
use crate::app::App;
use crate::limiter::ReleaseError;
use crate::tokens::Guarded;

/// The endpoint's path.
pub(super) const RELEASE: &str = "/v1/release";
/// What a 405 on `/v1/release` lists.
pub(super) const RELEASE_ALLOW: &str = "POST";

/// `POST /v1/release`: `200 {"released": true}` when the permit was held,
/// `false` when it was unknown, already released or expired.
pub(super) async fn release_request<B>(app: &App, req: http::Request<B>) -> Response
where
    B: HttpBody,
    B::Error: Into<BodyError>,
{
    let live_config = app.live.load();
    // A release is the end of a check: the check token guards both.
    if !live_config
        .config
        .tokens
        .admits_headers(Guarded::Check, req.headers())
    {
        let mut response = unauthorized(app, Guarded::Check, "release");
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        response.extensions_mut().insert(LingerOnClose);
        return response;
    }
    let settings = &live_config.config.server;
    let (limit, max_key) = (settings.max_body_bytes, settings.max_key_bytes);
    let timeout = Duration::from_millis(settings.request_timeout_ms);
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
    let released = async {
        let parsed = parse_release_body(&body)?;
        let live = live_config
            .policy(&parsed.policy)
            .ok_or_else(|| unknown_policy(&parsed.policy))?;
        if !live.plan.policy().limits().holds_permits() {
            return Err(Problem::unprocessable(format!(
                "policy {} is not a concurrency policy: it holds no permits",
                tollgate_core::quote(&parsed.policy)
            )));
        }
        let identity = parsed.key.identity(max_key)?;
        let released = app
            .limiter
            .release(&live.plan, &identity, parsed.permit)
            .await
            .map_err(|e| match e {
                ReleaseError::NotConcurrency { .. } => Problem::unprocessable(e.to_string()),
                ReleaseError::Store(_) | ReleaseError::Remote(_) => {
                    Problem::unavailable("the permit was not released: the store is unavailable")
                }
            })?;
        json_answer(&ReleaseAnswer { released })
    };
    released.await.unwrap_or_else(|p| refuse(app, p))
}
