//! A client's request id (`Idempotency-Key`) read from a header, and the
//! refusal of one sent again with another request: the same words at
//! every door that honours ids.

use http::{HeaderMap, HeaderName};
use tollgate_limiter::RequestId;

use crate::request::{RequestFault, single_header};
use crate::response::Problem;

/// The request id in header `name`, sent once, checked: `None` when
/// absent; a blank, repeated or malformed one is the client's fault.
pub fn request_id_from_header(
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
pub fn request_id_mismatch() -> Problem {
    Problem::unprocessable(
        "this request id was first admitted for a different request (other policies, identities, costs, or method and path): a retry must repeat its request, and a new request needs a new id",
    )
}
