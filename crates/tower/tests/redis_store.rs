//! The layer on Redis, configured by the file `tollgate serve` reads: a
//! service and the server on one Redis spend one budget whichever is
//! asked, directly or through the remote client; with Redis stopped each
//! policy answers by its failure mode, and exactly again once it is back.

mod support;

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use support::{Tollgate, header, serve_layered, write_config};
use tollgate_core::{Clock, SystemClock};
use tollgate_limiter::LimiterMetrics;
use tollgate_testkit::RedisServer;
use tollgate_tower::{Configured, RateLimitLayer, rules_of};

fn config(redis_url: &str) -> String {
    format!(
        r#"
store:
  redis: {{ url: "{redis_url}" }}
policies:
  - name: writes
    algorithm: token_bucket
    capacity: 3
    refill: {{ tokens: 1, per: 1h }}
    match: {{ methods: [POST] }}
    identity: [{{ header: X-Tenant }}]
    on_store_failure: fail_closed
  - name: reads
    algorithm: token_bucket
    capacity: 100
    refill: {{ tokens: 1, per: 1h }}
    match: {{ methods: [GET] }}
    identity: [{{ header: X-Tenant }}]
    on_store_failure: fail_open
"#
    )
}

#[tokio::test]
async fn a_service_and_tollgate_serve_on_one_redis_spend_one_budget() {
    let redis = RedisServer::start().expect("redis-server starts");
    let yaml = config(&redis.url());
    let path = write_config(redis.dir(), &yaml);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let configured = Configured::load(&path, clock.clone())
        .await
        .expect("config loads");
    let app = serve_layered(configured.layer()).await;
    let server = Tollgate::start(&yaml, clock.clone(), "127.0.0.1:0").await;
    let client = reqwest::Client::new();

    let first = app.order("acme").await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "ratelimit"), "\"writes\";r=2;t=3600");
    let asked = server
        .check(r#"{"policy":"writes","key":{"x-tenant":"acme"}}"#)
        .await;
    assert_eq!(asked["remaining"], 1);
    assert_eq!(
        header(&app.order("acme").await, "ratelimit"),
        "\"writes\";r=0;t=10800"
    );
    assert_eq!(app.order("acme").await.status(), 429);
    let asked = server
        .check(r#"{"policy":"writes","key":{"x-tenant":"acme"}}"#)
        .await;
    assert_eq!(asked["allowed"], false);

    // The same through a second service asking the server remotely.
    let mut registry = Registry::default();
    let metrics = LimiterMetrics::register(&mut registry, clock.clone());
    let loaded = tollgate_config::Config::load(&path, |_| None).expect("config loads");
    let remote = support::remote(&server.base, clock.clone());
    let via_remote = serve_layered(RateLimitLayer::new(remote, rules_of(&loaded, &metrics))).await;
    let remote_order = client
        .post(via_remote.url("/orders"))
        .header("X-Tenant", "globex")
        .send()
        .await
        .expect("request");
    assert_eq!(header(&remote_order, "ratelimit"), "\"writes\";r=2;t=3600");
    assert_eq!(
        header(&app.order("globex").await, "ratelimit"),
        "\"writes\";r=1;t=7200"
    );
    let spent = client
        .post(via_remote.url("/orders"))
        .header("X-Tenant", "acme")
        .send()
        .await
        .expect("request");
    assert_eq!(spent.status(), 429);
    server.stop().await;
}

#[tokio::test]
async fn with_redis_stopped_each_policy_answers_by_its_failure_mode_and_recovers() {
    let mut redis = RedisServer::start().expect("redis-server starts");
    let path = write_config(redis.dir(), &config(&redis.url()));
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let configured = Configured::load(&path, clock).await.expect("config loads");
    let app = serve_layered(configured.layer()).await;
    assert_eq!(app.order("acme").await.status(), 200);
    assert_eq!(app.read("acme").await.status(), 200);

    redis.kill().expect("redis stops");
    let closed = app.order("acme").await;
    assert_eq!(closed.status(), 429);
    assert_eq!(header(&closed, "tollgate-degraded"), "fail_closed");
    let open = app.read("acme").await;
    assert_eq!(open.status(), 200);
    assert_eq!(header(&open, "tollgate-degraded"), "fail_open");

    redis.restart().expect("redis restarts");
    // The breaker probes again after its cool-down (1 s).
    let mut back = None;
    for _ in 0..50 {
        let answer = app.order("acme").await;
        if header(&answer, "tollgate-degraded").is_empty() {
            back = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let back = back.expect("decided on Redis again within 5 s");
    assert_eq!(back.status(), 200);
    // A restarted Redis without persistence starts from a full bucket.
    assert_eq!(header(&back, "ratelimit"), "\"writes\";r=2;t=3600");
}
