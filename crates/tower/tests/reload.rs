//! `RateLimitLayer::reload`: new rules for every service made from the
//! layer from the next request on, while a request already under way
//! finishes on the rules it started with.

mod support;

use std::convert::Infallible;
use std::sync::Arc;

use http::{Request, Response};
use support::{T0, header, memory_limiter, serve_layered, writes_by_tenant};
use tokio::sync::{mpsc, oneshot};
use tollgate_core::{Limits, ManualClock, Policy, Rate};
use tollgate_limiter::Plan;
use tollgate_store::OnStoreFailure;
use tollgate_tower::{PermitBody, RateLimitLayer};
use tower::{Layer, ServiceExt, service_fn};

/// `name`: 2 a burst, 1 each 10 s.
fn writes(name: &str) -> Plan {
    let rate = Rate::new(2, 1, 10_000).expect("valid rate");
    Plan::new(Policy::new(name, Limits::TokenBucket(rate)), 0)
        .with_failure_mode(OnStoreFailure::FailClosed)
}

#[tokio::test]
async fn a_reload_reaches_every_service_made_from_the_layer() {
    let clock = Arc::new(ManualClock::new(T0));
    let layer = RateLimitLayer::new(memory_limiter(clock), vec![writes_by_tenant(writes("w"))]);
    // The app's router holds its own clone of the layer's service.
    let app = serve_layered(layer.clone()).await;
    let client = reqwest::Client::new();
    let order = || {
        client
            .post(app.url("/orders"))
            .header("X-Tenant", "acme")
            .send()
    };

    let first = order().await.expect("request");
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "ratelimit"), "\"w\";r=1;t=10");

    // The same policy, now at cost 2: acme's one token left admits the
    // next order under the old rules, not under the new.
    layer.reload(vec![writes_by_tenant(writes("w")).with_cost(|_| 2)]);
    let second = order().await.expect("request");
    assert_eq!(second.status(), 429);
    assert_eq!(header(&second, "ratelimit"), "\"w\";r=1;t=10");
    assert_eq!(header(&second, "retry-after"), "10");
    let body: serde_json::Value = second.json().await.expect("problem+json");
    assert_eq!(
        body["detail"],
        "rate limit exceeded for policy w; retry after 10000 ms"
    );

    // Back to the old rules: the token is still there.
    layer.reload(vec![writes_by_tenant(writes("w"))]);
    let third = order().await.expect("request");
    assert_eq!(third.status(), 200);
    assert_eq!(header(&third, "ratelimit"), "\"w\";r=0;t=20");
    assert_eq!(app.handled(), 2);

    // No rules: nothing is limited.
    layer.reload(Vec::new());
    let free = order().await.expect("request");
    assert_eq!(free.status(), 200);
    assert_eq!(header(&free, "ratelimit"), "");
    assert_eq!(app.handled(), 3);
}

#[tokio::test]
async fn a_request_under_way_finishes_on_the_rules_it_started_with() {
    let clock = Arc::new(ManualClock::new(T0));
    let layer = RateLimitLayer::new(memory_limiter(clock), vec![writes_by_tenant(writes("old"))]);
    // The handler says when it is entered and waits to be released.
    let (entered_tx, mut entered) = mpsc::unbounded_channel::<oneshot::Sender<()>>();
    let service = layer.layer(service_fn(move |_: Request<()>| {
        let entered_tx = entered_tx.clone();
        async move {
            let (release_tx, release) = oneshot::channel();
            let _ = entered_tx.send(release_tx);
            let _ = release.await;
            Ok::<_, Infallible>(Response::new(PermitBody::new(String::from("ok"))))
        }
    }));
    let order = || {
        Request::post("/orders")
            .header("X-Tenant", "acme")
            .body(())
            .expect("request")
    };

    let under_way = tokio::spawn(service.clone().oneshot(order()));
    let release = entered.recv().await.expect("the handler was entered");
    layer.reload(vec![writes_by_tenant(writes("new"))]);
    let _ = release.send(());
    let answer = under_way.await.expect("task").expect("answer");
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["ratelimit-policy"], "\"old\";q=2;w=20");

    let next = tokio::spawn(service.oneshot(order()));
    let release = entered.recv().await.expect("the handler was entered");
    let _ = release.send(());
    let answer = next.await.expect("task").expect("answer");
    assert_eq!(answer.headers()["ratelimit-policy"], "\"new\";q=2;w=20");
}
