//! The layer answers in the inner service's own body type: a hyper
//! service's boxed bodies (`BoxBody`, `UnsyncBoxBody`) carry its
//! admissions as they were and its rejections as the problem+json, read
//! back through `http_body` as a client reads them.

mod support;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::{BoxBody, UnsyncBoxBody};
use http_body_util::{BodyExt, Full};
use support::{T0, memory_limiter, two_per_ten_seconds, writes_by_tenant};
use tollgate_core::ManualClock;
use tollgate_store::OnStoreFailure;
use tollgate_tower::{LayerBody, RateLimitLayer};
use tower::{Layer, Service, ServiceExt, service_fn};

fn order() -> Request<()> {
    Request::post("/orders")
        .header("X-Tenant", "acme")
        .body(())
        .expect("request")
}

/// Three orders through the layer around a service answering "placed" in
/// body type `B` (made by `body`): the statuses and the bodies' text.
async fn three_orders<B>(body: fn(&'static str) -> B) -> Vec<(StatusCode, String)>
where
    B: LayerBody + http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Debug,
{
    let limiter = memory_limiter(Arc::new(ManualClock::new(T0)));
    let plan = two_per_ten_seconds("orders", OnStoreFailure::FailClosed);
    let layer = RateLimitLayer::new(limiter, vec![writes_by_tenant(plan)]);
    let mut service = layer.layer(service_fn(move |_: Request<()>| async move {
        Ok::<_, Infallible>(Response::new(body("placed")))
    }));
    let mut answers = Vec::new();
    for _ in 0..3 {
        let ready = service.ready().await.expect("ready");
        let response = ready.call(order()).await.expect("answered");
        let status = response.status();
        let bytes = response.into_body().collect().await.expect("read");
        answers.push((
            status,
            String::from_utf8_lossy(&bytes.to_bytes()).into_owned(),
        ));
    }
    answers
}

const REJECTION: &str = "{\"detail\":\"rate limit exceeded for policy orders; retry after 10000 ms\",\"status\":429,\"title\":\"Too Many Requests\",\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\",\"violated-policies\":[\"orders\"]}";

fn expected() -> Vec<(StatusCode, String)> {
    vec![
        (StatusCode::OK, "placed".to_owned()),
        (StatusCode::OK, "placed".to_owned()),
        (StatusCode::TOO_MANY_REQUESTS, REJECTION.to_owned()),
    ]
}

#[tokio::test]
async fn a_service_answering_in_a_box_body_gets_its_rejections_in_one() {
    let answers = three_orders(|text| BoxBody::<Bytes, Infallible>::new(Full::from(text))).await;
    assert_eq!(answers, expected());
}

#[tokio::test]
async fn a_service_answering_in_an_unsync_box_body_gets_its_rejections_in_one() {
    let answers =
        three_orders(|text| UnsyncBoxBody::<Bytes, Infallible>::new(Full::from(text))).await;
    assert_eq!(answers, expected());
}

#[tokio::test]
async fn an_axum_service_gets_its_rejections_in_its_body() {
    let answers = three_orders(axum::body::Body::from).await;
    assert_eq!(answers, expected());
}
