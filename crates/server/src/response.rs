//! The HTTP response is part of the limiter (DESIGN.md §8): the RateLimit
//! fields on every answer, and on a rejection the 429 problem+json with
//! `violated-policies`, `Retry-After` rounded up and `Cache-Control: no-store`.

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tollgate_core::{Decision, Policy};

/// The one place the RateLimit fields' draft is pinned. Moving to the RFC
/// (or a later draft) is a change here and in docs/http-api.md.
pub mod ratelimit_draft {
    /// draft-ietf-httpapi-ratelimit-headers-11 (23 May 2026), still a draft.
    pub const VERSION: &str = "draft-ietf-httpapi-ratelimit-headers-11";
    pub const POLICY_FIELD: &str = "ratelimit-policy";
    pub const STATE_FIELD: &str = "ratelimit";
}

/// RFC 9457 problem type for a rejection, from the draft.
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";
/// The problem+json of a rejection as one header, for proxies (nginx
/// `auth_request`) that cannot pass the subrequest's body to the client.
pub const PROBLEM_HEADER: &str = "tollgate-problem";
/// Set when a decision was not made by the shared store; its value is the
/// path that made it (fail_open, fail_closed, local).
pub const DEGRADED_HEADER: &str = "tollgate-degraded";

/// Whole seconds rounded up, for `Retry-After` (never 0, never early).
pub fn retry_after_seconds(ms: u64) -> u64 {
    ms.div_ceil(1000).max(1)
}

/// `"name";q=20;w=4`: the policy's quota and the window it is stated over.
pub fn policy_item(policy: &Policy) -> String {
    // Policy names are validated to [A-Za-z0-9._-], so the sf-string needs no escapes.
    format!(
        "\"{}\";q={};w={}",
        policy.name(),
        policy.limits().limit(),
        policy.limits().window_ms().div_ceil(1000).max(1)
    )
}

/// `"name";r=1;t=4`: what is left and when it is fully restored.
pub fn state_item(out: &mut String, policy: &Policy, decision: &Decision) {
    let mut number = itoa::Buffer::new();
    out.push('"');
    out.push_str(policy.name());
    out.push_str("\";r=");
    out.push_str(number.format(decision.remaining.max(0)));
    out.push_str(";t=");
    out.push_str(number.format(decision.reset_after_ms.div_ceil(1000)));
}

/// The RateLimit-Policy and RateLimit fields for a set of decided policies.
pub fn ratelimit_headers<'a>(
    headers: &mut HeaderMap,
    decided: impl Iterator<Item = (&'a str, &'a Policy, &'a Decision)>,
) {
    let mut policy_field = String::with_capacity(64);
    let mut state_field = String::with_capacity(64);
    for (policy_item_text, policy, decision) in decided {
        if !policy_field.is_empty() {
            policy_field.push_str(", ");
            state_field.push_str(", ");
        }
        policy_field.push_str(policy_item_text);
        state_item(&mut state_field, policy, decision);
    }
    if policy_field.is_empty() {
        return;
    }
    if let (Ok(p), Ok(s)) = (
        HeaderValue::from_str(&policy_field),
        HeaderValue::from_str(&state_field),
    ) {
        headers.insert(HeaderName::from_static(ratelimit_draft::POLICY_FIELD), p);
        headers.insert(HeaderName::from_static(ratelimit_draft::STATE_FIELD), s);
    }
}

/// A problem+json response (RFC 9457).
pub struct Problem {
    pub status: StatusCode,
    pub kind: &'static str,
    pub title: &'static str,
    pub detail: String,
}

impl Problem {
    pub fn new(status: StatusCode, title: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            kind: "about:blank",
            title,
            detail: detail.into(),
        }
    }

    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "Bad Request", detail)
    }
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "Not Found", detail)
    }
    pub fn too_large(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "Content Too Large", detail)
    }
    pub fn unprocessable(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Unprocessable Content",
            detail,
        )
    }
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Service Unavailable",
            detail,
        )
    }

    pub fn body(&self) -> String {
        serde_json::json!({
            "type": self.kind,
            "title": self.title,
            "status": self.status.as_u16(),
            "detail": self.detail,
        })
        .to_string()
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = self.body();
        (
            self.status,
            [
                (header::CONTENT_TYPE, "application/problem+json"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            body,
        )
            .into_response()
    }
}

/// The body of a quota rejection, and its `Retry-After` (absent when some
/// violated policy can never admit this cost).
pub struct Rejection {
    pub body: String,
    pub retry_after_seconds: Option<u64>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_and_is_never_zero() {
        assert_eq!(retry_after_seconds(0), 1);
        assert_eq!(retry_after_seconds(1), 1);
        assert_eq!(retry_after_seconds(400), 1);
        assert_eq!(retry_after_seconds(1000), 1);
        assert_eq!(retry_after_seconds(1001), 2);
    }
}
