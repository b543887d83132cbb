//! The HTTP response is part of the limiter (docs/design.md §8): the RateLimit
//! fields on every answer, and on a rejection the 429 problem+json with
//! `violated-policies`, `Retry-After` rounded up and `Cache-Control: no-store`.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode, header};
use tollgate_core::{Decision, Policy};

#[cfg(feature = "request")]
use crate::ratelimit_fields::state_field;
use crate::ratelimit_fields::{ratelimit_draft, ratelimit_fields, retry_after_seconds};

/// RFC 9457 problem type for a rejection, from the draft.
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";
/// The problem+json of a rejection as one header, for proxies (nginx
/// `auth_request`) that cannot pass the subrequest's body to the client.
pub const PROBLEM_HEADER: &str = "tollgate-problem";
/// The most bytes a [`PROBLEM_HEADER`] value carries. nginx reads an
/// `auth_request` answer's header fields into one buffer (4 KB by
/// default) and answers 502 past it, which fails open: the detail is cut
/// to keep the field well inside it, whatever the problem says.
pub const PROBLEM_HEADER_MAX_BYTES: usize = 1024;
/// Set when a decision was not made by the shared store; its value is the
/// path that made it (fail_open, fail_closed, local).
pub const DEGRADED_HEADER: &str = "tollgate-degraded";
/// Set to `true` on an admission answered from a request id's record
/// (nothing was consumed).
pub const REPLAYED_HEADER: &str = "tollgate-replayed";
/// A problem's media type (RFC 9457).
const PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");
/// A decision is about this moment: no cache may answer the next request with it.
const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");

// The field names as constants: built at compile time, not validated again
// on every response.
const POLICY_FIELD: HeaderName = HeaderName::from_static(ratelimit_draft::POLICY_FIELD);
const STATE_FIELD: HeaderName = HeaderName::from_static(ratelimit_draft::STATE_FIELD);

/// The RateLimit-Policy and RateLimit fields for a set of decided policies.
pub fn ratelimit_headers<'a>(
    headers: &mut HeaderMap,
    decided: impl Iterator<Item = (&'a str, &'a Policy, &'a Decision)>,
) {
    if let Some(values) = ratelimit_values(decided) {
        write_ratelimit_values(headers, values);
    }
}

/// The RateLimit-Policy and RateLimit values for a set of decided
/// policies, for a caller that writes them later (an admission, onto the
/// answer the service gives).
pub(crate) fn ratelimit_values<'a>(
    decided: impl Iterator<Item = (&'a str, &'a Policy, &'a Decision)>,
) -> Option<(HeaderValue, HeaderValue)> {
    let fields = ratelimit_fields(decided)?;
    // The strings' buffers become the values (validated, not copied).
    HeaderValue::from_maybe_shared(Bytes::from(fields.policy))
        .ok()
        .zip(HeaderValue::from_maybe_shared(Bytes::from(fields.state)).ok())
}

/// The `RateLimit` value of one policy's decision, in one allocation of
/// its length (the header value keeps that buffer).
#[cfg(feature = "request")]
pub(crate) fn state_value(policy: &Policy, decision: &Decision) -> Option<HeaderValue> {
    HeaderValue::from_maybe_shared(Bytes::from(state_field(policy, decision))).ok()
}

/// The RateLimit fields' values into `headers`.
pub(crate) fn write_ratelimit_values(
    headers: &mut HeaderMap,
    (policy, state): (HeaderValue, HeaderValue),
) {
    headers.insert(POLICY_FIELD, policy);
    headers.insert(STATE_FIELD, state);
}

/// `Tollgate-Replayed: true`: the answer came from a request id's record.
pub fn replayed_header(headers: &mut HeaderMap) {
    headers.insert(
        HeaderName::from_static(REPLAYED_HEADER),
        HeaderValue::from_static("true"),
    );
}

/// `Tollgate-Degraded: PATH`: the shared store did not make the decision,
/// `path` did (fail_open, fail_closed, local).
pub fn degraded_header(headers: &mut HeaderMap, path: &'static str) {
    headers.insert(
        HeaderName::from_static(DEGRADED_HEADER),
        HeaderValue::from_static(path),
    );
}

/// `body` (a problem+json document) as the [`PROBLEM_HEADER`] value: as
/// it is when short, else with its `detail` cut to fit (and, should that
/// not do, only its `type`, `title` and `status`). At most
/// [`PROBLEM_HEADER_MAX_BYTES`].
pub fn problem_header(body: &str) -> Option<HeaderValue> {
    if body.len() <= PROBLEM_HEADER_MAX_BYTES {
        return HeaderValue::from_str(body).ok();
    }
    let mut problem: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(body).ok()?;
    if let Some(serde_json::Value::String(detail)) = problem.get_mut("detail") {
        let over = body.len() - PROBLEM_HEADER_MAX_BYTES;
        let mut keep = detail.len().saturating_sub(over + 16);
        while !detail.is_char_boundary(keep) {
            keep -= 1;
        }
        detail.truncate(keep);
        detail.push_str("... (cut)");
    }
    let mut text = serde_json::Value::Object(problem.clone()).to_string();
    if text.len() > PROBLEM_HEADER_MAX_BYTES {
        problem.retain(|field, _| matches!(field.as_str(), "type" | "title" | "status"));
        text = serde_json::Value::Object(problem).to_string();
    }
    HeaderValue::from_str(&text).ok()
}

