//! tollgate's additions to the RLS: RateLimit fields in the answer's
//! headers, the `tollgate` key, reloads of an edited file, gRPC health.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use tonic::transport::Channel;

use crate::examples::EXAMPLE_1;
use crate::harness::*;

#[tokio::test]
async fn response_headers_carry_the_ratelimit_fields_and_retry_after() {
    let file = "domain: api
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 2
";
    let mut rls = Rls::start_files(
        "server: {watch_interval_ms: 0, grpc_response_headers: true}\nenvoy_ratelimit_configs: [api.yaml]\n",
        &[("api.yaml", file)],
    )
    .await;
    let headers = |r: &RateLimitResponse| -> Vec<(String, String)> {
        r.response_headers_to_add
            .iter()
            .map(|h| (h.key.clone(), h.value.clone()))
            .collect()
    };
    let r = rls.ask("api", vec![desc(&[("user", "u1")])]).await;
    assert_eq!(
        headers(&r),
        [
            (
                "ratelimit-policy".to_owned(),
                "\"api.user\";q=2;w=60".to_owned()
            ),
            ("ratelimit".to_owned(), "\"api.user\";r=1;t=40".to_owned()),
        ]
    );
    rls.ask("api", vec![desc(&[("user", "u1")])]).await;
    rls.clock.advance(30_500);
    let r = rls.ask("api", vec![desc(&[("user", "u1")])]).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(
        headers(&r),
        [
            (
                "ratelimit-policy".to_owned(),
                "\"api.user\";q=2;w=60".to_owned()
            ),
            ("ratelimit".to_owned(), "\"api.user\";r=0;t=10".to_owned()),
            ("retry-after".to_owned(), "10".to_owned()),
        ]
    );
}

/// What `response_headers_to_add` holds, in order.
fn added_headers(r: &RateLimitResponse) -> Vec<(String, String)> {
    r.response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test]
async fn a_fast_bucket_states_its_rate_per_second_over_grpc_as_over_http() {
    // The HTTP test (answers.rs) states this policy `"per-ip";q=1000;w=1`.
    let config = "server: {watch_interval_ms: 0, grpc_response_headers: true}
envoy_ratelimit_configs: [api.yaml]
policies:
  - name: per-ip
    algorithm: gcra
    capacity: 50
    refill: {tokens: 1000, per: 1s}
";
    let file = "domain: api
descriptors:
  - key: ip
    tollgate: {policy: per-ip}
  - key: client
    rate_limit: {unit: second, requests_per_unit: 1000}
    tollgate: {algorithm: gcra, capacity: 50}
";
    let mut rls = Rls::start_files(config, &[("api.yaml", file)]).await;
    let r = rls.ask("api", vec![desc(&[("ip", "10.0.0.1")])]).await;
    assert_eq!(r.overall_code, OK);
    // 50 at 1000/s refills within a second: 1000 a second, not "50 a second".
    assert_eq!(
        added_headers(&r),
        pairs(&[
            ("ratelimit-policy", "\"per-ip\";q=1000;w=1"),
            ("ratelimit", "\"per-ip\";r=49;t=1"),
        ])
    );
    let r = rls.ask("api", vec![desc(&[("client", "c")])]).await;
    assert_eq!(
        added_headers(&r),
        pairs(&[
            ("ratelimit-policy", "\"api.client\";q=1000;w=1"),
            ("ratelimit", "\"api.client\";r=49;t=1"),
        ])
    );
    // Sent at once only the burst passes; the quota stated stays the rate.
    let r = rls.spend("api", &[("ip", "10.0.0.1")], 50).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(
        added_headers(&r),
        pairs(&[
            ("ratelimit-policy", "\"per-ip\";q=1000;w=1"),
            ("ratelimit", "\"per-ip\";r=0;t=1"),
            ("retry-after", "1"),
        ])
    );
}

