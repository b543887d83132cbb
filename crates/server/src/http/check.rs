//! `POST /v1/check`, the decision API for services: a JSON body of one
//! check or a batch (its schema in `check_body.rs`), decided by the limiter
//! and answered as JSON. The body's and the answer's schemas, and the
//! words for a refused body, are the contract's (`tollgate-http`).

use crate::limiter::RequestId;
use axum::http;
use axum::response::Response;
use hyper::body::Body as HttpBody;
use tollgate_core::quote;
use tollgate_http::{
    BatchDecision, CheckBody, CheckDecision, CheckItem, CheckKey, Object, Problem,
    diagnose_check_body, parse_check_body,
};

use super::body::{BodyError, guarded_body};
use super::request_id;
use super::{degraded_path, json_answer, refuse, replayed, unknown_policy};
use crate::app::App;
use crate::limiter::Check;
use crate::live::LiveConfig;

/// The endpoint's path.
pub(super) const CHECK: &str = "/v1/check";
/// What a 405 on `/v1/check` lists.
pub(super) const CHECK_ALLOW: &str = "POST";

/// `POST /v1/check`: the body's checks, decided by the limiter.
pub(super) async fn check_request<B>(app: &App, req: http::Request<B>) -> Response
where
    B: HttpBody,
    B::Error: Into<BodyError>,
{
    // One load a request: the config the body is read under decides it too.
    let live_config = app.live.load();
    let body = match guarded_body(app, &live_config, req, "check").await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let settings = &live_config.config.server;
    let (max_key, max_checks) = (settings.max_key_bytes, settings.max_checks);
    let parsed = match parse_check_body(&body) {
        Ok(parsed) => parsed,
        // Named in tollgate's words, off the success path.
        Err(typed) => return refuse(app, diagnose_check_body(&body, &typed)),
    };
    let id = match request_id::from_body(parsed.request_id.as_deref()) {
        Ok(id) => id,
        Err(problem) => return refuse(app, problem),
    };
    let id = id.as_ref();
    if parsed.refund == Some(true) {
        return refund_request(app, &live_config, &parsed, id, max_key)
            .await
            .unwrap_or_else(|p| refuse(app, p));
    }
    let response = match parsed {
        CheckBody {
            checks: Some(items),
            policy: None,
            key: None,
            cost: None,
            ..
        } => check_batch(app, &live_config, &items, id, max_key, max_checks).await,
        CheckBody {
            checks: None,
            policy: Some(policy),
            key: Some(key),
            cost,
            ..
        } => {
            let cost = cost.unwrap_or(1);
            check_one(app, &live_config, &policy, &key, cost, id, max_key).await
        }
        CheckBody {
            checks: Some(_), ..
        } => Err(Problem::unprocessable(
            "give either checks or policy/key/cost, not both",
        )),
        CheckBody { policy: None, .. } => Err(Problem::unprocessable("missing field `policy`")),
        CheckBody { key: None, .. } => Err(Problem::unprocessable("missing field `key`")),
    };
    response.unwrap_or_else(|p| refuse(app, p))
}

async fn check_one(
    app: &App,
    live_config: &LiveConfig,
    name: &str,
    key: &CheckKey<'_>,
    cost: u64,
    id: Option<&RequestId>,
    max_key: usize,
) -> Result<Response, Problem> {
    let live = live_config
        .policy(name)
        .ok_or_else(|| unknown_policy(name))?;
    let identity = key.identity(max_key)?;
    let checks = [Check::new(&live.plan, &identity, cost)];
    let decided = match id {
        None => app.limiter.decide(&checks).await,
        // The checks are the whole request: no shape beside them.
        Some(id) => app.limiter.decide_request(&checks, Some(id), None).await,
    };
    let replayed = replayed(&decided.replay)?;
    let decision = decided.decisions.first().ok_or_else(|| {
        Problem::unavailable("the limiter could not decide: the store answered nothing")
    })?;
    let mut answer = CheckDecision::new(
        live.serve.policy.name(),
        decision,
        degraded_path(decided.by),
    );
    if live.plan.shadow() {
        answer = answer.shadowed(decision.allowed);
    }
    if replayed {
        answer = answer.replayed();
    }
    json_answer(&answer)
}

