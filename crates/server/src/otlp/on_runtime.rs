//! An exporter with a Tokio runtime of its own. The SDK's batch processor
//! calls `export` on its own thread and drives the future with a plain
//! executor; the gRPC and HTTP clients need Tokio's reactor there, so the
//! call is run to completion on this runtime instead.

use std::fmt;
use std::time::Duration;

use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tokio::runtime::Runtime;

/// `inner`, run on `runtime`.
pub(super) struct OnRuntime<E> {
    inner: E,
    runtime: Runtime,
}

impl<E> fmt::Debug for OnRuntime<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OnRuntime")
    }
}

impl<E: SpanExporter> OnRuntime<E> {
    /// Builds the exporter inside its runtime (a gRPC channel binds to the
    /// runtime it is made in).
    pub(super) fn build<Err: fmt::Display>(
        make: impl FnOnce() -> Result<E, Err>,
    ) -> Result<Self, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tollgate-otlp")
            .enable_all()
            .build()
            .map_err(|error| format!("the trace exporter's runtime: {error}"))?;
        let inner = {
            let _entered = runtime.enter();
            make().map_err(|error| format!("the trace exporter: {error}"))?
        };
        Ok(Self { inner, runtime })
    }
}

impl<E: SpanExporter> SpanExporter for OnRuntime<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        let result = self.runtime.block_on(self.inner.export(batch));
        std::future::ready(result)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _entered = self.runtime.enter();
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        let _entered = self.runtime.enter();
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
