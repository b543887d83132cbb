//! The layer deciding through a remote tollgate's `/v1/check`: one
//! budget with the server's own door, a rejection remembered until its
//! retry time (no round trip), and each policy's failure mode while the
//! server is stopped or silent, recovering when it is back.

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::{T0, Tollgate, header, serve_layered, two_per_ten_seconds, writes_by_tenant};
use tollgate_core::{Identity, Limits, ManualClock, Policy, Rate};
use tollgate_limiter::Plan;
use tollgate_store::OnStoreFailure;
use tollgate_tower::{RateLimitLayer, RemoteConfig, RemoteTollgate, Rule};

const CONFIG: &str = r#"
policies:
  - name: write-api
    algorithm: token_bucket
    capacity: 2
    refill: { tokens: 1, per: 10s }
    identity: [{ header: X-Tenant }]
  - name: reads
    algorithm: token_bucket
    capacity: 100
    refill: { tokens: 100, per: 1s }
    identity: [{ header: X-Tenant }]
"#;

/// The server's `write-api`, failing as `on_failure` says in the client.
fn write_api(on_failure: OnStoreFailure) -> Plan {
    two_per_ten_seconds("write-api", on_failure)
}

/// The server's `reads` on GETs, failing open.
fn reads() -> Rule {
    let rate = Rate::new(100, 100, 1_000).expect("valid rate");
    let plan = Plan::new(Policy::new("reads", Limits::TokenBucket(rate)), 0)
        .with_failure_mode(OnStoreFailure::FailOpen);
    Rule::new(plan, |parts| {
        (parts.method == http::Method::GET)
            .then(|| support::by_tenant(parts))
            .flatten()
    })
}

/// A client for `base` on the test's clock.
fn remote(base: &str, clock: &Arc<ManualClock>) -> RemoteTollgate {
    support::remote(base, clock.clone())
}

#[tokio::test]
async fn the_layer_and_v1_check_spend_one_budget_and_a_rejection_is_remembered() {
    let clock = Arc::new(ManualClock::new(T0));
    let server = Tollgate::start(CONFIG, clock.clone(), "127.0.0.1:0").await;
    let rules = vec![writes_by_tenant(write_api(OnStoreFailure::FailOpen))];
    let app = serve_layered(RateLimitLayer::new(remote(&server.base, &clock), rules)).await;

    let first = app.order("acme").await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "ratelimit"), "\"write-api\";r=1;t=10");
    // The server's own door spends the same budget, keyed as forward auth keys.
    let asked = server
        .check(r#"{"policy":"write-api","key":{"x-tenant":"acme"}}"#)
        .await;
    assert_eq!(asked["allowed"], true);
    assert_eq!(asked["remaining"], 0);
    let third = app.order("acme").await;
    assert_eq!(third.status(), 429);
    assert_eq!(header(&third, "retry-after"), "10");

    // With the server gone, the remembered rejection still answers: a
    // round trip would have failed open.
    server.stop().await;
    clock.advance(4_000);
    let remembered = app.order("acme").await;
    assert_eq!(remembered.status(), 429);
    assert_eq!(header(&remembered, "retry-after"), "6");
    assert_eq!(header(&remembered, "tollgate-degraded"), "");
    assert_eq!(app.handled(), 1);

    // At the retry time the client asks again, finds no server, and the
    // policy's failure mode answers.
    clock.advance(6_000);
    let degraded = app.order("acme").await;
    assert_eq!(degraded.status(), 200);
    assert_eq!(header(&degraded, "tollgate-degraded"), "fail_open");
    assert_eq!(header(&degraded, "ratelimit"), "\"write-api\";r=0;t=0");
}

#[tokio::test]
async fn a_stopped_remote_answers_by_each_policys_failure_mode_and_recovers() {
    let clock = Arc::new(ManualClock::new(T0));
    let server = Tollgate::start(CONFIG, clock.clone(), "127.0.0.1:0").await;
    let addr = server.addr;
    let rules = vec![
        writes_by_tenant(write_api(OnStoreFailure::FailClosed)),
        reads(),
    ];
    let app = serve_layered(RateLimitLayer::new(remote(&server.base, &clock), rules)).await;
    assert_eq!(app.order("acme").await.status(), 200);
    assert_eq!(app.read("acme").await.status(), 200);

    server.stop().await;
    let closed = app.order("acme").await;
    assert_eq!(closed.status(), 429);
    assert_eq!(header(&closed, "tollgate-degraded"), "fail_closed");
    assert_eq!(header(&closed, "retry-after"), "1");
    let problem: serde_json::Value = closed.json().await.expect("problem+json");
    assert_eq!(
        problem["detail"],
        "the limiter could not decide: its shared store is unavailable, and a matching policy fails closed"
    );
    assert_eq!(
        problem["violated-policies"],
        serde_json::json!(["write-api"])
    );
    let open = app.read("acme").await;
    assert_eq!(open.status(), 200);
    assert_eq!(header(&open, "tollgate-degraded"), "fail_open");

    // Back on the same address: decided remotely again, exactly.
    let server = Tollgate::start(CONFIG, clock.clone(), &addr.to_string()).await;
    clock.advance(1_000);
    let back = app.order("acme").await;
    assert_eq!(back.status(), 200);
    assert_eq!(header(&back, "tollgate-degraded"), "");
    assert_eq!(header(&back, "ratelimit"), "\"write-api\";r=1;t=10");
    server.stop().await;
}

