//! Where two features meet on the HTTP doors: a hot identity's block
//! against a refund and an operator's reset, a request id against shards.
//! In-process on a manual clock through real HTTP, on the memory store
//! and, where the store matters, on a real Redis and a Redis Cluster.

mod support;

use serde_json::json;
use support::TestServer;
use tollgate_testkit::{RedisCluster, RedisServer};

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

/// Four an hour over two shards of two.
const SHARDED: &str = r#"
policies:
  - {name: sharded, algorithm: fixed_window, limit: 4, window: 1h, shards: 2}
"#;

/// docs/request-ids.md: a retry inside the window is answered admitted
/// again and consumes nothing — on a sharded policy too, whose shards a
/// request takes in turn: the id, not the turn, picks the shard its record
/// is kept on, so the retry meets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_on_a_sharded_policy_is_replayed_not_charged_on_the_next_shard() {
    let server = TestServer::start(SHARDED).await;
    let attempt = r#"{"policy":"sharded","key":"acme","request_id":"order-1"}"#;
    let (status, first) = server.check(attempt).await;
    assert_eq!(status, 200);
    assert_eq!(
        first,
        json!({"allowed": true, "policy": "sharded", "limit": 2, "remaining": 1, "retry_after_ms": 0, "reset_after_ms": 2_800_000})
    );
    let (status, retry) = server.check(attempt).await;
    assert_eq!(status, 200);
    assert_eq!(
        retry,
        json!({"allowed": true, "policy": "sharded", "limit": 2, "remaining": 1, "retry_after_ms": 0, "reset_after_ms": 2_800_000, "replayed": true})
    );
    // Charged once: three of the four are left.
    assert_eq!(admitted_until_rejected(&server, "sharded").await, 3);
    server.stop().await;
}

