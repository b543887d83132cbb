//! What every edge test shares: the tokens, the policies, the calls made
//! over HTTP and the readers of their answers, `tollgate validate`.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::tollgate_bin;

pub const CHECK_TOKEN: &str = "check-token-0123456789abcdef";
pub const ADMIN_TOKEN: &str = "admin-token-0123456789abcdef";
pub const METRICS_TOKEN: &str = "metrics-token-0123456789abcdef";
pub const AUTHORIZE_TOKEN: &str = "authorize-token-0123456789abcdef";
pub const WRONG_TOKEN: &str = "wrong-token-fedcba9876543210";

pub const POLICIES: &str = "policies:
  - name: api
    algorithm: token_bucket
    capacity: 10
    refill: { tokens: 10, per: 1s }
  - name: per-client
    algorithm: token_bucket
    capacity: 10
    refill: { tokens: 10, per: 1s }
    identity: [bearer]
";

/// The decision for the first unit taken from a fresh `api` bucket.
pub fn first_decision() -> Value {
    json!({"allowed": true, "policy": "api", "limit": 10, "remaining": 9, "retry_after_ms": 0, "reset_after_ms": 100})
}

pub fn all_tokens(name: &str) -> Option<String> {
    match name {
        "TOLLGATE_CHECK_TOKEN" => Some(CHECK_TOKEN.to_owned()),
        "TOLLGATE_ADMIN_TOKEN" => Some(ADMIN_TOKEN.to_owned()),
        "TOLLGATE_METRICS_TOKEN" => Some(METRICS_TOKEN.to_owned()),
        "TOLLGATE_IDENTITY_KEY" => Some("k".repeat(32)),
        _ => None,
    }
}

pub fn only_identity_key(name: &str) -> Option<String> {
    (name == "TOLLGATE_IDENTITY_KEY").then(|| "k".repeat(32))
}

/// The 401 body for an endpoint guarded by `var`.
pub fn unauthorized_body(var: &str) -> Value {
    json!({
        "type": "about:blank",
        "title": "Unauthorized",
        "status": 401,
        "detail": format!("this endpoint needs `Authorization: Bearer <token>` ({var})"),
    })
}

/// An answer as (status, `WWW-Authenticate`, body text).
pub async fn answer(request: reqwest::RequestBuilder) -> (u16, Option<String>, String) {
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().expect("ascii").to_owned());
    (status, challenge, response.text().await.expect("body"))
}

pub fn with_token(
    request: reqwest::RequestBuilder,
    token: Option<&str>,
) -> reqwest::RequestBuilder {
    match token {
        Some(t) => request.bearer_auth(t),
        None => request,
    }
}

pub fn check_call(
    client: &reqwest::Client,
    base: &str,
    token: Option<&str>,
) -> reqwest::RequestBuilder {
    with_token(
        client
            .post(format!("{base}/v1/check"))
            .header("content-type", "application/json")
            .body(r#"{"policy":"api","key":"acme"}"#),
        token,
    )
}

/// Asserts that `request` is refused with the 401 of `var`.
pub async fn assert_unauthorized(request: reqwest::RequestBuilder, var: &str) {
    let (status, challenge, body) = answer(request).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(challenge.as_deref(), Some("Bearer realm=\"tollgate\""));
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("json"),
        unauthorized_body(var)
    );
}

pub fn body_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| panic!("not JSON: {text:?}"))
}

/// Runs `tollgate validate --config` with only `env` among tollgate's
/// variables; returns (exit code, stdout, stderr).
pub fn validate(config: &Path, env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(tollgate_bin());
    cmd.args(["validate", "--config"]).arg(config);
    for var in [
        "TOLLGATE_CHECK_TOKEN",
        "TOLLGATE_ADMIN_TOKEN",
        "TOLLGATE_METRICS_TOKEN",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("TOLLGATE_IDENTITY_KEY", "k".repeat(32));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run tollgate validate");
    (
        out.status.code().expect("exit code"),
        String::from_utf8(out.stdout).expect("utf-8"),
        String::from_utf8(out.stderr).expect("utf-8"),
    )
}
