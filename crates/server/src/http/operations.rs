//! The operations endpoints, what is not a decision: the loaded policies,
//! one identity's state (peek, reset), the hot identities, health,
//! readiness and metrics. Each but health and readiness asks for its token.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use tollgate_core::Identity;

use super::{
    ProblemResponse, degraded_path, json_answer, json_response, refuse, unauthorized,
    unknown_policy,
};
use crate::app::App;
use crate::limiter::Check;
use crate::live::{LiveConfig, LivePolicy};
use crate::metrics::PolicyLabels;
use crate::tokens::Guarded;
use tollgate_config::Readiness;
use tollgate_http::Problem;
use tollgate_http::{CheckDecision, parts_identity, value_identity};

/// The 401 for an admin `endpoint` asked without the admin token, if it was.
pub(super) fn admin_refusal(
    app: &App,
    live_config: &LiveConfig,
    headers: &HeaderMap,
    endpoint: &'static str,
) -> Option<Response> {
    (!live_config
        .config
        .tokens
        .admits_headers(Guarded::Admin, headers))
    .then(|| unauthorized(app, Guarded::Admin, endpoint))
}

/// The policy and identity `?policy=P&key=K` (or `key.NAME=VALUE` parts,
/// as forward auth's composite identities) names, for `/v1/state`.
pub(super) fn state_target<'c>(
    live_config: &'c LiveConfig,
    query: Option<&str>,
) -> Result<(&'c LivePolicy, Identity), Problem> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or(""))
        .map_err(|_| Problem::bad_request("the query string is not valid form encoding"))?;
    let mut policy = None;
    let mut value = None;
    let mut parts: Vec<(&str, &str)> = Vec::new();
    for (name, v) in &pairs {
        match name.as_str() {
            "policy" if policy.is_none() => policy = Some(v.as_str()),
            "key" if value.is_none() => value = Some(v.as_str()),
            "policy" | "key" => {
                return Err(Problem::unprocessable(format!("{name} is given twice")));
            }
            other => match other.strip_prefix("key.") {
                Some(part) if !part.is_empty() => parts.push((part, v.as_str())),
                _ => {
                    return Err(Problem::unprocessable(format!(
                        "unknown parameter {} (expected: policy, key or key.NAME)",
                        tollgate_core::quote(other)
                    )));
                }
            },
        }
    }
    let name = policy.ok_or_else(|| Problem::unprocessable("missing parameter policy"))?;
    let live = live_config
        .policy(name)
        .ok_or_else(|| unknown_policy(name))?;
    let max = live_config.config.server.max_key_bytes;
    let identity = match (value, parts.is_empty()) {
        (Some(""), _) => value_identity("", max)?,
        (Some(v), true) => value_identity(v, max)?,
        (None, false) => parts_identity(parts.iter().copied(), max)?,
        (Some(_), false) => {
            return Err(Problem::unprocessable(
                "give key or key.NAME parts, not both",
            ));
        }
        (None, true) => return Err(Problem::unprocessable("missing parameter key")),
    };
    Ok((live, identity))
}

/// The admin token's check, then [`state_target`]: what both `/v1/state`
/// methods do first.
fn admitted_state_target<'c>(
    app: &App,
    live_config: &'c LiveConfig,
    headers: &HeaderMap,
    query: Option<String>,
) -> Result<(&'c LivePolicy, Identity), Box<Response>> {
    if let Some(refusal) = admin_refusal(app, live_config, headers, "state") {
        return Err(Box::new(refusal));
    }
    state_target(live_config, query.as_deref()).map_err(|problem| Box::new(refuse(app, problem)))
}