#[tokio::test]
async fn a_sub_second_window_states_the_whole_windows_of_a_second_over_grpc() {
    let file = "domain: api
descriptors:
  - key: burst
    tollgate: {algorithm: fixed_window, limit: 10, window: 100ms}
  - key: counter
    tollgate: {algorithm: sliding_window, limit: 10, window: 100ms}
";
    let mut rls = Rls::start_files(
        "server: {watch_interval_ms: 0, grpc_response_headers: true}\nenvoy_ratelimit_configs: [api.yaml]\n",
        &[("api.yaml", file)],
    )
    .await;
    let r = rls
        .ask(
            "api",
            vec![desc(&[("burst", "k")]), desc(&[("counter", "k")])],
        )
        .await;
    assert_eq!(r.overall_code, OK);
    // Ten windows of 10 a second; the counter L − 2 a window (docs/http-api.md).
    assert_eq!(
        added_headers(&r),
        pairs(&[
            (
                "ratelimit-policy",
                "\"api.burst\";q=100;w=1, \"api.counter\";q=80;w=1"
            ),
            (
                "ratelimit",
                "\"api.burst\";r=9;t=1, \"api.counter\";r=9;t=1"
            ),
        ])
    );
    // T0 starts a window: the eleventh of it waits for the next, 100 ms on.
    let r = rls.spend("api", &[("burst", "k")], 10).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(reset_ms(&r.statuses[0]), 100);
    assert_eq!(
        added_headers(&r),
        pairs(&[
            ("ratelimit-policy", "\"api.burst\";q=100;w=1"),
            ("ratelimit", "\"api.burst\";r=0;t=1"),
            ("retry-after", "1"),
        ])
    );
}

#[tokio::test]
async fn without_the_setting_no_headers_are_added() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_1]).await;
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "users")])])
        .await;
    assert!(r.response_headers_to_add.is_empty());
}

#[tokio::test]
async fn the_tollgate_key_picks_a_token_bucket_or_binds_a_policy() {
    let file = "domain: api
descriptors:
  - key: burst
    rate_limit:
      unit: second
      requests_per_unit: 5
    tollgate:
      algorithm: token_bucket
      capacity: 20
  - key: bound
    tollgate:
      policy: write-api
  - key: sliding
    rate_limit:
      unit: minute
      requests_per_unit: 10
    tollgate: {algorithm: sliding_window}
";
    let config = "server: {watch_interval_ms: 0}
envoy_ratelimit_configs: [api.yaml]
policies:
  - name: write-api
    algorithm: gcra
    capacity: 3
    refill: {tokens: 1, per: 1s}
";
    let mut rls = Rls::start_files(config, &[("api.yaml", file)]).await;
    // A burst of 20, refilled 5 per second (docs/design.md §3's worked example).
    let r = rls.ask_hits("api", vec![desc(&[("burst", "k")])], 17).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 5, SECOND, 3));
    rls.clock.advance(100);
    let r = rls.ask_hits("api", vec![desc(&[("burst", "k")])], 4).await;
    assert_eq!(brief(&r.statuses[0]), (OVER, 5, SECOND, 3));
    rls.clock.advance(300);
    let r = rls.ask_hits("api", vec![desc(&[("burst", "k")])], 4).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 5, SECOND, 1));
    // The bound gcra policy: capacity 3, 1 per second.
    let r = rls.ask_hits("api", vec![desc(&[("bound", "k")])], 3).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 1, SECOND, 0));
    let r = rls.ask("api", vec![desc(&[("bound", "k")])]).await;
    assert_eq!(brief(&r.statuses[0]), (OVER, 1, SECOND, 0));
    assert_eq!(reset_ms(&r.statuses[0]), 3000);
    let r = rls
        .ask_hits("api", vec![desc(&[("sliding", "k")])], 10)
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 10, MINUTE, 0));
}

#[tokio::test]
async fn an_envoy_file_edit_reloads_with_the_config() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_1]).await;
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "users")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 499));
    std::fs::write(
        rls.dir.path().join("ratelimit/config0.yaml"),
        EXAMPLE_1.replacen("500", "7", 1),
    )
    .expect("write");
    rls.app.reload().expect("reloads");
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "users")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 7, SECOND, 5));
    // A broken file is refused and the previous rules keep serving.
    std::fs::write(rls.dir.path().join("ratelimit/config0.yaml"), "domain: mongo_cps\ndescriptors:\n  - key: database\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
        .expect("write");
    let err = rls.app.reload().expect_err("refused").to_string();
    assert!(
        err.contains(
            "config0.yaml: descriptors[0].rate_limit.unit: invalid rate limit unit \"fortnight\""
        ),
        "{err}"
    );
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "users")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 7, SECOND, 4));
}

#[tokio::test]
async fn the_grpc_health_service_reports_serving() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let rls = Rls::envoy_only(&[EXAMPLE_1]).await;
    let mut health = HealthClient::new(
        Channel::from_shared(rls.grpc.clone())
            .expect("uri")
            .connect()
            .await
            .expect("connect"),
    );
    for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        let r = health
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .expect("health")
            .into_inner();
        assert_eq!(r.status, 1, "{service:?} is SERVING");
    }
}
