//! `POST /v1/release`: a permit an admitted concurrency check returned,
//! handed back when its work ends (`{"policy", "key", "permit"}`), freed
//! in the policy's store. The body's and the answer's schemas are the
//! contract's (`tollgate-http`); a refused body releases nothing.

use axum::http;
use axum::response::Response;
use hyper::body::Body as HttpBody;
use tollgate_http::{Problem, ReleaseAnswer, parse_release_body};

use super::body::{BodyError, guarded_body};
use super::{json_answer, refuse, unknown_policy};
use crate::app::App;
use crate::limiter::ReleaseError;

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
    let body = match guarded_body(app, &live_config, req, "release").await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let max_key = live_config.config.server.max_key_bytes;
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
