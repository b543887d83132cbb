//! Request ids at the HTTP doors: `"request_id"` in a `/v1/check` body,
//! `server.request_id_header` (off unless named) on `/v1/authorize`. The
//! limiter records them (crate::limiter::Limiter::decide_request); this
//! module reads a body's, tollgate-http a header's and words the refusal
//! of one sent with another request (`request_id_mismatch`).

use crate::limiter::RequestId;

use tollgate_http::Problem;

/// A body's `request_id`, checked; a bad one is a 400 naming the fault.
pub(crate) fn from_body(text: Option<&str>) -> Result<Option<RequestId>, Problem> {
    text.map(RequestId::new)
        .transpose()
        .map_err(|e| Problem::bad_request(format!("request_id: {e}")))
}
