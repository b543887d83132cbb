//! A store failure answers UNAVAILABLE, as envoyproxy/ratelimit does,
//! unless the limit declares a failure mode.

use crate::harness::*;
use crate::support::metric;

#[tokio::test]
async fn a_store_failure_answers_unavailable_unless_a_failure_mode_is_declared() {
    let mut redis = tollgate_testkit::RedisServer::start().expect("redis-server starts");
    let file = "domain: d
descriptors:
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 5}
    tollgate: {on_store_failure: fail_closed}
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 5}
    tollgate: {on_store_failure: fail_open}
";
    let config = format!(
        "server: {{watch_interval_ms: 0}}\nstore:\n  redis:\n    url: {}\n    timeout: 2s\nenvoy_ratelimit_configs: [d.yaml]\n",
        redis.url()
    );
    let mut rls = Rls::start_files(&config, &[("d.yaml", file)]).await;
    let r = rls.ask("d", vec![desc(&[("plain", "k")])]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 5, HOUR, 4));
    let r = rls.ask("d", vec![desc(&[("closed", "k")])]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 5, HOUR, 4));
    redis.kill().expect("kill redis");
    // As envoyproxy/ratelimit: an error, so Envoy's failure_mode_deny decides.
    let status = rls
        .send(request("d", vec![desc(&[("plain", "k")])], 0))
        .await
        .expect_err("store down");
    assert_eq!(status.code(), tonic::Code::Unavailable);
    // tollgate's words; the store's own (addresses, replies) stay in the log.
    assert!(
        status
            .message()
            .starts_with("the rate limit store is unavailable"),
        "{}",
        status.message()
    );
    assert!(
        !status.message().contains("127.0.0.1"),
        "{}",
        status.message()
    );
    let r = rls.ask("d", vec![desc(&[("closed", "k")])]).await;
    assert_eq!(r.overall_code, OVER);
    let r = rls.ask("d", vec![desc(&[("open", "k")])]).await;
    assert_eq!(r.overall_code, OK);
    // One limit without a declared mode makes the whole answer an error.
    let status = rls
        .send(request(
            "d",
            vec![desc(&[("open", "k")]), desc(&[("plain", "k")])],
            0,
        ))
        .await
        .expect_err("store down");
    assert_eq!(status.code(), tonic::Code::Unavailable);
    // A declared fail_closed wins over the error.
    let r = rls
        .ask("d", vec![desc(&[("plain", "k")]), desc(&[("closed", "k")])])
        .await;
    assert_eq!(r.overall_code, OVER);
    let m = rls.metrics();
    assert_eq!(
        metric(&m, "tollgate_rls_requests_total{code=\"unavailable\"}"),
        Some(2.0)
    );
}
