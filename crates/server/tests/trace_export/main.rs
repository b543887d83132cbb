//! Trace export over OTLP, received by a collector inside the test: a real
//! `tollgate serve`, configured only by the standard OpenTelemetry
//! environment, exports a span per request joined to the caller's W3C
//! `traceparent`, the limiter's decision under it and the store call under
//! that, with no identity anywhere. Over gRPC for `/v1/check` on a real
//! redis-server, and over HTTP (protobuf) for an RLS call. The spans are
//! read after a clean stop (SIGTERM), which flushes the export queue.

#[path = "../support/mod.rs"]
mod support;

#[path = "../support/otlp_receiver.rs"]
mod receiver;

use std::io::Write;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use receiver::{Collector, attributes, one};
use support::TollgateProcess;
use tollgate_testkit::RedisServer;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
/// The identity the test's requests carry: never to be exported.
const IDENTITY: &str = "tenant-acme-7f3a";

fn traceparent() -> String {
    format!("00-{TRACE_ID}-{CALLER_SPAN}-01")
}

/// A directory holding `files` (name, text); the config is the first.
fn write_files(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, text) in files {
        std::fs::File::create(dir.path().join(name))
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .expect("write a config file");
    }
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_is_traced_from_its_caller_through_the_decision_to_redis() {
    let collector = Collector::grpc().await;
    let redis = RedisServer::start().expect("redis-server");
    let dir = write_files(&[(
        "tollgate.yaml",
        &format!(
            "server: {{watch_interval_ms: 0}}\nregion: eu\nstores:\n  local: memory\n  regional: {{redis: {{url: \"{}\"}}}}\npolicies:\n  - name: api\n    algorithm: fixed_window\n    limit: 1\n    window: 1h\n    scope: region\n",
            redis.url()
        ),
    )]);
    let endpoint = collector.endpoint();
    let process = TollgateProcess::spawn(
        &dir.path().join("tollgate.yaml"),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_SERVICE_NAME", "tollgate-under-test"),
        ],
    );
    let client = reqwest::Client::new();
    let mut allowed = Vec::new();
    for request_id in ["first", "second"] {
        let response = client
            .post(format!("{}/v1/check", process.base))
            .header("traceparent", traceparent())
            .body(format!(
                r#"{{"policy":"api","key":"{IDENTITY}","cost":1,"request_id":"{request_id}"}}"#
            ))
            .send()
            .await
            .expect("check");
        assert_eq!(response.status(), 200);
        let body: serde_json::Value = response.json().await.expect("a decision");
        allowed.push(body["allowed"].clone());
    }
    assert_eq!(allowed, [true, false]);
    process.stop();

    let received = collector.received();
    assert_eq!(received.service_names(), ["tollgate-under-test"]);
    let spans = received.spans();
    assert_eq!(spans.len(), 6, "{spans:#?}");
    for (request_id, outcome) in [("first", "allowed"), ("second", "rejected")] {
        let decide = one(&spans, "tollgate.decide", "request_id", request_id);
        let request = spans
            .iter()
            .find(|s| s.span_id == decide.parent)
            .expect("the decision's parent");
        let store = spans
            .iter()
            .find(|s| s.parent == decide.span_id)
            .expect("the store call under the decision");
        for span in [request, decide, store] {
            assert_eq!(span.trace_id, TRACE_ID, "{span:#?}");
        }
        assert_eq!(request.name, "tollgate.request");
        assert_eq!(request.parent, CALLER_SPAN);
        assert_eq!(request.kind, receiver::SERVER);
        assert_eq!(request.attributes, attributes(&[("door", "check")]));
        assert_eq!(
            decide.attributes,
            attributes(&[
                ("checks", "1"),
                ("outcome", outcome),
                ("path", "shared"),
                ("policies", "api"),
                ("request_id", request_id),
            ])
        );
        assert_eq!(store.name, "tollgate.store");
        assert_eq!(
            store.attributes,
            attributes(&[("region", "eu"), ("store", "regional")])
        );
    }
    assert!(
        !received.raw().contains(IDENTITY),
        "an identity was exported: {spans:#?}"
    );
}

/// One hit of the test's identity, as Envoy sends it under `traceparent`.
fn rls_request(traceparent: &str) -> tonic::Request<RateLimitRequest> {
    let mut request = tonic::Request::new(RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "tenant".into(),
                value: IDENTITY.into(),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    });
    request
        .metadata_mut()
        .insert("traceparent", traceparent.parse().expect("metadata"));
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rls_call_over_http_protobuf_joins_envoys_trace() {
    let collector = Collector::http().await;
    let dir = write_files(&[
        (
            "tollgate.yaml",
            "server: {watch_interval_ms: 0}\nenvoy_ratelimit_configs: [edge.yaml]\npolicies:\n  - name: api\n    algorithm: fixed_window\n    limit: 5\n    window: 1h\n",
        ),
        (
            "edge.yaml",
            "domain: edge\ndescriptors:\n  - key: tenant\n    tollgate: {policy: api}\n",
        ),
    ]);
    let endpoint = collector.endpoint();
    let (process, grpc) = TollgateProcess::spawn_with_grpc(
        &dir.path().join("tollgate.yaml"),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_TRACES_SAMPLER", "parentbased_always_off"),
        ],
    );
    let mut rls = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .expect("connect to RLS");
    let answer = rls
        .should_rate_limit(rls_request(&traceparent()))
        .await
        .expect("ShouldRateLimit");
    assert_eq!(answer.into_inner().overall_code, Code::Ok as i32);
    // An unsampled caller: its trace is not kept, as the sampler says.
    let unsampled = format!("00-{}-{CALLER_SPAN}-00", "1".repeat(32));
    rls.should_rate_limit(rls_request(&unsampled))
        .await
        .expect("ShouldRateLimit");
    drop(rls);
    process.stop();

    let received = collector.received();
    assert_eq!(received.service_names(), ["tollgate"]);
    let spans = received.spans();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names.len(), 3, "{spans:#?}");
    let request = one(&spans, "tollgate.request", "door", "rls");
    assert_eq!(request.trace_id, TRACE_ID);
    assert_eq!(request.parent, CALLER_SPAN);
    let decide = one(&spans, "tollgate.decide", "outcome", "allowed");
    assert_eq!(decide.parent, request.span_id);
    assert_eq!(decide.attributes["path"], "shared");
    assert_eq!(decide.attributes["policies"], "api");
    let store = one(&spans, "tollgate.store", "store", "local");
    assert_eq!(store.parent, decide.span_id);
    assert!(!received.raw().contains(IDENTITY), "{spans:#?}");
}
