//! Where two features meet on the HTTP doors: a hot identity's block
//! against a refund and an operator's reset, a request id against shards.
//! In-process on a manual clock (memory store), through real HTTP.

mod support;

use serde_json::json;
use support::TestServer;

const POLICIES: &str = r#"
policies:
  - {name: hot, algorithm: token_bucket, capacity: 100, refill: {tokens: 1, per: 1h}, hot_lease: {above: 2, term: 10s}}
"#;

/// Requests of cost 1 for `acme` until one is rejected (at most 300):
/// how many were admitted.
async fn admitted_until_rejected(server: &TestServer, policy: &str) -> u64 {
    let body = format!(r#"{{"policy":"{policy}","key":"acme"}}"#);
    let mut admitted = 0;
    for _ in 0..300 {
        let (status, decision) = server.check(&body).await;
        assert_eq!(status, 200, "{decision}");
        if decision["allowed"] != true {
            break;
        }
        admitted += 1;
    }
    admitted
}

/// Five requests at one instant: the third is hot (above 2 a second) and
/// takes a block, the fourth and fifth spend from it.
async fn spend_five_from_a_block(server: &TestServer) {
    for left in (95..100).rev() {
        let (_, decision) = server.check(r#"{"policy":"hot","key":"acme"}"#).await;
        assert_eq!(decision["remaining"], left, "{decision}");
    }
    let metrics = server.text("/metrics").await;
    assert_eq!(
        support::metric(&metrics, "tollgate_hot_lease_blocks_total"),
        Some(1.0),
        "the third request took a block"
    );
}

/// docs/http-api.md, Refunds: a refund gets at most back to full and
/// cannot pass the limit. The block a hot identity holds was consumed
/// from the state; a refund that left it live would hand the state its
/// units back while the block still spends them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_ends_a_hot_identitys_block_so_it_never_passes_the_limit() {
    let server = TestServer::start(POLICIES).await;
    spend_five_from_a_block(&server).await;
    let (status, refund) = server
        .check(r#"{"policy":"hot","key":"acme","cost":100,"refund":true}"#)
        .await;
    assert_eq!(status, 200);
    // The block's unspent units went back as a return, so only the five
    // spent are refunded.
    assert_eq!(
        refund,
        json!({"allowed": true, "policy": "hot", "limit": 100, "remaining": 100, "retry_after_ms": 0, "reset_after_ms": 0, "refunded": 5})
    );
    assert_eq!(admitted_until_rejected(&server, "hot").await, 100);
    server.stop().await;
}

/// docs/http-api.md, `DELETE /v1/state`: a reset identity starts afresh
/// as a new identity does — with its limit, not its limit plus the block
/// it held before the reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_ends_a_hot_identitys_block_so_it_starts_as_a_new_identity() {
    let server = TestServer::start(POLICIES).await;
    spend_five_from_a_block(&server).await;
    let reset = server
        .client
        .delete(server.url("/v1/state?policy=hot&key=acme"))
        .send()
        .await
        .expect("request");
    assert_eq!(reset.status(), 200);
    assert_eq!(
        reset.json::<serde_json::Value>().await.expect("json"),
        json!({"policy": "hot", "reset": true, "had_state": true})
    );
    assert_eq!(admitted_until_rejected(&server, "hot").await, 100);
    server.stop().await;
}
