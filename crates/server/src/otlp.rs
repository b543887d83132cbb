//! Trace export over OTLP, off by default. When `server.otlp` or the
//! standard OpenTelemetry environment names an exporter, the limiter's
//! spans (`tollgate.decide`, `tollgate.store`) and each door's request span
//! (`tollgate.request`, a child of the caller's W3C `traceparent`) are
//! exported in batches; otherwise they are never made
//! ([`crate::limiter::set_spans`]) and a decision pays one atomic load.
//!
//! The SDK's batch processor exports from its own thread, where the gRPC
//! and HTTP clients find no Tokio runtime: the exporter is given one of its
//! own ([`on_runtime`]), one worker thread, kept apart from the workers
//! that serve decisions.

mod door;
mod on_runtime;
mod settings;

pub use door::request_span;
pub use settings::{Exporting, resolve};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

use crate::config::{Protocol, SamplerName};
use on_runtime::OnRuntime;

/// The longest one export may take before it is given up.
const EXPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The export while it runs: dropping it flushes what is queued and stops it.
pub struct Exporter {
    provider: SdkTracerProvider,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(%error, "trace export did not shut down cleanly");
        }
    }
}

/// Starts exporting as `exporting` says; returns the layer that turns
/// tollgate's spans into exported ones, and the export to keep alive.
pub fn install<S>(exporting: &Exporting) -> Result<(impl Layer<S> + use<S>, Exporter), String>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    let exporter = OnRuntime::build(|| match exporting.protocol {
        Protocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(exporting.endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build(),
        Protocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(exporting.endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build(),
    })?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(sampler(exporting.sampler, exporting.ratio))
        .with_resource(
            Resource::builder()
                .with_service_name(exporting.service_name.clone())
                .build(),
        )
        .build();
    let tracer = provider.tracer("tollgate");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_tracked_inactivity(false);
    crate::limiter::set_spans(true);
    Ok((layer, Exporter { provider }))
}

/// The SDK's sampler for the specification's name.
fn sampler(name: SamplerName, ratio: f64) -> Sampler {
    match name {
        SamplerName::AlwaysOn => Sampler::AlwaysOn,
        SamplerName::AlwaysOff => Sampler::AlwaysOff,
        SamplerName::TraceIdRatio => Sampler::TraceIdRatioBased(ratio),
        SamplerName::ParentBasedAlwaysOn => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
        SamplerName::ParentBasedAlwaysOff => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
        SamplerName::ParentBasedTraceIdRatio => {
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio)))
        }
    }
}