/// `GET /v1/state?policy=P&key=K`: what a peek says — the decision a cost
/// of 0 gets, which spends nothing (Limitador's `/counters`, one identity
/// at a time, never a listing of every key).
pub(super) async fn peek_state(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let live_config = app.live.load();
    let (live, identity) = match admitted_state_target(&app, &live_config, &headers, query) {
        Ok(target) => target,
        Err(refusal) => return *refusal,
    };
    let decided = app.limiter.peek(Check::new(&live.plan, &identity, 0)).await;
    match decided.decisions.first() {
        Some(decision) => {
            let path = degraded_path(decided.by);
            json_answer(&CheckDecision::new(
                live.serve.policy.name(),
                decision,
                path,
            ))
            .unwrap_or_else(ProblemResponse::into_response)
        }
        None => Problem::unavailable("the limiter could not decide: the store answered nothing")
            .into_response(),
    }
}

/// `DELETE /v1/state?policy=P&key=K`: an operator resets one identity —
/// its state is forgotten, so it starts afresh as a new identity does.
/// Logged and counted (`tollgate_state_resets_total`).
pub(super) async fn reset_state(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let live_config = app.live.load();
    let (live, identity) = match admitted_state_target(&app, &live_config, &headers, query) {
        Ok(target) => target,
        Err(refusal) => return *refusal,
    };
    let policy = live.serve.policy.name();
    match app.limiter.forget(&live.plan, &identity).await {
        Ok(existed) => {
            app.metrics
                .state_resets
                .get_or_create(&PolicyLabels {
                    policy: policy.to_owned(),
                })
                .inc();
            let identity = app.limiter.log_name(&identity);
            tracing::info!(
                policy,
                identity,
                existed,
                "an operator reset an identity (DELETE /v1/state)"
            );
            json_response(format!(
                "{{\"policy\":\"{policy}\",\"reset\":true,\"had_state\":{existed}}}"
            ))
        }
        Err(e) => {
            let identity = app.limiter.log_name(&identity);
            tracing::warn!(policy, identity, error = %e, "an identity could not be reset: the store did not answer");
            Problem::unavailable("the identity could not be reset: its store did not answer")
                .into_response()
        }
    }
}

/// The loaded policies, their stores and Envoy rules, as `tollgate explain`
/// shows them (admin token).
pub(super) async fn policies(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let live_config = app.live.load();
    if let Some(refusal) = admin_refusal(&app, &live_config, &headers, "policies") {
        return refusal;
    }
    let list: Vec<serde_json::Value> = live_config
        .policies
        .iter()
        .map(|live| crate::explain::policy_json(&live.serve, &live_config.config.stores))
        .collect();
    let body = serde_json::json!({
        "config_hash": live_config.config.hash,
        "ratelimit_headers": tollgate_http::ratelimit_draft::VERSION,
        "store": crate::explain::store_json(&live_config.config.stores.list[0].1),
        "stores": crate::explain::stores_json(&live_config.config.stores),
        "policies": list,
        "envoy_rules": crate::explain::envoy_rules_json(&live_config.config.envoy),
    });
    json_response(body.to_string())
}

