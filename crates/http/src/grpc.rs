//! The contract as a gRPC client reads it. A gRPC client takes any answer's
//! body for gRPC frames: a 429 with a problem+json body reaches it as a
//! protocol error (`INTERNAL`, "invalid compression flag"), which says
//! nothing of a limit and which its retry policy cannot tell from a bug.
//! So an answer of tollgate's own to a gRPC call (by its `content-type`,
//! `application/grpc` and its `+proto`/`+json` forms) goes as a gRPC
//! "trailers-only" response: HTTP 200, `content-type: application/grpc`,
//! `grpc-status` and `grpc-message` (the problem's `detail`), no body;
//! every other field stays (the RateLimit fields, `Retry-After`,
//! `Tollgate-Problem`), readable as the call's metadata.
//!
//! The status: a rejection (429) is `RESOURCE_EXHAUSTED`, gRPC's code for
//! a spent quota, which gRPC's retry policies do not retry on their own
//! (the client waits `Retry-After`); a request the limiter cannot read
//! (400, 413, 422) is `INVALID_ARGUMENT`; a limiter that could not decide
//! (503) is `UNAVAILABLE`, which a client may retry at once. Any other
//! status is gRPC's own reading of it (its HTTP-to-gRPC mapping).

use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

/// `grpc-status`: the call's status code.
pub const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// `grpc-message`: its message, percent-encoded.
pub const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// Whether a request with these headers is a gRPC call: `application/grpc`,
/// or a form of it (`+proto`, `+json`, `;` parameters) or of gRPC-Web
/// (`-web`, `-web-text`), which reads a trailers-only answer alike.
pub fn is_grpc(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE).map(HeaderValue::as_bytes) else {
        return false;
    };
    let (kind, rest) = value.split_at(value.len().min(16));
    kind.eq_ignore_ascii_case(b"application/grpc")
        && matches!(rest.first(), None | Some(b'+' | b'-' | b';' | b' '))
}

/// The gRPC status code for an answer of HTTP `status`.
pub fn grpc_code(status: StatusCode) -> u8 {
    match status.as_u16() {
        // OK
        200..=299 => 0,
        // INVALID_ARGUMENT: the request could not be read.
        400 | 413 | 422 => 3,
        // UNAUTHENTICATED, PERMISSION_DENIED, UNIMPLEMENTED
        401 => 16,
        403 => 7,
        404 => 12,
        // RESOURCE_EXHAUSTED: a quota is spent.
        429 => 8,
        // UNAVAILABLE: the limiter (or what is behind it) could not answer.
        502..=504 => 14,
        // UNKNOWN, as gRPC reads any other HTTP status.
        _ => 2,
    }
}

/// `response` (an answer of tollgate's own: a rejection or a problem) as
/// a trailers-only gRPC response; see the module notes.
pub fn grpc_answer(response: Response<String>) -> Response<String> {
    let (mut parts, body) = response.into_parts();
    let code = grpc_code(parts.status);
    let message = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|problem| problem.get("detail")?.as_str().map(percent_encoded))
        .unwrap_or_else(|| percent_encoded(parts.status.canonical_reason().unwrap_or("")));
    parts.status = StatusCode::OK;
    let headers = &mut parts.headers;
    headers.remove(CONTENT_LENGTH);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS, HeaderValue::from(u16::from(code)));
    if let Ok(message) = HeaderValue::from_str(&message) {
        headers.insert(GRPC_MESSAGE, message);
    }
    Response::from_parts(parts, String::new())
}

/// `text` as `grpc-message` carries it: printable ASCII but `%` as it is,
/// every other byte of its UTF-8 as `%XX`.
fn percent_encoded(text: &str) -> String {
    use std::fmt::Write;
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            encoded.push(char::from(byte));
        } else {
            let _ = write!(encoded, "%{byte:02X}");
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Problem;

    fn headers(content_type: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let value = HeaderValue::from_str(content_type).expect("a valid value");
        headers.insert(CONTENT_TYPE, value);
        headers
    }

    #[test]
    fn a_grpc_call_is_known_by_its_content_type_alone() {
        for grpc in [
            "application/grpc",
            "application/grpc+proto",
            "application/grpc+json",
            "application/grpc; charset=utf-8",
            "application/grpc-web",
            "application/grpc-web-text+proto",
            "Application/GRPC",
        ] {
            assert!(is_grpc(&headers(grpc)), "{grpc}");
        }
        for other in [
            "application/json",
            "application/grp",
            "application/grpcx",
            "text/plain",
            "",
        ] {
            assert!(!is_grpc(&headers(other)), "{other}");
        }
        assert!(!is_grpc(&HeaderMap::new()));
    }

    #[test]
    fn a_rejection_is_resource_exhausted_with_its_fields_and_no_body() {
        let mut response = Response::new(
            "{\"detail\":\"rate limit exceeded for policy a; retry after 10 ms\",\"status\":429}"
                .to_owned(),
        );
        *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        headers.insert("retry-after", HeaderValue::from_static("1"));
        headers.insert("ratelimit", HeaderValue::from_static("\"a\";r=0;t=1"));
        let answered = grpc_answer(response);
        assert_eq!(answered.status(), StatusCode::OK);
        assert_eq!(answered.body(), "");
        let field = |name: &str| answered.headers().get(name).cloned();
        assert_eq!(
            field("content-type"),
            Some(HeaderValue::from_static("application/grpc"))
        );
        assert_eq!(field("grpc-status"), Some(HeaderValue::from_static("8")));
        assert_eq!(
            field("grpc-message"),
            Some(HeaderValue::from_static(
                "rate limit exceeded for policy a; retry after 10 ms"
            ))
        );
        assert_eq!(field("retry-after"), Some(HeaderValue::from_static("1")));
        assert_eq!(
            field("ratelimit"),
            Some(HeaderValue::from_static("\"a\";r=0;t=1"))
        );
    }

    #[test]
    fn a_problem_keeps_its_reading_and_its_detail_is_percent_encoded() {
        let cases = [
            (Problem::bad_request("cost: \"x\" is not a number"), "3"),
            (Problem::unavailable("the limiter could not decide"), "14"),
            (Problem::unprocessable("id reused"), "3"),
            (Problem::not_found("no such policy"), "12"),
        ];
        for (problem, code) in cases {
            let detail = problem.detail.clone();
            let answered = grpc_answer(problem.response());
            assert_eq!(answered.headers()["grpc-status"], code, "{detail}");
            assert_eq!(answered.headers()["grpc-message"], detail.as_str());
        }
        let answered = grpc_answer(Problem::bad_request("100% über\n").response());
        assert_eq!(answered.headers()["grpc-message"], "100%25 %C3%BCber%0A");
        assert_eq!(grpc_code(StatusCode::IM_A_TEAPOT), 2);
    }
}
