//! A door's span for one request: the parent of the limiter's
//! `tollgate.decide`, itself the child of the caller's trace when the
//! request carries a W3C `traceparent` (Envoy, a service, a proxy).

use hyper::http::HeaderMap;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::limiter::{SPANS, spans_on};

/// The span of one request at `door` (`check`, `authorize`, `rls`),
/// joined to the trace its headers carry. `Span::none()`, as every span of
/// [`SPANS`] is, unless traces are exported: then the headers are not read.
pub fn request_span(door: &'static str, headers: &HeaderMap) -> Span {
    if !spans_on() {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: SPANS,
        "tollgate.request",
        otel.kind = "server",
        door,
    );
    if !span.is_disabled() {
        let parent = TraceContextPropagator::new().extract(&Headers(headers));
        // A context without a remote span leaves the request a root.
        let _ = span.set_parent(parent);
    }
    span
}

/// Request headers as the propagator reads them.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|name| name.as_str()).collect()
    }
}
