//! The apps whose overhead is measured, shared by `benches/layer.rs`
//! (criterion) and `examples/layer_bench.rs` (callgrind, wrk): `GET
//! /items` answered by one handler, bare, behind tollgate's
//! `RateLimitLayer` (embedded memory store, `SystemClock`, one rule keyed
//! by `X-Tenant`, by a token bucket or by GCRA) or behind `tower_governor` keyed by the same header
//! (without and with its own headers on an admission), with limits no
//! run reaches.
//!
//! Each app is finished as `axum::serve` finishes it
//! (`into_make_service` calls `with_state(())`): its handler is made
//! into a route, and wrapped in its layer, once. A `Router` called as it
//! is built would make the route and apply the layer again on every
//! request, a cost no served app pays, and a larger one for a layer with
//! more to clone.

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use http::Request;
use prometheus_client::registry::Registry;
use tollgate_core::{Clock, Identity, Limits, Policy, Rate, SystemClock};
use tollgate_limiter::{Backend, Limiter, LimiterMetrics, Plan};
use tollgate_store::OnStoreFailure;
use tollgate_tower::{RateLimitLayer, Rule};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::KeyExtractor;

pub fn app() -> Router {
    served(handler())
}

/// The app's one route, as it is built.
fn handler() -> Router {
    Router::new().route("/items", get(|| async { "{\"items\":[]}" }))
}

/// `app` as `axum::serve` runs it: every handler a route, every layer
/// applied, once.
fn served(app: Router) -> Router {
    app.with_state(())
}

pub fn tollgate_app(max_keys: usize) -> Router {
    tollgate_app_deciding(max_keys, Limits::TokenBucket)
}

/// The same layer deciding by GCRA, governor's own algorithm: the like
/// for like of the two deciders.
pub fn tollgate_gcra_app(max_keys: usize) -> Router {
    tollgate_app_deciding(max_keys, Limits::Gcra)
}

/// The layer over one rule limited by `limits` at a rate no run reaches.
fn tollgate_app_deciding(max_keys: usize, limits: fn(Rate) -> Limits) -> Router {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let mut registry = Registry::default();
    let metrics = Arc::new(LimiterMetrics::register(&mut registry, Arc::clone(&clock)));
    let limiter = Limiter::new(
        vec![Backend::memory(max_keys, Arc::clone(&clock))],
        metrics,
        clock,
    );
    let rate = Rate::new(1_000_000_000, 1_000_000_000, 1_000).unwrap_or_else(|| unreachable!());
    let plan = Plan::new(Policy::new("reads", limits(rate)), 0)
        .with_failure_mode(OnStoreFailure::FailOpen);
    let rule = Rule::new(plan, |parts| {
        let tenant = parts.headers.get("x-tenant")?.to_str().ok()?;
        Identity::composite([("x-tenant", tenant)]).ok()
    });
    served(handler().layer(RateLimitLayer::new(limiter, vec![rule])))
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

pub fn governor_app() -> Router {
    let config = GovernorConfigBuilder::default()
        .key_extractor(Tenant)
        .per_nanosecond(1)
        .burst_size(u32::MAX)
        .finish()
        .unwrap_or_else(|| unreachable!());
    served(handler().layer(GovernorLayer::new(config)))
}

/// governor as above, writing its own fields on an admission
/// (`use_headers`: `x-ratelimit-limit` and `x-ratelimit-remaining`), as
/// tollgate writes `RateLimit-Policy` and `RateLimit`: like for like.
pub fn governor_headers_app() -> Router {
    let config = GovernorConfigBuilder::default()
        .key_extractor(Tenant)
        .per_nanosecond(1)
        .burst_size(u32::MAX)
        .use_headers()
        .finish()
        .unwrap_or_else(|| unreachable!());
    served(handler().layer(GovernorLayer::new(config)))
}
