//! Client request ids in the layer, as forward auth honours them: a retry
//! under the same id, method and path is charged once; the id on another
//! path is refused, not replayed; without the header, or with a rule that
//! does not honour ids, every request is charged; a malformed id is a 400.
//! Through a remote tollgate, the id goes in `/v1/check`'s `request_id`,
//! bound to the method and path.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::routing;
use http::HeaderName;
use support::{
    T0, Tollgate, header, memory_limiter, remote, two_per_ten_seconds, writes_by_tenant,
};
use tokio::net::TcpListener;
use tollgate_core::ManualClock;
use tollgate_limiter::{Decider, Plan};
use tollgate_store::OnStoreFailure;
use tollgate_tower::{RateLimitLayer, Rule};

/// 2 a burst, 1 each 10 s.
fn write_api() -> Plan {
    two_per_ten_seconds("write-api", OnStoreFailure::FailClosed)
}

/// [`write_api`] as the remote tollgate's config file says it.
const WRITE_API: &str = r#"
policies:
  - name: write-api
    algorithm: token_bucket
    capacity: 2
    refill: { tokens: 1, per: 10s }
    identity: [{ header: X-Tenant }]
"#;

/// `POST /orders` and `POST /reports` behind a layer reading
/// `Idempotency-Key`, limited by `rule` in process; its base URL and
/// handler count.
async fn serve(rule: Rule) -> (String, Arc<AtomicUsize>) {
    let limiter = memory_limiter(Arc::new(ManualClock::new(T0)));
    serve_with(limiter, rule).await
}

/// [`serve`], decided by `decider`.
async fn serve_with<D: Decider>(decider: D, rule: Rule) -> (String, Arc<AtomicUsize>) {
    let layer = RateLimitLayer::new(decider, vec![rule])
        .with_request_id_header(HeaderName::from_static("idempotency-key"));
    let handled = Arc::new(AtomicUsize::new(0));
    let (orders, reports) = (Arc::clone(&handled), Arc::clone(&handled));
    let app = Router::new()
        .route(
            "/orders",
            routing::post(move || async move {
                orders.fetch_add(1, Ordering::SeqCst);
                "{\"order\":\"placed\"}"
            }),
        )
        .route(
            "/reports",
            routing::post(move || async move {
                reports.fetch_add(1, Ordering::SeqCst);
                "{\"report\":\"queued\"}"
            }),
        )
        .layer(layer);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let service = app.into_make_service_with_connect_info::<SocketAddr>();
        let _ = axum::serve(listener, service).await;
    });
    (base, handled)
}

async fn post(base: &str, path: &str, id: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .header("X-Tenant", "acme");
    if let Some(id) = id {
        request = request.header("Idempotency-Key", id);
    }
    request.send().await.expect("request")
}

