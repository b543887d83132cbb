//! Request ids at the HTTP doors: `"request_id"` in a `/v1/check` body,
//! `server.request_id_header` (off unless named) on `/v1/authorize`. The
//! limiter records them (crate::limiter::Limiter::decide_request); this
//! module reads them and words the refusals.

use crate::limiter::RequestId;
use axum::http::{HeaderMap, HeaderName};

use tollgate_http::Problem;
use tollgate_http::{RequestFault, single_header};

/// A body's `request_id`, checked; a bad one is a 400 naming the fault.
pub(crate) fn from_body(text: Option<&str>) -> Result<Option<RequestId>, Problem> {
    text.map(RequestId::new)
        .transpose()
        .map_err(|e| Problem::bad_request(format!("request_id: {e}")))
}

/// The request id header, sent once, checked.
pub(crate) fn from_header(
    headers: &HeaderMap,
    name: &HeaderName,
) -> Result<Option<RequestId>, RequestFault> {
    single_header(headers, name)?
        .map(RequestId::new)
        .transpose()
        .map_err(|e| RequestFault(format!("header {name}: {e}")))
}

/// A request id sent again with a different request (other policies,
/// identities, costs, or method and path): a 422, and nothing charged. The
/// id itself is not echoed (the client has it; logs need not).
pub(crate) fn mismatch() -> Problem {
    Problem::unprocessable(
        "this request id was first admitted for a different request (other policies, identities, costs, or method and path): a retry must repeat its request, and a new request needs a new id",
    )
}
