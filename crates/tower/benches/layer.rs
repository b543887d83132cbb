//! The layer's overhead per request, in process (no sockets): the bare
//! axum app, the app behind tollgate's layer on the embedded store, and
//! the app behind `tower_governor` (without and with its own headers on
//! an admission), in the same run. Each request names a
//! tenant (`X-Tenant`) and both limiters key by it, with limits no run
//! reaches, so every request is admitted and answered by the handler.

#[path = "apps/mod.rs"]
mod apps;

use apps::{app, governor_app, governor_headers_app, tollgate_app, tollgate_gcra_app};
use axum::body::Body;
use criterion::{Criterion, criterion_group, criterion_main};
use http::Request;
use tower::ServiceExt;

fn request() -> Request<Body> {
    Request::get("/items")
        .header("x-tenant", "acme")
        .body(Body::empty())
        .unwrap_or_default()
}

fn layer_overhead(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|_| unreachable!());
    let mut group = c.benchmark_group("layer");
    for (name, app) in [
        ("bare axum", app()),
        ("tollgate layer, memory store", tollgate_app(100_000)),
        (
            "tollgate layer, memory store, gcra",
            tollgate_gcra_app(100_000),
        ),
        ("tower_governor", governor_app()),
        ("tower_governor, its headers on", governor_headers_app()),
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