/// A problem+json response (RFC 9457).
pub struct Problem {
    /// The HTTP status, repeated in the body.
    pub status: StatusCode,
    /// The problem type (`type`): `about:blank`, the status says it all.
    pub kind: &'static str,
    /// The status's reason phrase.
    pub title: &'static str,
    /// What was wrong and where, in tollgate's words.
    pub detail: String,
}

impl Problem {
    /// A problem of `status`, titled `title`, naming `detail`.
    pub fn new(status: StatusCode, title: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            kind: "about:blank",
            title,
            detail: detail.into(),
        }
    }

    /// A 400.
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "Bad Request", detail)
    }
    /// A 404.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "Not Found", detail)
    }
    /// A 413.
    pub fn too_large(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "Content Too Large", detail)
    }
    /// A 422.
    pub fn unprocessable(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Unprocessable Content",
            detail,
        )
    }
    /// A 503.
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Service Unavailable",
            detail,
        )
    }

    /// The problem+json body.
    pub fn body(&self) -> String {
        serde_json::json!({
            "type": self.kind,
            "title": self.title,
            "status": self.status.as_u16(),
            "detail": self.detail,
        })
        .to_string()
    }

    /// The problem as a response: its status, problem+json and
    /// `Cache-Control: no-store` (a refusal is about this request only).
    pub fn response(&self) -> Response<String> {
        let mut response = Response::new(self.body());
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, PROBLEM_JSON);
        headers.insert(header::CACHE_CONTROL, NO_STORE);
        response
    }
}

/// The body of a quota rejection, and its `Retry-After` (absent when some
/// violated policy can never admit this cost).
pub struct Rejection {
    /// The problem+json body.
    pub body: String,
    /// The `Retry-After` field's seconds, if any.
    pub retry_after_seconds: Option<u64>,
}

impl Rejection {
    /// The rejection's own fields into `headers`: problem+json,
    /// `Cache-Control: no-store` and `Retry-After` when there is one.
    pub fn write_headers(&self, headers: &mut HeaderMap) {
        headers.insert(header::CONTENT_TYPE, PROBLEM_JSON);
        headers.insert(header::CACHE_CONTROL, NO_STORE);
        if let Some(seconds) = self.retry_after_seconds {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
    }

    /// The whole rejection: `status` (429, or a door's deny status),
    /// `headers` (the RateLimit fields and marks the caller wrote) with the
    /// rejection's own ([`Rejection::write_headers`]), and the problem body.
    pub fn response(self, status: StatusCode, mut headers: HeaderMap) -> Response<String> {
        self.write_headers(&mut headers);
        let mut response = Response::new(self.body);
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        response
    }
}

/// Builds the rejection for the policies that did not admit.
pub fn rejection<'a>(
    violated: impl Iterator<Item = (&'a Policy, &'a Decision)> + Clone,
    cost_of: impl Fn(&Policy) -> u64,
    cause: Option<String>,
) -> Rejection {
    let names: Vec<&str> = violated.clone().map(|(p, _)| p.name()).collect();
    let never: Vec<(&Policy, &Decision)> = violated
        .clone()
        .filter(|(_, d)| d.retry_after_ms.is_none())
        .collect();
    let retry_ms = violated.filter_map(|(_, d)| d.retry_after_ms).max();
    let (detail, retry_after_seconds) = if let Some(cause) = cause {
        (cause, Some(retry_after_seconds(retry_ms.unwrap_or(0))))
    } else if let Some((policy, decision)) = never.first() {
        (
            format!(
                "the request's cost {} exceeds the limit {} of policy {} and can never be admitted",
                cost_of(policy),
                decision.limit,
                policy.name()
            ),
            None,
        )
    } else {
        let retry_ms = retry_ms.unwrap_or(0);
        let seconds = retry_after_seconds(retry_ms);
        (
            format!(
                "rate limit exceeded for {}; retry after {retry_ms} ms",
                names
                    .iter()
                    .map(|n| format!("policy {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some(seconds),
        )
    };
    let body = serde_json::json!({
        "type": QUOTA_EXCEEDED,
        "title": "Too Many Requests",
        "status": 429,
        "detail": detail,
        "violated-policies": names,
    })
    .to_string();
    Rejection {
        body,
        retry_after_seconds,
    }
}
