//! The tower layer's overhead, measured outside criterion: `GET /items`
//! answered by one handler, bare, behind tollgate's `RateLimitLayer`
//! (embedded memory store, `SystemClock`, one rule keyed by `X-Tenant`) or
//! behind `tower_governor` keyed by the same header, with limits no run
//! reaches (the app of `benches/layer.rs`).
//!
//! ```sh
//! # served for wrk (bench/layer.sh): prints `listening on http://ADDR`
//! layer_bench bare|tollgate|governor --listen 127.0.0.1:0
//! # N in-process calls and exit, for callgrind's instruction counts
//! layer_bench bare|tollgate|governor --calls 100000
//! ```

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
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

fn tollgate_app() -> Router {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let mut registry = Registry::default();
    let metrics = Arc::new(LimiterMetrics::register(&mut registry, Arc::clone(&clock)));
    let limiter = Limiter::new(
        vec![Backend::memory(1_000_000, Arc::clone(&clock))],
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

/// N in-process requests, one tenant, each answered 200.
async fn calls(app: Router, n: u64) -> Result<(), String> {
    for _ in 0..n {
        let request = Request::get("/items")
            .header("x-tenant", "acme")
            .body(Body::empty())
            .map_err(|e| e.to_string())?;
        let answer = app
            .clone()
            .oneshot(request)
            .await
            .map_err(|e| e.to_string())?;
        if answer.status() != 200 {
            return Err(format!("answered {}", answer.status()));
        }
    }
    Ok(())
}

async fn serve(app: Router, listen: SocketAddr) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("bind {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on http://{addr}");
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, service)
        .await
        .map_err(|e| e.to_string())
}

fn main() -> Result<(), String> {
    let given: Vec<String> = std::env::args().skip(1).collect();
    let [mode, flag, value] = given.as_slice() else {
        return Err("usage: layer_bench bare|tollgate|governor --listen ADDR | --calls N".into());
    };
    let app = match mode.as_str() {
        "bare" => app(),
        "tollgate" => tollgate_app(),
        "governor" => governor_app(),
        other => return Err(format!("unknown app {other}")),
    };
    match flag.as_str() {
        "--calls" => {
            let n = value.parse().map_err(|e| format!("--calls {value}: {e}"))?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(calls(app, n))
        }
        "--listen" => {
            let listen = value
                .parse()
                .map_err(|e| format!("--listen {value}: {e}"))?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(serve(app, listen))
        }
        other => Err(format!("unknown flag {other}")),
    }
}
