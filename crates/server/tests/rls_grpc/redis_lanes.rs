//! On Redis, each worker decides through its own lane: one connection a
//! worker, shared by every gRPC connection dealt to it.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;

use crate::harness::*;

/// Connections to `redis` other than the one asking.
fn redis_clients(redis: &tollgate_testkit::RedisServer) -> usize {
    redis
        .cli(&["CLIENT", "LIST"])
        .expect("CLIENT LIST")
        .lines()
        .filter(|l| l.contains("cmd=") && !l.contains("cmd=client"))
        .count()
}

#[tokio::test]
async fn on_redis_each_worker_decides_through_its_own_lane() {
    let redis = tollgate_testkit::RedisServer::start().expect("redis-server starts");
    let file = "domain: lanes\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n";
    let config = format!(
        "server: {{watch_interval_ms: 0, http_workers: 2}}\nstore:\n  redis:\n    url: {}\nenvoy_ratelimit_configs: [d.yaml]\n",
        redis.url()
    );
    // The first connection (worker 0 of 2: connections are dealt in turn).
    let mut rls = Rls::start_files(&config, &[("d.yaml", file)]).await;
    let opened = redis_clients(&redis);
    let mut remaining = 1000;
    let mut ask = async |client: &mut RateLimitServiceClient<Channel>| {
        let r = client
            .should_rate_limit(request("lanes", vec![desc(&[("user", "u")])], 0))
            .await
            .expect("answered")
            .into_inner();
        remaining -= 1;
        assert_eq!(brief(&r.statuses[0]), (OK, 1000, HOUR, remaining));
    };
    // Worker 0's first decision opens its lane: one more connection, which
    // its next decisions share.
    for _ in 0..20 {
        ask(&mut rls.client).await;
    }
    assert_eq!(redis_clients(&redis), opened + 1);
    // A second connection goes to worker 1: its own lane.
    let mut second = RateLimitServiceClient::connect(rls.grpc.clone())
        .await
        .expect("connect");
    for _ in 0..20 {
        ask(&mut second).await;
    }
    assert_eq!(redis_clients(&redis), opened + 2);
    // A third goes to worker 0 again, and its lane.
    let mut third = RateLimitServiceClient::connect(rls.grpc.clone())
        .await
        .expect("connect");
    for _ in 0..20 {
        ask(&mut third).await;
        ask(&mut second).await;
    }
    assert_eq!(redis_clients(&redis), opened + 2);
    assert_eq!(remaining, 1000 - 80);
}