/// The same when the first attempt spilled (its shard was spent, the next
/// one admitted it): the record stays where the id sends the retry first.
/// `order-2` goes first to shard 0, which three requests without an id
/// (shards 0, 1, 0 in turn) have spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_of_a_spilled_request_on_a_sharded_policy_is_replayed() {
    let server = TestServer::start(SHARDED).await;
    for _ in 0..3 {
        let (_, spent) = server.check(r#"{"policy":"sharded","key":"acme"}"#).await;
        assert_eq!(spent["allowed"], true, "{spent}");
    }
    let attempt = r#"{"policy":"sharded","key":"acme","request_id":"order-2"}"#;
    let (status, first) = server.check(attempt).await;
    assert_eq!(status, 200);
    assert_eq!(
        first,
        json!({"allowed": true, "policy": "sharded", "limit": 2, "remaining": 0, "retry_after_ms": 0, "reset_after_ms": 2_800_000})
    );
    let (status, retry) = server.check(attempt).await;
    assert_eq!(status, 200);
    assert_eq!(retry["replayed"], true, "{retry}");
    assert_eq!(retry["allowed"], true, "{retry}");
    assert_eq!(admitted_until_rejected(&server, "sharded").await, 0);
    // The id on another request is refused, wherever its shards stand.
    let (status, other) = server
        .check(r#"{"policy":"sharded","key":"acme","cost":2,"request_id":"order-2"}"#)
        .await;
    assert_eq!(status, 422, "{other}");
    server.stop().await;
}

/// The spilled retry on Redis, one server and a Cluster: the record's
/// shard and the spent one are two hash tags (two slots on a Cluster,
/// decided in two phases, the record's first), and the retry meets the
/// record all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_of_a_spilled_request_on_a_sharded_policy_is_replayed_on_redis() {
    let redis = RedisServer::start().expect("redis-server (install redis-server)");
    let cluster = RedisCluster::start(3).expect("a redis cluster (install redis-server)");
    let nodes: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    let stores = [
        format!(
            "store: {{redis: {{url: \"{}\", rejected_cache: 0}}}}",
            redis.url()
        ),
        format!(
            "store: {{redis: {{cluster: [{}], rejected_cache: 0}}}}",
            nodes.join(", ")
        ),
    ];
    for store in stores {
        let server = TestServer::start(&format!("{store}\n{SHARDED}")).await;
        for _ in 0..3 {
            let (_, spent) = server.check(r#"{"policy":"sharded","key":"acme"}"#).await;
            assert_eq!(spent["allowed"], true, "{store}: {spent}");
        }
        let attempt = r#"{"policy":"sharded","key":"acme","request_id":"order-2"}"#;
        let (_, first) = server.check(attempt).await;
        assert_eq!(
            (
                &first["allowed"],
                &first["remaining"],
                first.get("replayed")
            ),
            (&json!(true), &json!(0), None),
            "{store}: {first}"
        );
        let (_, retry) = server.check(attempt).await;
        assert_eq!(
            (&retry["allowed"], &retry["replayed"]),
            (&json!(true), &json!(true)),
            "{store}: {retry}"
        );
        assert_eq!(
            admitted_until_rejected(&server, "sharded").await,
            0,
            "{store}"
        );
        let (status, other) = server
            .check(r#"{"policy":"sharded","key":"acme","cost":2,"request_id":"order-2"}"#)
            .await;
        assert_eq!(status, 422, "{store}: {other}");
        server.stop().await;
    }
}

/// docs/request-ids.md: each replay counts in
/// `tollgate_replayed_decisions_total{policy}` and, as an admission, in
/// `tollgate_decisions_total{outcome="allowed"}` — for a policy in shadow
/// mode too, so admissions less replays are the fresh ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_on_a_shadow_policy_counts_as_replayed_as_well_as_allowed() {
    let server = TestServer::start(
        "policies:\n  - {name: trial, algorithm: fixed_window, limit: 5, window: 1h, mode: shadow}\n",
    )
    .await;
    let attempt = r#"{"policy":"trial","key":"acme","request_id":"job-9"}"#;
    let (_, first) = server.check(attempt).await;
    assert_eq!(
        first,
        json!({"allowed": true, "policy": "trial", "limit": 5, "remaining": 4, "retry_after_ms": 0, "reset_after_ms": 2_800_000, "shadow": true, "would_allow": true})
    );
    let (_, retry) = server.check(attempt).await;
    assert_eq!(
        retry,
        json!({"allowed": true, "policy": "trial", "limit": 5, "remaining": 4, "retry_after_ms": 0, "reset_after_ms": 2_800_000, "shadow": true, "would_allow": true, "replayed": true})
    );
    let metrics = server.text("/metrics").await;
    let series = |s: &str| support::metric(&metrics, s);
    assert_eq!(
        (
            series(r#"tollgate_decisions_total{policy="trial",outcome="allowed"}"#),
            series(r#"tollgate_decisions_total{policy="trial",outcome="shadow"}"#),
            series(r#"tollgate_replayed_decisions_total{policy="trial"}"#),
        ),
        (Some(2.0), Some(0.0), Some(1.0))
    );
    server.stop().await;
}

/// Two stores: `r` on this instance's memory (decided first), `g` on a
/// real Redis (decided after, and only peeked once `r` rejected).
fn two_stores(redis: &RedisServer) -> String {
    format!(
        r#"server: {{trusted_proxies: [127.0.0.1]}}
stores:
  local: memory
  global: {{redis: {{url: "{}", rejected_cache: 0}}}}
policies:
  - {{name: r, algorithm: fixed_window, limit: 1, window: 1s, scope: instance, identity: [{{header: X-Tenant}}]}}
  - {{name: g, algorithm: token_bucket, capacity: 1, refill: {{tokens: 1, per: 1h}}, scope: global, identity: [{{header: X-Tenant}}]}}
"#,
        redis.url()
    )
}

/// docs/http-api.md: in a batch each decision says what that check alone
/// would get, and forward auth's `Retry-After` is the longest wait among
/// the violated policies, never early. A request spanning stores whose
/// first store rejects only peeks at the later ones; a later check whose
/// cost no longer fits is still rejected, with a wait, and named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_store_that_cannot_admit_is_named_and_waited_for_after_an_earlier_one_rejects() {
    let redis = RedisServer::start().expect("redis-server (install redis-server)");
    let server = TestServer::start(&two_stores(&redis)).await;
    for policy in ["r", "g"] {
        let (_, spent) = server
            .check(&format!(
                r#"{{"policy":"{policy}","key":{{"x-tenant":"acme"}}}}"#
            ))
            .await;
        assert_eq!(spent["allowed"], true, "{spent}");
    }
    let denied = server
        .client
        .get(server.url("/v1/authorize"))
        .header("x-original-method", "GET")
        .header("x-original-uri", "/orders")
        .header("x-tenant", "acme")
        .send()
        .await
        .expect("request");
    assert_eq!(denied.status(), 429);
    let retry_after: u64 = denied.headers()["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    let problem: serde_json::Value = denied.json().await.expect("json");
    assert_eq!(problem["violated-policies"], json!(["r", "g"]), "{problem}");
    let (_, batch) = server
        .check(r#"{"checks":[{"policy":"r","key":{"x-tenant":"acme"}},{"policy":"g","key":{"x-tenant":"acme"}}]}"#)
        .await;
    assert_eq!(batch["allowed"], false, "{batch}");
    assert_eq!(batch["decisions"][1]["allowed"], false, "{batch}");
    let batch_wait = batch["decisions"][1]["retry_after_ms"]
        .as_u64()
        .expect("a wait");
    // g's own wait, asked after both: neither answer was early.
    let (_, alone) = server
        .check(r#"{"policy":"g","key":{"x-tenant":"acme"}}"#)
        .await;
    assert_eq!(alone["allowed"], false, "{alone}");
    let g_wait = alone["retry_after_ms"].as_u64().expect("a wait");
    assert!(
        batch_wait >= g_wait,
        "batch said {batch_wait} ms, g alone {g_wait} ms"
    );
    assert!(
        retry_after * 1000 >= g_wait,
        "Retry-After {retry_after} s, g alone {g_wait} ms"
    );
    // Each check's verdict is counted, on whichever store: g's in the
    // authorize and the batch as well as alone.
    let text = support::metrics_text(&server.client, &server.url("")).await;
    let counted = |policy: &str, outcome: &str| {
        support::metric(
            &text,
            &format!(r#"tollgate_decisions_total{{policy="{policy}",outcome="{outcome}"}}"#),
        )
    };
    assert_eq!(
        [
            counted("r", "allowed"),
            counted("r", "rejected"),
            counted("g", "allowed"),
            counted("g", "rejected"),
        ],
        [Some(1.0), Some(2.0), Some(1.0), Some(3.0)],
        "{text}"
    );
    server.stop().await;
}

/// A retried request's id, its refund, and the retry after it, on `store`
/// (a `store:` line, or none for memory): the refund names the id, which
/// forgets it, so the retry of the work is charged again — once — rather
/// than replayed for nothing (docs/http-api.md, Refunds).
async fn retry_after_refund_on(store: &str) {
    let server = TestServer::start(&format!(
        "{store}\npolicies:\n  - {{name: jobs, algorithm: fixed_window, limit: 3, window: 1h}}\n  - {{name: spread, algorithm: fixed_window, limit: 4, window: 1h, shards: 2}}\n"
    ))
    .await;
    for (policy, limit) in [("jobs", 3), ("spread", 2)] {
        let attempt = format!(r#"{{"policy":"{policy}","key":"acme","request_id":"job-1"}}"#);
        let (_, first) = server.check(&attempt).await;
        assert_eq!(
            (
                &first["allowed"],
                &first["remaining"],
                first.get("replayed")
            ),
            (&json!(true), &json!(limit - 1), None),
            "{store} {policy}: {first}"
        );
        let (status, refund) = server
            .check(&format!(
                r#"{{"policy":"{policy}","key":"acme","refund":true,"request_id":"job-1"}}"#
            ))
            .await;
        assert_eq!(status, 200, "{store} {policy}: {refund}");
        assert_eq!(refund["refunded"], 1, "{store} {policy}: {refund}");
        // The work is tried again under its id: charged, not replayed.
        let (_, again) = server.check(&attempt).await;
        assert_eq!(
            (
                &again["allowed"],
                &again["remaining"],
                again.get("replayed")
            ),
            (&json!(true), &json!(limit - 1), None),
            "{store} {policy}: {again}"
        );
        // And that attempt's own retry is replayed, as any.
        let (_, replay) = server.check(&attempt).await;
        assert_eq!(
            (&replay["remaining"], &replay["replayed"]),
            (&json!(limit - 1), &json!(true)),
            "{store} {policy}: {replay}"
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_under_a_request_id_makes_its_retry_charged_again_on_memory() {
    retry_after_refund_on("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_under_a_request_id_makes_its_retry_charged_again_on_redis() {
    let redis = RedisServer::start().expect("redis-server (install redis-server)");
    retry_after_refund_on(&format!(
        "store: {{redis: {{url: \"{}\", rejected_cache: 0}}}}",
        redis.url()
    ))
    .await;
}

/// Forward auth's `Idempotency-Key` on a sharded policy: the retry is
/// replayed (`Tollgate-Replayed: true`) and charged nothing, whichever
/// shard the round robin stands at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_auth_retry_on_a_sharded_policy_is_replayed() {
    let server = TestServer::start(
        "server: {trusted_proxies: [127.0.0.1], request_id_header: Idempotency-Key}\npolicies:\n  - {name: sharded, algorithm: fixed_window, limit: 4, window: 1h, shards: 2, client_request_ids: true, identity: [{header: X-Tenant}]}\n",
    )
    .await;
    let authorize = |key: Option<&'static str>| {
        let mut req = server
            .client
            .post(server.url("/v1/authorize"))
            .header("x-original-method", "POST")
            .header("x-original-uri", "/orders")
            .header("x-tenant", "acme");
        if let Some(key) = key {
            req = req.header("idempotency-key", key);
        }
        req.send()
    };
    let mut answers = Vec::new();
    for key in [Some("order-1"), Some("order-1"), None, None, None, None] {
        let answer = authorize(key).await.expect("request");
        answers.push((
            answer.status().as_u16(),
            answer
                .headers()
                .get("tollgate-replayed")
                .map(|v| v.to_str().expect("ascii").to_owned()),
        ));
    }
    // The attempt and its replay, then the three units left, then a 429.
    assert_eq!(
        answers,
        [
            (200, None),
            (200, Some("true".to_owned())),
            (200, None),
            (200, None),
            (200, None),
            (429, None),
        ]
    );
    server.stop().await;
}

/// docs/request-ids.md, Batches: a batch's id is recorded with its first
/// enforced check — a shadow policy in front (here one keeping no ids)
/// changes nothing about how its retries are charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_records_its_id_with_its_first_enforced_check_not_a_shadow_one() {
    let server = TestServer::start(
        "policies:\n  - {name: trial, algorithm: fixed_window, limit: 5, window: 1h, mode: shadow, retry_window: \"off\"}\n  - {name: api, algorithm: fixed_window, limit: 5, window: 1h}\n",
    )
    .await;
    let batch =
        r#"{"checks":[{"policy":"trial","key":"a"},{"policy":"api","key":"a"}],"request_id":"k1"}"#;
    let (_, first) = server.check(batch).await;
    assert_eq!(first.get("replayed"), None, "{first}");
    let (_, retry) = server.check(batch).await;
    assert_eq!(
        retry,
        json!({"allowed": true, "replayed": true, "decisions": [
            {"allowed": true, "policy": "trial", "limit": 5, "remaining": 4, "retry_after_ms": 0, "reset_after_ms": 2_800_000, "shadow": true, "would_allow": true, "replayed": true},
            {"allowed": true, "policy": "api", "limit": 5, "remaining": 4, "retry_after_ms": 0, "reset_after_ms": 2_800_000, "replayed": true}]})
    );
    // The record is api's: the same id on api alone is another request.
    let (status, _) = server
        .check(r#"{"policy":"api","key":"a","request_id":"k1"}"#)
        .await;
    assert_eq!(status, 422);
    server.stop().await;
}

/// docs/metrics.md: `tollgate_decision_duration_seconds` times the
/// limiter deciding a request; a refund is not a decision
/// (docs/http-api.md, Refunds), nor is an operator's look at one identity
/// (`GET /v1/state`): neither is counted there, as neither is in
/// `tollgate_decisions_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_and_a_state_look_are_not_timed_as_decisions() {
    let server = TestServer::start(
        "policies:\n  - {name: jobs, algorithm: fixed_window, limit: 3, window: 1h}\n",
    )
    .await;
    let (_, spent) = server
        .check(r#"{"policy":"jobs","key":"acme","cost":2}"#)
        .await;
    assert_eq!(spent["remaining"], 1, "{spent}");
    let (_, refund) = server
        .check(r#"{"policy":"jobs","key":"acme","refund":true}"#)
        .await;
    assert_eq!(refund["refunded"], 1, "{refund}");
    let state: serde_json::Value =
        serde_json::from_str(&server.text("/v1/state?policy=jobs&key=acme").await).expect("json");
    assert_eq!(state["remaining"], 2, "{state}");
    let metrics = server.text("/metrics").await;
    assert_eq!(
        (
            support::metric(&metrics, "tollgate_decision_duration_seconds_count"),
            support::metric(
                &metrics,
                r#"tollgate_decisions_total{policy="jobs",outcome="allowed"}"#
            ),
        ),
        (Some(1.0), Some(1.0))
    );
    server.stop().await;
}

/// The same request spanning stores with the later store down: its
/// `fail_open` check claims nothing is left and admits whatever the cost,
/// so it is not reported rejected; a `local` check is told from its local
/// budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_store_that_is_down_answers_by_its_failure_modes_after_an_earlier_one_rejects() {
    let redis = RedisServer::start().expect("redis-server (install redis-server)");
    let server = TestServer::start(&format!(
        r#"stores:
  local: memory
  global: {{redis: {{url: "{}", timeout: 200ms, rejected_cache: 0}}}}
policies:
  - {{name: r, algorithm: fixed_window, limit: 1, window: 1h, scope: instance}}
  - {{name: open, algorithm: fixed_window, limit: 10, window: 1h, scope: global, on_store_failure: fail_open}}
  - {{name: share, algorithm: fixed_window, limit: 100, window: 1h, scope: global, on_store_failure: local, local_share_percent: 10}}
"#,
        redis.url()
    ))
    .await;
    let (_, spent) = server.check(r#"{"policy":"r","key":"acme"}"#).await;
    assert_eq!(spent["allowed"], true, "{spent}");
    redis.pause().expect("SIGSTOP redis-server");
    let (_, batch) = server
        .check(r#"{"checks":[{"policy":"r","key":"acme"},{"policy":"open","key":"acme","cost":5},{"policy":"share","key":"acme","cost":11}]}"#)
        .await;
    redis.resume().expect("SIGCONT redis-server");
    assert_eq!(batch["allowed"], false, "{batch}");
    assert_eq!(batch["decisions"][0]["allowed"], false, "{batch}");
    // fail_open admits the cost; the local share (10 of 100) can never
    // take 11.
    assert_eq!(
        (
            &batch["decisions"][1]["allowed"],
            &batch["decisions"][2]["allowed"],
            &batch["decisions"][2]["limit"],
            &batch["decisions"][2]["retry_after_ms"],
            &batch["decisions"][2]["path"],
        ),
        (
            &json!(true),
            &json!(false),
            &json!(10),
            &json!(null),
            &json!("local")
        ),
        "{batch}"
    );
    server.stop().await;
}
