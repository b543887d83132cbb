//! The shipped decision vectors through the layer over real HTTP: every
//! event's answer says what `tollgate serve` decides for it
//! (`tests/vectors/expected.jsonl`) — admitted or 429, the `RateLimit`
//! field's remaining and reset, and a rejection's exact retry time.

mod support;

use std::sync::Arc;

use support::{T0, header, memory_limiter, serve_layered};
use tollgate_core::{Identity, ManualClock};
use tollgate_http::Problem;
use tollgate_limiter::Plan;
use tollgate_store::OnStoreFailure;
use tollgate_tower::{RateLimitLayer, Rule};

fn vectors(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/vectors")
        .join(name)
}

/// The text of header `name`, as UTF-8 (the vectors' keys are not all ASCII).
fn text<'h>(parts: &'h http::request::Parts, name: &str) -> Option<&'h str> {
    std::str::from_utf8(parts.headers.get(name)?.as_bytes()).ok()
}

/// Policy `name` for requests naming it in `X-Policy`, keyed by `X-Key`
/// as a single value (as `/v1/check` keys a string), at `X-Cost`.
fn rule(plan: Plan) -> Rule {
    let name = plan.policy().name().to_owned();
    Rule::judged(plan, move |parts| {
        if text(parts, "x-policy") != Some(name.as_str()) {
            return Ok(None);
        }
        let key = text(parts, "x-key").ok_or_else(|| Problem::bad_request("no key"))?;
        let cost = text(parts, "x-cost")
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| Problem::bad_request("no cost"))?;
        Ok(Some((Identity::value(key), cost)))
    })
}

#[tokio::test]
async fn the_layer_decides_the_shipped_vectors_as_tollgate_serve_does() {
    let yaml = std::fs::read_to_string(vectors("policies.yaml")).expect("policies");
    let config = tollgate_config::Config::parse(&yaml, |_| None).expect("vector policies load");
    let rules = config
        .policies
        .iter()
        .map(|p| rule(Plan::new(p.policy.clone(), 0).with_failure_mode(OnStoreFailure::FailClosed)))
        .collect();
    let clock = Arc::new(ManualClock::new(T0));
    let app = serve_layered(RateLimitLayer::new(memory_limiter(clock.clone()), rules)).await;
    let client = reqwest::Client::new();
    let events = std::fs::read_to_string(vectors("events.jsonl")).expect("events");
    let expected = std::fs::read_to_string(vectors("expected.jsonl")).expect("expected");
    let mut compared = 0;
    for (line, (event, want)) in events.lines().zip(expected.lines()).enumerate() {
        let event: serde_json::Value = serde_json::from_str(event).expect("event");
        let want: serde_json::Value = serde_json::from_str(want).expect("expected");
        clock.set(event["t_ms"].as_u64().expect("t_ms"));
        let key = event["key"].as_str().expect("key");
        let answer = client
            .post(app.url("/orders"))
            .header("X-Policy", event["policy"].as_str().expect("policy"))
            .header(
                "X-Key",
                http::HeaderValue::from_bytes(key.as_bytes()).expect("key"),
            )
            .header("X-Cost", event["cost"].to_string())
            .send()
            .await
            .expect("request");
        let allowed = want["allowed"].as_bool().expect("allowed");
        assert_eq!(answer.status() == 200, allowed, "event {line}: {event}");
        let remaining = want["remaining"].as_i64().expect("remaining").max(0);
        let reset_s = want["reset_after_ms"]
            .as_u64()
            .expect("reset")
            .div_ceil(1000);
        let state = header(&answer, "ratelimit");
        assert!(
            state.ends_with(&format!(";r={remaining};t={reset_s}")),
            "event {line}: {state} for {want}"
        );
        if !allowed {
            let retry = header(&answer, "retry-after");
            let problem: serde_json::Value = answer.json().await.expect("problem");
            let detail = problem["detail"].as_str().expect("detail");
            match want["retry_after_ms"].as_u64() {
                Some(ms) => {
                    assert!(
                        detail.ends_with(&format!("retry after {ms} ms")),
                        "event {line}: {detail}"
                    );
                    assert_eq!(retry, ms.div_ceil(1000).max(1).to_string());
                }
                None => {
                    assert!(
                        detail.contains("can never be admitted"),
                        "event {line}: {detail}"
                    );
                    assert_eq!(retry, "");
                }
            }
        }
        compared += 1;
    }
    assert_eq!(compared, 1500);
}
