//! The layer as a tower middleware: `poll_ready` is the inner service's,
//! a rejected request releases the readiness it reserved without calling
//! the inner service, and the layer and its service are `Clone + Send +
//! Sync` whatever decides.

mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{Request, Response};
use support::{T0, memory_limiter, writes_by_tenant};
use tollgate_core::{Limits, ManualClock, Policy, Rate};
use tollgate_limiter::{Limiter, Plan};
use tollgate_store::OnStoreFailure;
use tollgate_tower::{RateLimit, RateLimitLayer, RemoteTollgate};
use tower::limit::ConcurrencyLimit;
use tower::{Layer, Service, ServiceExt, service_fn};

fn shareable<T: Clone + Send + Sync + 'static>() {}

#[test]
fn the_layer_and_its_service_are_clone_send_and_sync() {
    shareable::<RateLimitLayer<Limiter>>();
    shareable::<RateLimitLayer<RemoteTollgate>>();
    shareable::<RateLimit<axum::Router, Limiter>>();
    shareable::<RateLimit<axum::Router, RemoteTollgate>>();
}

fn order(tenant: &str) -> Request<()> {
    Request::post("/orders")
        .header("X-Tenant", tenant)
        .body(())
        .expect("request")
}

#[tokio::test]
async fn a_rejected_request_releases_the_inner_readiness_without_calling_it() {
    let called = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&called);
    // One request at a time: readiness is a permit.
    let inner = ConcurrencyLimit::new(
        service_fn(move |_: Request<()>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(Response::new(String::from("ok"))) }
        }),
        1,
    );
    let rate = Rate::new(1, 1, 60_000).expect("valid rate");
    let plan = Plan::new(Policy::new("one", Limits::TokenBucket(rate)), 0)
        .with_failure_mode(OnStoreFailure::FailClosed);
    let limiter = memory_limiter(Arc::new(ManualClock::new(T0)));
    let mut service = RateLimitLayer::new(limiter, vec![writes_by_tenant(plan)]).layer(inner);

    let admitted = service
        .ready()
        .await
        .expect("ready")
        .call(order("acme"))
        .await;
    assert_eq!(admitted.expect("answer").status(), 200);
    let rejected = service
        .ready()
        .await
        .expect("ready")
        .call(order("acme"))
        .await;
    assert_eq!(rejected.expect("answer").status(), 429);
    assert_eq!(called.load(Ordering::SeqCst), 1);
    // The rejected request's permit went back with its answer.
    let ready = tokio::time::timeout(Duration::from_secs(1), service.ready()).await;
    assert!(
        ready.is_ok(),
        "the permit the rejection reserved was released"
    );

    // A reserved permit holds the next caller until the request is answered.
    let mut other = service.clone();
    let pending = service.call(order("globex"));
    let blocked = tokio::time::timeout(Duration::from_millis(50), other.ready()).await;
    assert!(
        blocked.is_err(),
        "the in-flight request holds the one permit"
    );
    assert_eq!(pending.await.expect("answer").status(), 200);
    let freed = tokio::time::timeout(Duration::from_secs(1), other.ready()).await;
    assert!(freed.is_ok());
}