#[tokio::test]
async fn a_retry_under_the_same_id_is_charged_once() {
    let (base, handled) = serve(writes_by_tenant(write_api()).with_client_request_ids()).await;

    let first = post(&base, "/orders", Some("order-1")).await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "ratelimit"), "\"write-api\";r=1;t=10");
    assert_eq!(header(&first, "tollgate-replayed"), "");
    let retry = post(&base, "/orders", Some("order-1")).await;
    assert_eq!(retry.status(), 200);
    assert_eq!(header(&retry, "tollgate-replayed"), "true");
    assert_eq!(header(&retry, "ratelimit"), "\"write-api\";r=1;t=10");
    // One token was spent for both: a new order still has one.
    let second = post(&base, "/orders", Some("order-2")).await;
    assert_eq!(second.status(), 200);
    assert_eq!(header(&second, "ratelimit"), "\"write-api\";r=0;t=20");
    assert_eq!(header(&second, "tollgate-replayed"), "");
    assert_eq!(handled.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn the_same_id_on_another_path_is_refused_not_replayed() {
    let (base, handled) = serve(writes_by_tenant(write_api()).with_client_request_ids()).await;

    assert_eq!(post(&base, "/orders", Some("k")).await.status(), 200);
    let elsewhere = post(&base, "/reports", Some("k")).await;
    assert_eq!(elsewhere.status(), 422);
    assert_eq!(
        header(&elsewhere, "content-type"),
        "application/problem+json"
    );
    assert_eq!(header(&elsewhere, "tollgate-replayed"), "");
    let body: serde_json::Value = elsewhere.json().await.expect("problem+json");
    assert_eq!(
        body,
        serde_json::json!({
            "type": "about:blank",
            "title": "Unprocessable Content",
            "status": 422,
            "detail": "this request id was first admitted for a different request (other policies, identities, costs, or method and path): a retry must repeat its request, and a new request needs a new id",
        })
    );
    // Nothing was charged for it: one token is left.
    let next = post(&base, "/reports", Some("k2")).await;
    assert_eq!(header(&next, "ratelimit"), "\"write-api\";r=0;t=20");
    assert_eq!(handled.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn without_an_id_or_a_rule_that_honours_ids_every_request_is_charged() {
    let (base, _) = serve(writes_by_tenant(write_api()).with_client_request_ids()).await;
    assert_eq!(
        header(&post(&base, "/orders", None).await, "ratelimit"),
        "\"write-api\";r=1;t=10"
    );
    assert_eq!(
        header(&post(&base, "/orders", None).await, "ratelimit"),
        "\"write-api\";r=0;t=20"
    );
    assert_eq!(post(&base, "/orders", None).await.status(), 429);

    // The header is one like any other to a rule that does not honour ids.
    let (base, _) = serve(writes_by_tenant(write_api())).await;
    let first = post(&base, "/orders", Some("same")).await;
    assert_eq!(header(&first, "ratelimit"), "\"write-api\";r=1;t=10");
    let again = post(&base, "/orders", Some("same")).await;
    assert_eq!(header(&again, "ratelimit"), "\"write-api\";r=0;t=20");
    assert_eq!(header(&again, "tollgate-replayed"), "");
    assert_eq!(post(&base, "/orders", Some("same")).await.status(), 429);
}

#[tokio::test]
async fn a_malformed_id_is_a_400_and_charges_nothing() {
    let (base, handled) = serve(writes_by_tenant(write_api()).with_client_request_ids()).await;
    let long = "k".repeat(256);
    let refused = post(&base, "/orders", Some(&long)).await;
    assert_eq!(refused.status(), 400);
    assert_eq!(header(&refused, "content-type"), "application/problem+json");
    let body: serde_json::Value = refused.json().await.expect("problem+json");
    assert_eq!(
        body["detail"],
        "header idempotency-key: request id is 256 bytes long; at most 255 are allowed"
    );
    let twice = reqwest::Client::new()
        .post(format!("{base}/orders"))
        .header("X-Tenant", "acme")
        .header("Idempotency-Key", "a")
        .header("Idempotency-Key", "b")
        .send()
        .await
        .expect("request");
    assert_eq!(twice.status(), 400);
    let body: serde_json::Value = twice.json().await.expect("problem+json");
    assert_eq!(
        body["detail"],
        "header idempotency-key appears more than once: send it once"
    );
    let first = post(&base, "/orders", None).await;
    assert_eq!(header(&first, "ratelimit"), "\"write-api\";r=1;t=10");
    assert_eq!(handled.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn through_a_remote_tollgate_a_retry_is_charged_once_and_another_path_is_not_replayed() {
    let clock = Arc::new(ManualClock::new(T0));
    let server = Tollgate::start(WRITE_API, clock.clone(), "127.0.0.1:0").await;
    let remote = remote(&server.base, clock.clone());
    let (base, handled) = serve_with(
        remote,
        writes_by_tenant(write_api()).with_client_request_ids(),
    )
    .await;

    let first = post(&base, "/orders", Some("order-1")).await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "ratelimit"), "\"write-api\";r=1;t=10");
    let retry = post(&base, "/orders", Some("order-1")).await;
    assert_eq!(retry.status(), 200);
    assert_eq!(header(&retry, "tollgate-replayed"), "true");
    assert_eq!(header(&retry, "ratelimit"), "\"write-api\";r=1;t=10");
    // On another path the id is another request's: charged, not replayed.
    let elsewhere = post(&base, "/reports", Some("order-1")).await;
    assert_eq!(elsewhere.status(), 200);
    assert_eq!(header(&elsewhere, "tollgate-replayed"), "");
    assert_eq!(header(&elsewhere, "ratelimit"), "\"write-api\";r=0;t=20");
    let none_left = post(&base, "/orders", Some("order-2")).await;
    assert_eq!(none_left.status(), 429);
    assert_eq!(handled.load(Ordering::SeqCst), 3);
    server.stop().await;
}

#[tokio::test]
async fn through_a_remote_tollgate_an_id_sent_with_another_cost_is_the_same_422() {
    let clock = Arc::new(ManualClock::new(T0));
    let server = Tollgate::start(WRITE_API, clock.clone(), "127.0.0.1:0").await;
    let remote = remote(&server.base, clock.clone());
    let costed = writes_by_tenant(write_api())
        .with_client_request_ids()
        .with_cost(|parts| {
            let cost = parts.headers.get("x-cost").and_then(|v| v.to_str().ok());
            cost.and_then(|c| c.parse().ok()).unwrap_or(1)
        });
    let (base, handled) = serve_with(remote, costed).await;

    assert_eq!(post(&base, "/orders", Some("k")).await.status(), 200);
    // The same id, method and path with another cost is another request.
    let other = reqwest::Client::new()
        .post(format!("{base}/orders"))
        .header("X-Tenant", "acme")
        .header("Idempotency-Key", "k")
        .header("X-Cost", "2")
        .send()
        .await
        .expect("request");
    assert_eq!(other.status(), 422);
    assert_eq!(header(&other, "content-type"), "application/problem+json");
    let body: serde_json::Value = other.json().await.expect("problem+json");
    assert_eq!(
        body,
        serde_json::json!({
            "type": "about:blank",
            "title": "Unprocessable Content",
            "status": 422,
            "detail": "this request id was first admitted for a different request (other policies, identities, costs, or method and path): a retry must repeat its request, and a new request needs a new id",
        })
    );
    // Nothing was charged for it: one token is left.
    let next = post(&base, "/orders", Some("k2")).await;
    assert_eq!(header(&next, "ratelimit"), "\"write-api\";r=0;t=20");
    assert_eq!(handled.load(Ordering::SeqCst), 2);
    server.stop().await;
}
