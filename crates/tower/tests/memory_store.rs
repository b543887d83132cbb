//! The layer in an axum app over real HTTP, deciding in process on the
//! embedded store: the RateLimit fields on admissions, the 429 contract
//! field by field, and nothing of a rejected request reaches the handler.

mod support;

use std::sync::Arc;

use support::{T0, header, memory_limiter, serve_layered, two_per_ten_seconds, writes_by_tenant};
use tollgate_core::ManualClock;
use tollgate_limiter::Plan;
use tollgate_store::OnStoreFailure;
use tollgate_tower::RateLimitLayer;

/// 2 a burst, 1 each 10 s.
fn write_api() -> Plan {
    two_per_ten_seconds("write-api", OnStoreFailure::FailClosed)
}

#[tokio::test]
async fn admissions_carry_ratelimit_fields_and_a_rejection_the_whole_contract() {
    let clock = Arc::new(ManualClock::new(T0));
    let limiter = memory_limiter(clock.clone());
    let app = serve_layered(RateLimitLayer::new(
        limiter,
        vec![writes_by_tenant(write_api())],
    ))
    .await;

    let first = app.order("acme").await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "ratelimit-policy"), "\"write-api\";q=2;w=20");
    assert_eq!(header(&first, "ratelimit"), "\"write-api\";r=1;t=10");
    assert_eq!(first.text().await.expect("body"), "{\"order\":\"placed\"}");
    let second = app.order("acme").await;
    assert_eq!(header(&second, "ratelimit"), "\"write-api\";r=0;t=20");

    let third = app.order("acme").await;
    assert_eq!(third.status(), 429);
    assert_eq!(header(&third, "content-type"), "application/problem+json");
    assert_eq!(header(&third, "cache-control"), "no-store");
    assert_eq!(header(&third, "retry-after"), "10");
    assert_eq!(header(&third, "ratelimit-policy"), "\"write-api\";q=2;w=20");
    assert_eq!(header(&third, "ratelimit"), "\"write-api\";r=0;t=20");
    assert_eq!(header(&third, "tollgate-degraded"), "");
    let problem_field = header(&third, "tollgate-problem");
    let body: serde_json::Value = third.json().await.expect("problem+json");
    assert_eq!(
        body,
        serde_json::json!({
            "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
            "title": "Too Many Requests",
            "status": 429,
            "detail": "rate limit exceeded for policy write-api; retry after 10000 ms",
            "violated-policies": ["write-api"],
        })
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&problem_field).expect("problem field"),
        body
    );
    assert_eq!(
        app.handled(),
        2,
        "the rejected order never reached its handler"
    );

    // Another tenant has its own budget; acme's comes back on the clock.
    assert_eq!(app.order("globex").await.status(), 200);
    clock.advance(10_000);
    let again = app.order("acme").await;
    assert_eq!(again.status(), 200);
    assert_eq!(header(&again, "ratelimit"), "\"write-api\";r=0;t=20");
}

#[tokio::test]
async fn a_request_no_rule_names_passes_untouched() {
    let clock = Arc::new(ManualClock::new(T0));
    let limiter = memory_limiter(clock);
    let app = serve_layered(RateLimitLayer::new(
        limiter,
        vec![writes_by_tenant(write_api())],
    ))
    .await;
    let client = reqwest::Client::new();
    for _ in 0..3 {
        let read = client
            .get(app.url("/items"))
            .header("X-Tenant", "acme")
            .send()
            .await
            .expect("request");
        assert_eq!(read.status(), 200);
        assert_eq!(header(&read, "ratelimit"), "");
    }
    // A write without a tenant names no identity: not limited by it.
    for _ in 0..3 {
        let anonymous = client
            .post(app.url("/orders"))
            .send()
            .await
            .expect("request");
        assert_eq!(anonymous.status(), 200);
    }
    assert_eq!(app.handled(), 6);
}

/// A client that claims to be a gRPC caller (`content-type:
/// application/grpc`) changes only the form of the refusal: past its
/// limit it is still refused (a gRPC status, `RESOURCE_EXHAUSTED`, with
/// no body) and its request never reaches the handler.
#[tokio::test]
async fn claiming_to_be_grpc_changes_how_a_refusal_reads_not_the_limit() {
    let clock = Arc::new(ManualClock::new(T0));
    let limiter = memory_limiter(clock);
    let app = serve_layered(RateLimitLayer::new(
        limiter,
        vec![writes_by_tenant(write_api())],
    ))
    .await;
    let as_grpc = || async {
        reqwest::Client::new()
            .post(app.url("/orders"))
            .header("X-Tenant", "acme")
            .header("content-type", "application/grpc")
            .send()
            .await
            .expect("request")
    };
    for _ in 0..2 {
        assert_eq!(as_grpc().await.status(), 200);
    }
    let refused = as_grpc().await;
    assert_eq!(header(&refused, "grpc-status"), "8");
    assert_eq!(header(&refused, "retry-after"), "10");
    assert_eq!(header(&refused, "ratelimit"), "\"write-api\";r=0;t=20");
    assert_eq!(refused.text().await.expect("body"), "");
    assert_eq!(
        app.handled(),
        2,
        "the refused order never reached its handler"
    );
    // The same tenant asking plainly is refused as plainly.
    assert_eq!(app.order("acme").await.status(), 429);
    assert_eq!(app.handled(), 2);
}