#[tokio::test]
async fn a_remote_that_does_not_answer_in_time_answers_by_the_failure_mode() {
    // Connections are accepted by the kernel and never answered.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", silent.local_addr().expect("addr"));
    let clock = Arc::new(ManualClock::new(T0));
    let config = RemoteConfig {
        timeout: Duration::from_millis(50),
        ..RemoteConfig::new(base)
    };
    let decider = RemoteTollgate::new(&config, clock.clone()).expect("valid url");
    let rules = vec![writes_by_tenant(write_api(OnStoreFailure::FailClosed))];
    let app = serve_layered(RateLimitLayer::new(decider, rules)).await;
    let started = tokio::time::Instant::now();
    let answer = reqwest::Client::new()
        .post(app.url("/orders"))
        .header("X-Tenant", "acme")
        .send()
        .await
        .expect("request");
    assert_eq!(answer.status(), 429);
    assert_eq!(header(&answer, "tollgate-degraded"), "fail_closed");
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(silent);
}

#[tokio::test]
async fn a_batch_is_all_or_nothing_on_the_remote() {
    let clock = Arc::new(ManualClock::new(T0));
    let server = Tollgate::start(CONFIG, clock.clone(), "127.0.0.1:0").await;
    // Every POST checks write-api for the tenant and for a shared key.
    let shared = Rule::new(write_api(OnStoreFailure::FailClosed), |parts| {
        (parts.method == http::Method::POST)
            .then(|| Identity::composite([("x-tenant", "all")]).ok())
            .flatten()
    });
    let rules = vec![
        writes_by_tenant(write_api(OnStoreFailure::FailClosed)),
        shared,
    ];
    let app = serve_layered(RateLimitLayer::new(remote(&server.base, &clock), rules)).await;
    assert_eq!(app.order("a").await.status(), 200);
    assert_eq!(app.order("b").await.status(), 200);
    // The shared key is spent; c's own budget is untouched by the refusal.
    assert_eq!(app.order("c").await.status(), 429);
    let c = server
        .check(r#"{"policy":"write-api","key":{"x-tenant":"c"},"cost":0}"#)
        .await;
    assert_eq!(c["remaining"], 2);
    server.stop().await;
}

#[tokio::test]
async fn rules_from_the_file_tollgate_serve_serves_spend_its_budget_whichever_is_asked() {
    let dir = support::temp_dir();
    let path = support::write_config(
        &dir.0,
        "policies:\n  - {name: orders, algorithm: token_bucket, capacity: 10, refill: {tokens: 1, per: 1h}, match: {methods: [POST], path_prefix: /orders}, identity: [{header: X-Tenant}], cost: {header: X-Cost, max: 10}}\n",
    );
    let clock = Arc::new(ManualClock::new(T0));
    let server = Tollgate::start_file(&path, clock.clone(), "127.0.0.1:0").await;
    // The layer's identity, match and cost are the file's, read as the
    // server reads it.
    let config = tollgate_config::Config::load(&path, |_| None).expect("config loads");
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = tollgate_limiter::LimiterMetrics::register(&mut registry, clock.clone());
    let rules = tollgate_tower::rules_of(&config, &metrics);
    let app = serve_layered(RateLimitLayer::new(remote(&server.base, &clock), rules)).await;
    let client = reqwest::Client::new();
    let order = |tenant: &'static str, cost: Option<&'static str>| {
        let request = client.post(app.url("/orders")).header("X-Tenant", tenant);
        match cost {
            Some(cost) => request.header("X-Cost", cost),
            None => request,
        }
        .send()
    };

    let first = order("acme", Some("4")).await.expect("request");
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "ratelimit"), "\"orders\";r=6;t=14400");
    let asked = server
        .check(r#"{"policy":"orders","key":{"x-tenant":"acme"},"cost":3}"#)
        .await;
    assert_eq!(asked["allowed"], true);
    assert_eq!(asked["remaining"], 3);
    let over = order("acme", Some("4")).await.expect("request");
    assert_eq!(over.status(), 429);
    assert_eq!(header(&over, "retry-after"), "3600");
    assert_eq!(header(&over, "ratelimit"), "\"orders\";r=3;t=25200");

    // No X-Cost: the file's default, 1; a GET matches no policy.
    let globex = order("globex", None).await.expect("request");
    assert_eq!(header(&globex, "ratelimit"), "\"orders\";r=9;t=3600");
    let peek = server
        .check(r#"{"policy":"orders","key":{"x-tenant":"globex"},"cost":0}"#)
        .await;
    assert_eq!(peek["remaining"], 9);
    let read = app.read("acme").await;
    assert_eq!(read.status(), 200);
    assert_eq!(header(&read, "ratelimit"), "");
    assert_eq!(app.handled(), 3);
    server.stop().await;
}
