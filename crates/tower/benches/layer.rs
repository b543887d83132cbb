//! The layer's overhead per request, in process (no sockets): the bare
//! axum app, the app behind tollgate's layer on the embedded store, and
//! the app behind `tower_governor`, in the same run. Each request names a
//! tenant (`X-Tenant`) and both limiters key by it, with limits no run
//! reaches, so every request is admitted and answered by the handler.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use criterion::{Criterion, criterion_group, criterion_main};
use http::Request;
use prometheus_client::registry::Registry;
use tollgate_core::{Clock, Identity, Limits, Policy, Rate, SystemClock};
use tollgate_limiter::{Backend, Limiter, LimiterMetrics, Plan};
use tollgate_store::OnStoreFailure;
use tollgate_tower::{RateLimitLayer, Rule};
use tower::ServiceExt;
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::KeyExtractor;

fn app() -> Router {
    Router::new().route("/items", get(|| async { "{\"items\":[]}" }))
}

fn request() -> Request<Body> {
    Request::get("/items")
        .header("x-tenant", "acme")
        .body(Body::empty())
        .unwrap_or_default()
}

fn tollgate_app() -> Router {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let mut registry = Registry::default();
    let metrics = Arc::new(LimiterMetrics::register(&mut registry, Arc::clone(&clock)));
    let limiter = Limiter::new(
        vec![Backend::memory(100_000, Arc::clone(&clock))],
        metrics,
        clock,
    );
    let rate = Rate::new(1_000_000_000, 1_000_000_000, 1_000).unwrap_or_else(|| unreachable!());
    let plan = Plan::new(Policy::new("reads", Limits::TokenBucket(rate)), 0)
        .with_failure_mode(OnStoreFailure::FailOpen);
    let rule = Rule::new(plan, |parts| {
        let tenant = parts.headers.get("x-tenant")?.to_str().ok()?;
        Identity::composite([("x-tenant", tenant)]).ok()
    });
    app().layer(RateLimitLayer::new(limiter, vec![rule]))
}

/// governor keyed as tollgate is: by the tenant header.
#[derive(Clone)]
struct Tenant;

impl KeyExtractor for Tenant {
    type Key = String;
    fn extract<T>(&self, req: &Request<T>) -> Result<String, tower_governor::GovernorError> {
        req.headers()
            .get("x-tenant")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or(tower_governor::GovernorError::UnableToExtractKey)
    }
}

fn governor_app() -> Router {
    let config = GovernorConfigBuilder::default()
        .key_extractor(Tenant)
        .per_nanosecond(1)
        .burst_size(u32::MAX)
        .finish()
        .unwrap_or_else(|| unreachable!());
    app().layer(GovernorLayer::new(config))
}

fn layer_overhead(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|_| unreachable!());
    let mut group = c.benchmark_group("layer");
    for (name, app) in [
        ("bare axum", app()),
        ("tollgate layer, memory store", tollgate_app()),
        ("tower_governor", governor_app()),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&rt).iter(|| {
                let app = app.clone();
                async move {
                    let answer = app.oneshot(request()).await;
                    assert!(answer.is_ok_and(|r| r.status() == 200));
                }
            });
        });
    }
    group.finish();
}

criterion_group!(benches, layer_overhead);
criterion_main!(benches);