/// The identities behind each policy's most decisions and rejections in
/// the last whole window (admin token): who is hot, even under its limit,
/// and whom a shadow-mode policy would have rejected. Secret identity
/// parts show only as their keyed hash, as everywhere.
pub(super) async fn hot(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let live_config = app.live.load();
    if let Some(refusal) = admin_refusal(&app, &live_config, &headers, "hot") {
        return refusal;
    }
    let now_ms = app.limiter.clock().now_ms();
    let window_ms = tollgate_limiter::HOT_WINDOW_MS;
    let started_ms = now_ms - now_ms % window_ms;
    // Rates over the window's length, or what of the current one passed
    // (at least a second, so a fresh window does not inflate them).
    let list = |entries: &[(Identity, u64)], what: &str, over_ms: u64| -> Vec<serde_json::Value> {
        let seconds = over_ms.max(1_000) as f64 / 1000.0;
        entries
            .iter()
            .map(|(identity, n)| {
                serde_json::json!({
                    "identity": identity.label(),
                    what: n,
                    "per_second": (*n as f64 / seconds * 1000.0).round() / 1000.0,
                })
            })
            .collect()
    };
    let elapsed_ms = now_ms - started_ms;
    let mut policies: Vec<serde_json::Value> = app
        .metrics
        .limiter
        .hot
        .report(now_ms)
        .iter()
        .map(|(policy, report)| {
            serde_json::json!({
                "policy": policy,
                "by_decisions": list(&report.decisions, "decisions", window_ms),
                "by_rejections": list(&report.rejections, "rejections", window_ms),
                "now": {
                    "by_decisions": list(&report.current_decisions, "decisions", elapsed_ms),
                    "by_rejections": list(&report.current_rejections, "rejections", elapsed_ms),
                },
            })
        })
        .collect();
    // Shadow-mode policies after them: their would-be rejections, each
    // identity also as every log line names it (the keyed hash), so a
    // decision log's `shadow_rejected` line finds its entry here.
    let shadow = |entries: &[(Identity, u64)], what: &str, over_ms: u64| {
        let mut listed = list(entries, what, over_ms);
        for (entry, (identity, _)) in listed.iter_mut().zip(entries) {
            entry["logged_as"] = app.limiter.log_name(identity).into();
        }
        listed
    };
    policies.extend(
        app.metrics
            .limiter
            .shadow_hot
            .report(now_ms)
            .iter()
            .map(|(policy, report)| {
                serde_json::json!({
                    "policy": policy,
                    "mode": "shadow",
                    "by_decisions": shadow(&report.decisions, "decisions", window_ms),
                    "by_would_reject": shadow(&report.rejections, "would_reject", window_ms),
                    "now": {
                        "by_decisions": shadow(&report.current_decisions, "decisions", elapsed_ms),
                        "by_would_reject": shadow(&report.current_rejections, "would_reject", elapsed_ms),
                    },
                })
            }),
    );
    let body = serde_json::json!({
        "window_ms": window_ms,
        "window_start_ms": started_ms.saturating_sub(window_ms),
        "now_start_ms": started_ms,
        "top": tollgate_limiter::HOT_IDENTITIES,
        "policies": policies,
    });
    json_response(body.to_string())
}

/// Live: the process answers.
pub(super) async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready means "can answer every policy per its failure mode", which a
/// serving instance always can: with its store down, each policy fails open,
/// fails closed or decides locally, as configured. So by default a store
/// outage never fails readiness — an orchestrator pulling every instance at
/// once would override those failure modes and take the service down. A
/// store marked `readiness_when_down: not_ready` says otherwise: while it
/// does not answer, `503` and `"ready": false`. The store's state is a
/// field here and the `tollgate_store_up` gauge: `store` is `up` only when
/// every store answered, `stores` says which by role.
pub(super) async fn readyz(State(app): State<Arc<App>>) -> Response {
    let live_config = app.live.load();
    let readiness = &live_config.config.stores.readiness;
    let mut stores = serde_json::Map::new();
    let (mut all_up, mut ready) = (true, true);
    for (index, store) in app.limiter.store_answers().await.into_iter().enumerate() {
        let state = match &store.answer {
            Ok(()) => "up",
            Err(e) => {
                tracing::debug!(store = %store.name, kind = e.kind(), error = %e, "readiness: a store did not answer its ping");
                all_up = false;
                ready &= readiness.get(index).copied().unwrap_or_default() == Readiness::Ready;
                "down"
            }
        };
        stores.insert(store.name.role, state.into());
    }
    let body = serde_json::json!({
        "ready": ready,
        "store": if all_up { "up" } else { "down" },
        "stores": stores,
    });
    let mut response = json_response(body.to_string());
    if !ready {
        *response.status_mut() = axum::http::StatusCode::SERVICE_UNAVAILABLE;
    }
    response
}

/// The OpenMetrics exposition (metrics token).
pub(super) async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if !app
        .live
        .load()
        .config
        .tokens
        .admits_headers(Guarded::Metrics, &headers)
    {
        return unauthorized(&app, Guarded::Metrics, "metrics");
    }
    app.limiter.maintain_gauges();
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.encode(),
    )
        .into_response()
}
