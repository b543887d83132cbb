//! An OTLP collector inside the test: what `tollgate serve` (and a real
//! Envoy) exports, over gRPC (the collector's `TraceService`) or HTTP
//! (`POST /v1/traces`, protobuf), kept as it arrived. Shared by the trace
//! tests (`#[path = "../support/otlp_receiver.rs"]`).
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use prost::Message;
use std::collections::BTreeMap;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

/// `SPAN_KIND_INTERNAL` in OTLP's numbering.
pub const INTERNAL: i32 = 1;
/// `SPAN_KIND_SERVER` in OTLP's numbering.
pub const SERVER: i32 = 2;
/// `SPAN_KIND_CLIENT` in OTLP's numbering.
pub const CLIENT: i32 = 3;

/// How long [`Collector::wait_for`] waits for what a test expects.
const DEADLINE: Duration = Duration::from_secs(20);

/// Export requests as they arrived.
#[derive(Clone, Default)]
struct Inbox(Arc<Mutex<Vec<ExportTraceServiceRequest>>>);

#[tonic::async_trait]
impl TraceService for Inbox {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.lock().expect("inbox").push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// A running collector.
pub struct Collector {
    endpoint: String,
    inbox: Inbox,
}

impl Collector {
    /// A gRPC collector on a free loopback port.
    pub async fn grpc() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
        let inbox = Inbox::default();
        let service = TraceServiceServer::new(inbox.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        Self { endpoint, inbox }
    }

    /// An HTTP collector (`POST /v1/traces`, protobuf) on a free loopback
    /// port; its endpoint is the base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it.
    pub async fn http() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
        let inbox = Inbox::default();
        let kept = inbox.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    let request =
                        ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf body");
                    kept.0.lock().expect("inbox").push(request);
                    (
                        [("content-type", "application/x-protobuf")],
                        ExportTraceServiceResponse {
                            partial_success: None,
                        }
                        .encode_to_vec(),
                    )
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { endpoint, inbox }
    }

    /// Where to export to.
    pub fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    /// Everything received so far.
    pub fn received(&self) -> Received {
        Received(self.inbox.0.lock().expect("inbox").clone())
    }

    /// What was received once `done` holds of its spans, polled until a
    /// deadline (exporters send in batches, when they choose); past it the
    /// test fails, naming `what` it waited for and showing what came.
    pub async fn wait_for(&self, what: &str, done: impl Fn(&[Span]) -> bool) -> Received {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let received = self.received();
            let spans = received.spans();
            if done(&spans) {
                return received;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not received within {DEADLINE:?}; received {spans:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The one span of `spans` named `name` with `attribute` = `value`.
pub fn one<'a>(spans: &'a [Span], name: &str, attribute: &str, value: &str) -> &'a Span {
    let found: Vec<&Span> = spans
        .iter()
        .filter(|s| {
            s.name == name && s.attributes.get(attribute).map(String::as_str) == Some(value)
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {name} with {attribute}={value} in {spans:#?}"
    );
    found[0]
}

/// `pairs` as a span's attributes, to compare with [`Span::attributes`].
pub fn attributes(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// What a collector received.
pub struct Received(Vec<ExportTraceServiceRequest>);

/// A span as the tests read it: ids in hex, attributes as text.
#[derive(Debug)]
pub struct Span {
    /// The `service.name` of the resource it came under.
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// The parent's span id, empty for a root.
    pub parent: String,
    pub kind: i32,
    pub attributes: BTreeMap<String, String>,
}

impl Received {
    /// Each export's `service.name`, deduplicated, in order.
    pub fn service_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for resource in self.0.iter().flat_map(|r| &r.resource_spans) {
            let attributes = resource
                .resource
                .as_ref()
                .map(|r| text_of(&r.attributes))
                .unwrap_or_default();
            if let Some(name) = attributes.get("service.name")
                && !names.contains(name)
            {
                names.push(name.clone());
            }
        }
        names
    }

    /// Every span received.
    pub fn spans(&self) -> Vec<Span> {
        let mut spans = Vec::new();
        for resource in self.0.iter().flat_map(|r| &r.resource_spans) {
            let service = resource
                .resource
                .as_ref()
                .map(|r| text_of(&r.attributes))
                .unwrap_or_default()
                .remove("service.name")
                .unwrap_or_default();
            for span in resource.scope_spans.iter().flat_map(|s| &s.spans) {
                spans.push(Span {
                    service: service.clone(),
                    name: span.name.clone(),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent: hex(&span.parent_span_id),
                    kind: span.kind,
                    attributes: text_of(&span.attributes)
                        .into_iter()
                        // What the tracing bridge adds of its own (source
                        // locations, thread ids) is not tollgate's to state.
                        .filter(|(k, _)| !k.starts_with("code.") && !k.starts_with("thread."))
                        .filter(|(k, _)| {
                            k != "busy_ns" && k != "idle_ns" && k != "target" && k != "level"
                        })
                        .collect(),
                });
            }
        }
        spans
    }

    /// Every byte of every export as debug text, to search for what must
    /// never be exported.
    pub fn raw(&self) -> String {
        format!("{:?}", self.0)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text_of(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v: &AnyValue| v.value.as_ref()) {
                Some(Value::StringValue(s)) => s.clone(),
                Some(Value::IntValue(i)) => i.to_string(),
                Some(Value::BoolValue(b)) => b.to_string(),
                Some(Value::DoubleValue(d)) => d.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}