/// `"refund": true`: `cost` units of one policy and key given back
/// (`Limiter::refund`), answered with a look at the state left and
/// `"refunded"`, the units that went back (fewer than `cost` when the
/// state was fuller: a refund never lifts it past full).
async fn refund_request(
    app: &App,
    live_config: &LiveConfig,
    parsed: &CheckBody<'_>,
    id: Option<&RequestId>,
    max_key: usize,
) -> Result<Response, Problem> {
    let (Some(name), Some(key), None) = (&parsed.policy, &parsed.key, &parsed.checks) else {
        return Err(Problem::unprocessable(
            "refund: give policy, key and cost (the units to give back) of one check, not checks",
        ));
    };
    let live = live_config
        .policy(name)
        .ok_or_else(|| unknown_policy(name))?;
    if live.plan.policy().limits().holds_permits() {
        return Err(Problem::unprocessable(format!(
            "refund: policy {} holds permits, not units: hand the permit to /v1/release",
            quote(name)
        )));
    }
    let identity = key.identity(max_key)?;
    let check = Check::new(&live.plan, &identity, parsed.cost.unwrap_or(1));
    let refunded =
        app.limiter.refund_request(&check, id).await.map_err(|_| {
            Problem::unavailable("the refund was not made: the store is unavailable")
        })?;
    let decided = app.limiter.peek(check).await;
    let decision = decided.decisions.first().ok_or_else(|| {
        Problem::unavailable("the limiter could not decide: the store answered nothing")
    })?;
    let answer = CheckDecision::new(
        live.serve.policy.name(),
        decision,
        degraded_path(decided.by),
    );
    json_answer(&answer.refunded(refunded))
}

async fn check_batch(
    app: &App,
    live_config: &LiveConfig,
    items: &[Object<CheckItem<'_>>],
    id: Option<&RequestId>,
    max_key: usize,
    max_checks: usize,
) -> Result<Response, Problem> {
    if items.is_empty() {
        return Err(Problem::unprocessable("checks must not be empty"));
    }
    if items.len() > max_checks {
        return Err(Problem::too_large(format!(
            "more than {max_checks} checks in one request"
        )));
    }
    let mut lives = Vec::with_capacity(items.len());
    let mut identities = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let live = live_config.policy(&item.policy).ok_or_else(|| {
            Problem::not_found(format!(
                "checks[{i}]: unknown policy {}",
                quote(&item.policy)
            ))
        })?;
        let identity = item.key.identity(max_key).map_err(|mut p| {
            p.detail = format!("checks[{i}]: {}", p.detail);
            p
        })?;
        lives.push(live);
        identities.push(identity);
    }
    let checks: Vec<Check<'_>> = lives
        .iter()
        .zip(&identities)
        .zip(items)
        .map(|((live, identity), item)| Check::new(&live.plan, identity, item.cost))
        .collect();
    let decided = app.limiter.decide_request(&checks, id, None).await;
    let replayed = replayed(&decided.replay)?;
    let allowed = lives
        .iter()
        .zip(&decided.decisions)
        .all(|(live, d)| d.allowed || live.plan.shadow());
    let looked = crate::limiter::shadow_looked(&checks, &decided);
    let mut answers = Vec::with_capacity(decided.decisions.len());
    for ((live, check), decision) in lives.iter().zip(&checks).zip(&decided.decisions) {
        let path = degraded_path(decided.by);
        let mut answer = CheckDecision::new(live.serve.policy.name(), decision, path);
        if live.plan.shadow() {
            // The would-be verdict the decision log states too.
            answer = answer.shadowed(crate::limiter::would_allow(check, decision, looked));
        }
        if replayed {
            answer = answer.replayed();
        }
        answers.push(answer);
    }
    json_answer(&BatchDecision {
        allowed,
        replayed,
        degraded: decided.by.is_degraded(),
        path: degraded_path(decided.by).map(Into::into),
        decisions: answers,
    })
}
