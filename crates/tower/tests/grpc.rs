//! The layer in front of a gRPC service, as tonic's server takes a layer
//! (feature `tonic`): the health service over real HTTP/2, its client
//! naming a tenant in the call's metadata. An admitted call carries the
//! RateLimit fields as metadata; a rejected one reaches the client as
//! `RESOURCE_EXHAUSTED` with the rejection's fields as metadata (not the
//! protocol error a problem+json body would be to it) and never reaches
//! the service.

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::{T0, memory_limiter, temp_dir, two_per_ten_seconds, write_config, writes_by_tenant};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tollgate_core::{Limits, ManualClock, Permits, Policy};
use tollgate_limiter::{Decider, Plan};
use tollgate_store::OnStoreFailure;
use tollgate_tower::{Configured, RateLimitLayer};
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tower::ServiceBuilder;

/// A health check from `tenant` (none: no `x-tenant` metadata).
fn check_from(tenant: Option<&str>) -> tonic::Request<HealthCheckRequest> {
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    });
    if let Some(tenant) = tenant {
        let value = tenant.parse().expect("a tenant is valid metadata");
        request.metadata_mut().insert("x-tenant", value);
    }
    request
}

/// The metadata value `name` of a response, as text ("" when absent).
fn field(metadata: &tonic::metadata::MetadataMap, name: &str) -> String {
    metadata
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The health service behind `layer` on a free port, each call that gets
/// past the layer counted in `reached`, and a client of it.
async fn serve_health<D: Decider>(
    layer: RateLimitLayer<D>,
    reached: Arc<AtomicUsize>,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
    let addr = listener.local_addr().expect("bound");
    let server = tonic::transport::Server::builder()
        .layer(ServiceBuilder::new().layer(layer).map_request(
            move |request: http::Request<tonic::body::Body>| {
                reached.fetch_add(1, Ordering::SeqCst);
                request
            },
        ))
        .add_service(health)
        .serve_with_incoming(TcpListenerStream::new(listener));
    let served = tokio::spawn(async move {
        server.await.expect("the gRPC server runs");
    });
    (addr, served)
}

/// A client of the health service at `addr`, calling from `from`.
async fn client(addr: SocketAddr, from: IpAddr) -> HealthClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("a valid address")
        .local_address(Some(from))
        .connect()
        .await
        .expect("the client connects");
    HealthClient::new(channel)
}

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

#[tokio::test]
async fn a_grpc_service_behind_the_layer_answers_its_client_by_the_contract() {
    let clock = Arc::new(ManualClock::new(T0));
    let layer = RateLimitLayer::new(
        memory_limiter(clock.clone()),
        vec![writes_by_tenant(two_per_ten_seconds(
            "grpc-api",
            OnStoreFailure::FailClosed,
        ))],
    );
    // Counts the calls that get past the layer to the service.
    let reached = Arc::new(AtomicUsize::new(0));
    let (addr, served) = serve_health(layer, Arc::clone(&reached)).await;
    let mut client = client(addr, LOOPBACK).await;

    for remaining in ["1", "0"] {
        let admitted = client
            .check(check_from(Some("acme")))
            .await
            .expect("admitted");
        assert_eq!(
            admitted.get_ref().status,
            ServingStatus::Serving as i32,
            "the service answered"
        );
        let metadata = admitted.metadata();
        assert_eq!(field(metadata, "ratelimit-policy"), "\"grpc-api\";q=2;w=20");
        assert_eq!(
            field(metadata, "ratelimit"),
            format!(
                "\"grpc-api\";r={remaining};t={}",
                if remaining == "1" { 10 } else { 20 }
            )
        );
    }

    let rejected = client
        .check(check_from(Some("acme")))
        .await
        .expect_err("the third call in 10 s is rejected");
    assert_eq!(rejected.code(), Code::ResourceExhausted, "{rejected:?}");
    assert_eq!(
        rejected.message(),
        "rate limit exceeded for policy grpc-api; retry after 10000 ms"
    );
    let metadata = rejected.metadata();
    assert_eq!(field(metadata, "retry-after"), "10");
    assert_eq!(field(metadata, "ratelimit-policy"), "\"grpc-api\";q=2;w=20");
    assert_eq!(field(metadata, "ratelimit"), "\"grpc-api\";r=0;t=20");
    assert_eq!(field(metadata, "cache-control"), "no-store");
    let problem: serde_json::Value =
        serde_json::from_str(&field(metadata, "tollgate-problem")).expect("the problem, as JSON");
    assert_eq!(
        problem,
        serde_json::json!({
            "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
            "title": "Too Many Requests",
            "status": 429,
            "detail": "rate limit exceeded for policy grpc-api; retry after 10000 ms",
            "violated-policies": ["grpc-api"],
        })
    );
    assert_eq!(
        reached.load(Ordering::SeqCst),
        2,
        "the rejected call never reached the service"
    );

    // Another tenant spends its own budget; a call naming none is not one
    // this rule limits, and passes untouched.
    let other = client.check(check_from(Some("globex"))).await;
    assert!(other.is_ok(), "{other:?}");
    let anonymous = client
        .check(check_from(None))
        .await
        .expect("no rule applies");
    assert_eq!(field(anonymous.metadata(), "ratelimit"), "");
    assert_eq!(reached.load(Ordering::SeqCst), 4);

    // acme's unit comes back on the clock.
    clock.advance(10_000);
    let again = client
        .check(check_from(Some("acme")))
        .await
        .expect("admitted again");
    assert_eq!(
        field(again.metadata(), "ratelimit"),
        "\"grpc-api\";r=0;t=20"
    );
    served.abort();
}

