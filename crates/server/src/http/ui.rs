//! The live page's door (`server.ui`): its files, and `/ui/state` behind
//! the admin token as every admin endpoint is. Off, every path of it is
//! the 404 of a path that does not exist.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Uri, header};
use axum::response::Response;

use super::operations::admin_refusal;
use super::{json_response, not_found};
use crate::app::App;
use crate::ui::{CONTENT_SECURITY_POLICY, asset, state};

/// The page and its script and style, when `server.ui` is on. They carry
/// nothing of this server's: what the page shows comes from `/ui/state`.
pub(super) async fn page(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let found = asset(uri.path()).filter(|_| app.live.load().config.server.ui);
    let Some(asset) = found else {
        return not_found().await;
    };
    let mut response = Response::new(axum::body::Body::from(asset.body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `GET /ui/state` (admin token): what the page shows, as JSON.
pub(super) async fn ui_state(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let live_config = app.live.load();
    if !live_config.config.server.ui {
        return not_found().await;
    }
    if let Some(refusal) = admin_refusal(&app, &live_config, &headers, "ui") {
        return refusal;
    }
    let mut response = json_response(state(&app, &live_config).to_string());
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
