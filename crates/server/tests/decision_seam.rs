//! One decision seam under every protocol: the same decision made over
//! HTTP (`/v1/check`) and over Envoy's RLS (gRPC) lands in the same metric
//! series — store latency, store errors, degraded decisions, each policy's
//! outcomes — because both hand their checks to the one limiter.

mod support;

use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tokio::net::TcpListener;
use tollgate::{App, ServeConfig, serve_app, serve_grpc};
use tollgate_core::ManualClock;
use tollgate_testkit::RedisServer;
use tonic::transport::Channel;

/// A metric's value: the line that starts with `series` (name and labels).
fn value(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The app on `redis_url` behind both doors, and what a test needs to
/// knock on each; the config's folder and the app live as long as this.
struct Doors {
    _dir: tempfile::TempDir,
    _app: Arc<App>,
    base: String,
    client: reqwest::Client,
    rls: RateLimitServiceClient<Channel>,
}

/// Writes the config (an `api` policy of 2 an hour, and RLS rules `shop`
/// with and without a failure mode) and serves one app over HTTP and gRPC.
async fn open_doors(redis_url: &str) -> Doors {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("shop.yaml"),
        "domain: shop\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 2}\n    tollgate: {on_store_failure: fail_open}\n  - key: plain\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
    )
    .expect("write rules");
    let config_path = dir.path().join("tollgate.yaml");
    std::fs::write(
        &config_path,
        format!(
            "server: {{watch_interval_ms: 0}}\nstore:\n  redis: {{url: \"{}\", timeout: 300ms, rejected_cache: 0}}\nenvoy_ratelimit_configs: [shop.yaml]\npolicies:\n  - {{name: api, algorithm: fixed_window, limit: 2, window: 1h}}\n",
            redis_url
        ),
    )
    .expect("write config");
    let config = ServeConfig::load(&config_path).expect("config loads");
    let clock = Arc::new(ManualClock::new(support::T0));
    let app = Arc::new(
        App::open(config, config_path, clock)
            .await
            .expect("store opens"),
    );
    let http = TcpListener::bind("127.0.0.1:0").await.expect("bind http");
    let base = format!("http://{}", http.local_addr().expect("addr"));
    let grpc = TcpListener::bind("127.0.0.1:0").await.expect("bind grpc");
    let grpc_addr = format!("http://{}", grpc.local_addr().expect("addr"));
    tokio::spawn(serve_app(Arc::clone(&app), http, std::future::pending()));
    tokio::spawn(serve_grpc(Arc::clone(&app), grpc, std::future::pending()));
    let client = reqwest::Client::new();
    let rls = RateLimitServiceClient::connect(grpc_addr)
        .await
        .expect("connect");
    Doors {
        _dir: dir,
        _app: app,
        base,
        client,
        rls,
    }
}

/// Asks RLS about `acme` under the `shop` rule `key`, with a hits_addend
/// of 0 (one hit, as Envoy sends it): whether it is admitted, or the error
/// answered instead of a decision.
fn rls_allows(
    rls: &RateLimitServiceClient<Channel>,
    key: &'static str,
) -> impl Future<Output = Result<bool, tonic::Status>> {
    let request = RateLimitRequest {
        domain: "shop".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.into(),
                value: "acme".into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    };
    let mut rls = rls.clone();
    async move {
        rls.should_rate_limit(request)
            .await
            .map(|answer| answer.into_inner().overall_code == Code::Ok as i32)
    }
}

/// Asserts each series in `expected` has its value in `text`.
#[track_caller]
fn assert_values(text: &str, expected: &[(&str, f64)]) {
    for &(series, expected) in expected {
        assert_eq!(value(text, series), Some(expected), "{series}\n{text}");
    }
}

/// The store errors of every kind, summed.
fn store_errors(text: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with("tollgate_store_errors_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_and_rls_decisions_land_in_the_same_metric_series() {
    let mut redis = RedisServer::start().expect("redis-server");
    let Doors {
        _dir,
        _app,
        base,
        client,
        rls,
    } = open_doors(&redis.url()).await;

    let check = || async {
        let r = client
            .post(format!("{base}/v1/check"))
            .body(r#"{"policy":"api","key":"acme"}"#)
            .send()
            .await
            .expect("check");
        let body: serde_json::Value = r.json().await.expect("json");
        body["allowed"].as_bool().expect("allowed")
    };
    let ask_key = |key: &'static str| rls_allows(&rls, key);
    let ask = || async { ask_key("tenant").await.expect("answered") };
    let metrics = || async {
        client
            .get(format!("{base}/metrics"))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text")
    };

    // Three of each through the shared store: two admitted, one rejected.
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        outcomes.push((check().await, ask().await));
    }
    assert_eq!(outcomes, [(true, true), (true, true), (false, false)]);
    let text = metrics().await;
    assert_values(
        &text,
        &[
            // Six decisions, six store calls, whichever protocol made them.
            (
                r#"tollgate_store_call_duration_seconds_count{role="global"}"#,
                6.0,
            ),
            (
                r#"tollgate_decisions_total{policy="api",outcome="allowed"}"#,
                2.0,
            ),
            (
                r#"tollgate_decisions_total{policy="api",outcome="rejected"}"#,
                1.0,
            ),
            (
                r#"tollgate_decisions_total{policy="shop.tenant",outcome="allowed"}"#,
                2.0,
            ),
            (
                r#"tollgate_decisions_total{policy="shop.tenant",outcome="rejected"}"#,
                1.0,
            ),
        ],
    );

    // A rule without a failure mode, decided once while the store lives.
    assert!(ask_key("plain").await.expect("answered"));
    // The store gone: each protocol's decision is degraded the same way.
    redis.kill().expect("kill redis");
    assert!(check().await, "api fails open");
    assert!(ask().await, "shop.tenant fails open");
    let text = metrics().await;
    assert_eq!(
        value(
            &text,
            r#"tollgate_degraded_decisions_total{path="fail_open",outcome="allowed"}"#
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(store_errors(&text), 2.0, "{text}");
    // Without a failure mode the answer is an error, as envoyproxy/ratelimit
    // gives: the store's fault is counted, but no decision and no degraded
    // one, since nobody was told one.
    let status = ask_key("plain")
        .await
        .expect_err("an error, not a decision");
    assert_eq!(status.code(), tonic::Code::Unavailable);
    let text = metrics().await;
    assert_eq!(store_errors(&text), 3.0, "{text}");
    assert_values(
        &text,
        &[
            (
                r#"tollgate_degraded_decisions_total{path="fail_open",outcome="allowed"}"#,
                2.0,
            ),
            (
                r#"tollgate_decisions_total{policy="shop.plain",outcome="allowed"}"#,
                1.0,
            ),
        ],
    );
}
