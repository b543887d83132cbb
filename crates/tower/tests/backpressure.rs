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
use tollgate_tower::{PermitBody, RateLimit, RateLimitLayer, RemoteTollgate};
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

/// An inner service answering 200 "ok" to one request at a time (its
/// readiness is a permit), and how many times it was called. Its body is a
/// `String` of its own, wrapped so it can carry permits.
fn one_at_a_time() -> (
    impl Service<
        Request<()>,
        Response = Response<PermitBody<String>>,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + 'static,
    Arc<AtomicUsize>,
) {
    let called = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&called);
    let inner = ConcurrencyLimit::new(
        service_fn(move |_: Request<()>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(Response::new(PermitBody::new(String::from("ok")))) }
        }),
        1,
    );
    (inner, called)
}

#[tokio::test]
async fn a_rejected_request_releases_the_inner_readiness_without_calling_it() {
    let (inner, called) = one_at_a_time();
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
    // The rejected request's permit went back with its answer: another
    // clone gets it.
    let mut spare = service.clone();
    let ready = tokio::time::timeout(Duration::from_secs(1), spare.ready()).await;
    assert!(
        ready.is_ok(),
        "the permit the rejection reserved was released"
    );
    drop(spare);

    // A reserved permit holds the next caller until the request is answered.
    let mut other = service.clone();
    let pending = service.ready().await.expect("ready").call(order("globex"));
    let blocked = tokio::time::timeout(Duration::from_millis(50), other.ready()).await;
    assert!(
        blocked.is_err(),
        "the in-flight request holds the one permit"
    );
    assert_eq!(pending.await.expect("answer").status(), 200);
    let freed = tokio::time::timeout(Duration::from_secs(1), other.ready()).await;
    assert!(freed.is_ok());
}

/// A request a rule refuses (a problem, here a 400 for a bad cost) is
/// answered by the layer and releases the readiness it reserved; a
/// request no rule matches, and an admitted one, call the inner service
/// with the readiness `poll_ready` reserved (no clone of it is made).
#[tokio::test]
async fn a_refused_request_releases_the_inner_readiness_and_the_others_use_it() {
    let (inner, called) = one_at_a_time();
    let rate = Rate::new(10, 10, 60_000).expect("valid rate");
    let plan = Plan::new(Policy::new("orders", Limits::TokenBucket(rate)), 0)
        .with_failure_mode(OnStoreFailure::FailClosed);
    // POSTs are checked by tenant; one with `X-Cost: bad` is refused.
    let rule = tollgate_tower::Rule::judged(plan, |parts| {
        if parts.method != http::Method::POST {
            return Ok(None);
        }
        if parts.headers.contains_key("x-cost") {
            return Err(tollgate_http::Problem::bad_request("X-Cost: not a cost"));
        }
        Ok(Some((tollgate_core::Identity::value("acme"), 1)))
    });
    let limiter = memory_limiter(Arc::new(ManualClock::new(T0)));
    let mut service = RateLimitLayer::new(limiter, vec![rule]).layer(inner);

    let bad = Request::post("/orders")
        .header("X-Cost", "bad")
        .body(())
        .expect("request");
    let refused = service.ready().await.expect("ready").call(bad).await;
    assert_eq!(refused.expect("answer").status(), 400);
    assert_eq!(called.load(Ordering::SeqCst), 0);
    // Another clone gets the one permit: the refusal gave it back.
    let mut other = service.clone();
    let freed = tokio::time::timeout(Duration::from_secs(1), other.ready()).await;
    assert!(freed.is_ok(), "the refused request released its permit");
    drop(other);
    for (request, status, calls) in [
        (Request::get("/items").body(()).expect("request"), 200, 1),
        (order("acme"), 200, 2),
    ] {
        // Ready at once: the refusal's permit went back, and each answer
        // gave its own back before the next request.
        let ready = tokio::time::timeout(Duration::from_secs(1), service.ready()).await;
        let answer = ready
            .expect("the permit was released")
            .expect("ready")
            .call(request)
            .await;
        assert_eq!(answer.expect("answer").status(), status);
        assert_eq!(called.load(Ordering::SeqCst), calls);
    }
    // An admitted request holds the one permit until it is answered.
    let mut other = service.clone();
    let pending = service.ready().await.expect("ready").call(order("acme"));
    let blocked = tokio::time::timeout(Duration::from_millis(50), other.ready()).await;
    assert!(blocked.is_err(), "the admitted request holds the permit");
    assert_eq!(pending.await.expect("answer").status(), 200);
    assert!(
        tokio::time::timeout(Duration::from_secs(1), other.ready())
            .await
            .is_ok()
    );
}