#[tokio::test]
async fn a_permit_held_by_a_grpc_answer_goes_back_when_the_answer_ends() {
    let clock = Arc::new(ManualClock::new(T0));
    // One call of a tenant at a time; a permit not given back holds for
    // its lease, a minute the manual clock never reaches.
    let permits = Permits::new(1, 60_000).expect("valid permits");
    let plan = Plan::new(
        Policy::new("one-at-a-time", Limits::Concurrency(permits)),
        0,
    )
    .with_failure_mode(OnStoreFailure::FailClosed);
    let layer = RateLimitLayer::new(memory_limiter(clock), vec![writes_by_tenant(plan)]);
    let reached = Arc::new(AtomicUsize::new(0));
    let (addr, served) = serve_health(layer, Arc::clone(&reached)).await;
    let mut client = client(addr, LOOPBACK).await;
    for call in 1..=5 {
        // The release is spawned when the answer's body ends, so the next
        // call may come before it lands: asked again until it does.
        let mut refused = 0;
        loop {
            match client.check(check_from(Some("acme"))).await {
                Ok(_) => break,
                Err(status) if status.code() == Code::ResourceExhausted && refused < 1_000 => {
                    refused += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(status) => panic!("call {call}: {status:?} after {refused} refusals"),
            }
        }
    }
    assert_eq!(reached.load(Ordering::SeqCst), 5);
    served.abort();
}

#[tokio::test]
async fn a_config_rule_on_the_client_address_reads_the_grpc_peer() {
    let dir = temp_dir();
    let path = write_config(
        &dir.0,
        "server: { trusted_proxies: [] }
policies:
  - name: calls
    algorithm: token_bucket
    capacity: 1
    refill: { tokens: 1, per: 1m }
    match: { methods: [POST] }
    identity: [client_ip]
    on_store_failure: fail_closed
",
    );
    let clock = Arc::new(ManualClock::new(T0));
    let configured = Configured::load(&path, clock)
        .await
        .expect("a valid config");
    let reached = Arc::new(AtomicUsize::new(0));
    let (addr, served) = serve_health(configured.layer(), Arc::clone(&reached)).await;
    // Two callers on two loopback addresses: each its own budget of one,
    // which it would share were tonic's peer not read (one unknown peer).
    let mut first = client(addr, LOOPBACK).await;
    let mut second = client(addr, IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))).await;
    let admitted = first.check(check_from(None)).await.expect("admitted");
    assert_eq!(
        field(admitted.metadata(), "ratelimit"),
        "\"calls\";r=0;t=60"
    );
    let refused = first.check(check_from(None)).await.expect_err("spent");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let other = second.check(check_from(None)).await;
    assert!(other.is_ok(), "127.0.0.2 has its own budget: {other:?}");
    assert_eq!(reached.load(Ordering::SeqCst), 2);
    served.abort();
    configured.stop().await;
}
