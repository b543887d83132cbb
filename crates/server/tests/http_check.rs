//! `POST /v1/check` over real loopback HTTP, on a manual clock.

mod support;

use serde_json::json;
use support::TestServer;

const POLICIES: &str = r#"
policies:
  - name: write-api
    algorithm: token_bucket
    capacity: 20
    refill: { tokens: 5, per: 1s }
  - name: slow
    algorithm: token_bucket
    capacity: 5
    refill: { tokens: 1, per: 1h }
  - name: single
    algorithm: gcra
    capacity: 1
    refill: { tokens: 1, per: 1h }
  - name: window
    algorithm: fixed_window
    limit: 3
    window: 1s
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worked_example_holds_over_http() {
    let server = TestServer::start(POLICIES).await;
    server.clock.set(99_900);
    let (status, body) = server
        .check(r#"{"policy":"write-api","key":"acme","cost":17}"#)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"allowed": true, "policy": "write-api", "limit": 20, "remaining": 3, "retry_after_ms": 0, "reset_after_ms": 3400})
    );
    server.clock.set(100_000);
    let (_, body) = server
        .check(r#"{"policy":"write-api","key":"acme","cost":4}"#)
        .await;
    assert_eq!(
        body,
        json!({"allowed": false, "policy": "write-api", "limit": 20, "remaining": 3, "retry_after_ms": 100, "reset_after_ms": 3300})
    );
    server.clock.set(100_300);
    let (_, body) = server
        .check(r#"{"policy":"write-api","key":"acme","cost":4}"#)
        .await;
    assert_eq!(
        body,
        json!({"allowed": true, "policy": "write-api", "limit": 20, "remaining": 1, "retry_after_ms": 0, "reset_after_ms": 3800})
    );
    server.clock.set(100_500);
    let (_, body) = server
        .check(r#"{"policy":"write-api","key":"acme","cost":4}"#)
        .await;
    assert_eq!(
        body,
        json!({"allowed": false, "policy": "write-api", "limit": 20, "remaining": 2, "retry_after_ms": 400, "reset_after_ms": 3600})
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_defaults_to_one_and_composite_keys_are_their_own_bucket() {
    let server = TestServer::start(POLICIES).await;
    let (_, body) = server.check(r#"{"policy":"slow","key":"acme"}"#).await;
    assert_eq!(body["remaining"], 4);
    let (_, body) = server
        .check(r#"{"policy":"slow","key":{"tenant":"acme","route":"/orders"}}"#)
        .await;
    assert_eq!(
        body["remaining"], 4,
        "a composite key is a bucket of its own"
    );
    let (_, body) = server
        .check(r#"{"policy":"slow","key":{"route":"/orders","tenant":"acme"}}"#)
        .await;
    assert_eq!(
        body["remaining"], 3,
        "part order does not make a new identity"
    );
    let (_, body) = server
        .check(r#"{"policy":"slow","key":"acme","cost":0}"#)
        .await;
    assert_eq!(
        body,
        json!({"allowed": true, "policy": "slow", "limit": 5, "remaining": 4, "retry_after_ms": 0, "reset_after_ms": 3600000})
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_above_the_limit_is_rejected_with_no_retry() {
    let server = TestServer::start(POLICIES).await;
    let (status, body) = server
        .check(r#"{"policy":"slow","key":"k","cost":6}"#)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"allowed": false, "policy": "slow", "limit": 5, "remaining": 5, "retry_after_ms": null, "reset_after_ms": 0})
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_all_or_nothing() {
    let server = TestServer::start(POLICIES).await;
    let (_, first) = server.check(r#"{"policy":"single","key":"t"}"#).await;
    assert_eq!(first["allowed"], true);
    let (status, body) = server
        .check(r#"{"checks":[{"policy":"slow","key":"t","cost":3},{"policy":"single","key":"t"}]}"#)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"allowed": false, "decisions": [
            {"allowed": true, "policy": "slow", "limit": 5, "remaining": 5, "retry_after_ms": 0, "reset_after_ms": 0},
            {"allowed": false, "policy": "single", "limit": 1, "remaining": 0, "retry_after_ms": 3600000, "reset_after_ms": 3600000}
        ]})
    );
    // Nothing was consumed from "slow": all five tokens are still there.
    let (_, body) = server
        .check(r#"{"policy":"slow","key":"t","cost":5}"#)
        .await;
    assert_eq!(body["allowed"], true);
    assert_eq!(body["remaining"], 0);

    let (_, body) = server
        .check(r#"{"checks":[{"policy":"window","key":"w","cost":2},{"policy":"write-api","key":"w","cost":20}]}"#)
        .await;
    assert_eq!(body["allowed"], true);
    assert_eq!(body["decisions"][0]["remaining"], 1);
    assert_eq!(body["decisions"][1]["remaining"], 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_named_twice_in_a_batch_sees_its_own_consumption() {
    let server = TestServer::start(POLICIES).await;
    let (_, body) = server
        .check(r#"{"checks":[{"policy":"slow","key":"d","cost":3},{"policy":"slow","key":"d","cost":3}]}"#)
        .await;
    assert_eq!(body["allowed"], false);
    assert_eq!(body["decisions"][0]["allowed"], true);
    assert_eq!(body["decisions"][1]["allowed"], false);
    let (_, body) = server
        .check(r#"{"policy":"slow","key":"d","cost":0}"#)
        .await;
    assert_eq!(body["remaining"], 5, "the rejected batch consumed nothing");
    server.stop().await;
}

/// Each bad input gets its status and a problem+json that names the fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_a_named_fault_and_changes_nothing() {
    let server = TestServer::start(POLICIES).await;
    let long_key = "k".repeat(1100);
    let huge_body = format!(r#"{{"policy":"slow","key":"{}"}}"#, "x".repeat(70_000));
    let cases: Vec<(String, u16, String)> = vec![
        (r#"{"policy":"slow","key":"v""#.into(), 400, "malformed JSON: the body ends early, at line 1 column 26".into()),
        ("not json".into(), 400, "malformed JSON at line 1 column 2".into()),
        (r#"{"policy":"nope","key":"v"}"#.into(), 404, r#"unknown policy "nope""#.into()),
        (r#"{"policy":"slow","key":"v","cost":-1}"#.into(), 422, "cost must be a whole number ≥ 0, got -1".into()),
        (r#"{"policy":"slow","key":"v","cost":1.5}"#.into(), 422, "cost must be a whole number ≥ 0, got 1.5".into()),
        (r#"{"policy":"slow","key":"v","cost":"2"}"#.into(), 422, r#"cost must be a whole number ≥ 0, got "2""#.into()),
        (r#"{"policy":"slow","key":"v","costs":1}"#.into(), 422, r#"unknown field "costs" (expected: policy, key, cost, checks, request_id, refund)"#.into()),
        (r#"{"policy":"slow"}"#.into(), 422, "missing field `key`".into()),
        (r#"{"key":"v"}"#.into(), 422, "missing field `policy`".into()),
        (r#"{"policy":"slow","key":""}"#.into(), 422, "key must not be empty".into()),
        (r#"{"policy":"slow","key":{"a":"1","a":"2"}}"#.into(), 422, r#"key: identity part "a" appears twice"#.into()),
        (r#"{"policy":"slow","key":{"a":1}}"#.into(), 422, "key.a must be a string, got 1".into()),
        (r#"{"checks":[]}"#.into(), 422, "checks must not be empty".into()),
        ("[]".into(), 422, "the body must be a JSON object with policy and key, or checks, got a list".into()),
        ("null".into(), 422, "the body must be a JSON object with policy and key, or checks, got null".into()),
        (r#"{"policy":"slow","key":true}"#.into(), 422, "key must be a string or an object of string values, got true".into()),
        (r#"{"checks":[{"policy":"slow","key":"v"},{"policy":"slow","key":"v"},{"policy":"slow","key":{"a":1}}]}"#.into(), 422, "checks[2].key.a must be a string, got 1".into()),
        (r#"{"checks":[{"policy":"slow","key":"v","cost":"3"}]}"#.into(), 422, r#"checks[0].cost must be a whole number ≥ 0, got "3""#.into()),
        (r#"{"checks":[{"policy":"slow","key":"v","weight":1}]}"#.into(), 422, r#"unknown field "checks[0].weight" (expected: policy, key, cost)"#.into()),
        (r#"{"checks":[{"key":"v"}]}"#.into(), 422, "missing field `checks[0].policy`".into()),
        (r#"{"checks":"all"}"#.into(), 422, r#"checks must be a list of checks, got "all""#.into()),
        (r#"{"checks":[{"policy":"slow","key":"v"}],"policy":"slow"}"#.into(), 422, "give either checks or policy/key/cost, not both".into()),
        (r#"{"checks":[{"policy":"slow","key":"v"},{"policy":"gone","key":"v"}]}"#.into(), 404, r#"checks[1]: unknown policy "gone""#.into()),
        (format!(r#"{{"policy":"slow","key":"{long_key}"}}"#), 413, "key is longer than 1024 bytes".into()),
        (huge_body, 413, "request body is larger than 65536 bytes".into()),
    ];
    for (body, status, detail) in cases {
        let (got_status, got) = server.check(&body).await;
        assert_eq!(got_status, status, "status for {body:.80}");
        assert_eq!(got["detail"], detail, "detail for {body:.80}");
        assert_eq!(got["status"], status);
        assert!(got["title"].is_string());
        assert_eq!(got["type"], "about:blank");
    }
    let (_, body) = server
        .check(r#"{"policy":"slow","key":"v","cost":0}"#)
        .await;
    assert_eq!(body["remaining"], 5, "no refused request consumed anything");
    server.stop().await;
}

/// `request_id` is one of the body's fields like any other: a fault beside
/// it is named as itself (not as an unknown `request_id`), and the refused
/// request spends nothing and records no id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_beside_a_request_id_is_named_and_changes_nothing() {
    let server = TestServer::start(POLICIES).await;
    let (status, problem) = server
        .check(r#"{"request_id":"r1","policy":"p","key":"k","cost":-1}"#)
        .await;
    assert_eq!(status, 422);
    assert_eq!(
        problem,
        json!({"type": "about:blank", "title": "Unprocessable Content", "status": 422, "detail": "cost must be a whole number ≥ 0, got -1"})
    );
    for (body, detail) in [
        (
            r#"{"request_id":"r1","policy":"slow","key":"k","cost":-1}"#,
            "cost must be a whole number ≥ 0, got -1",
        ),
        (
            r#"{"request_id":7,"policy":"slow","key":"k"}"#,
            "request_id must be a string, got 7",
        ),
        (
            r#"{"request_id":"r1","checks":[{"policy":"slow","key":"k","cost":1.5}]}"#,
            "checks[0].cost must be a whole number ≥ 0, got 1.5",
        ),
        (
            r#"{"request_id":"r1","policy":"slow","key":"k","costs":null}"#,
            r#"unknown field "costs" (expected: policy, key, cost, checks, request_id, refund)"#,
        ),
    ] {
        let (status, problem) = server.check(body).await;
        assert_eq!(status, 422, "status for {body}");
        assert_eq!(problem["detail"], detail, "detail for {body}");
    }
    let (_, peek) = server
        .check(r#"{"policy":"slow","key":"k","cost":0}"#)
        .await;
    assert_eq!(peek["remaining"], 5, "no refused request consumed anything");
    // Nor was "r1" recorded: its first admitted use is charged, not replayed.
    let (status, first) = server
        .check(r#"{"request_id":"r1","policy":"slow","key":"k","cost":1}"#)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        first,
        json!({"allowed": true, "policy": "slow", "limit": 5, "remaining": 4, "retry_after_ms": 0, "reset_after_ms": 3_600_000})
    );
    server.stop().await;
}

/// An oversized body is read and thrown away before its 413: the client,
/// still sending, reads the answer instead of a reset, and the connection
/// serves the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_gets_its_413_and_the_connection_serves_the_next_request() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start(POLICIES).await;
    let mut stream = tokio::net::TcpStream::connect(server.base.trim_start_matches("http://"))
        .await
        .expect("connect");
    let request = |body: &str| {
        format!(
            "POST /v1/check HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let huge = format!(r#"{{"policy":"slow","key":"{}"}}"#, "x".repeat(70_000));
    stream
        .write_all(request(&huge).as_bytes())
        .await
        .expect("oversized request sent in full");
    stream
        .write_all(request(r#"{"policy":"slow","key":"v"}"#).as_bytes())
        .await
        .expect("second request sent");
    let mut got = Vec::new();
    let read_both = async {
        loop {
            let text = String::from_utf8_lossy(&got).into_owned();
            if text.matches("HTTP/1.1 ").count() == 2 && text.ends_with('}') {
                return;
            }
            let n = stream.read_buf(&mut got).await.expect("read");
            assert!(n > 0, "connection closed after: {text}");
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), read_both)
        .await
        .expect("both answers within 10 s");
    let text = String::from_utf8_lossy(&got);
    let (first, second) = text.split_at(text.rfind("HTTP/1.1 ").expect("second answer"));
    assert!(first.starts_with("HTTP/1.1 413 "), "{first}");
    assert!(
        first.ends_with(r#"{"detail":"request body is larger than 65536 bytes","status":413,"title":"Content Too Large","type":"about:blank"}"#),
        "{first}"
    );
    assert!(second.starts_with("HTTP/1.1 200 "), "{second}");
    assert!(
        second.ends_with(r#"{"allowed":true,"policy":"slow","limit":5,"remaining":4,"retry_after_ms":0,"reset_after_ms":3600000}"#),
        "{second}"
    );
    server.stop().await;
}

/// Bodies far over the limit (2 MB, 20 MB; declared or chunked) get their
/// 413, which the client reads after sending its whole body: the server
/// answers, half-closes and keeps reading and discarding (lingering close)
/// instead of closing on unread data, which would reset the connection and
/// could destroy the answer before the client reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_of_megabytes_gets_a_413_the_client_reads() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const TOO_LARGE: &str = r#"{"detail":"request body is larger than 65536 bytes","status":413,"title":"Content Too Large","type":"about:blank"}"#;
    let server = TestServer::start(POLICIES).await;
    for (size, chunked) in [(2_000_000, false), (20_000_000, false), (20_000_000, true)] {
        let mut stream = tokio::net::TcpStream::connect(server.base.trim_start_matches("http://"))
            .await
            .expect("connect");
        let framing = if chunked {
            "Transfer-Encoding: chunked".to_owned()
        } else {
            format!("Content-Length: {size}")
        };
        stream
            .write_all(
                format!("POST /v1/check HTTP/1.1\r\nHost: t\r\n{framing}\r\n\r\n").as_bytes(),
            )
            .await
            .expect("head sent");
        // The whole body goes out before a single byte is read: every write
        // must succeed, the answer waiting in the socket meanwhile.
        let block = vec![b'x'; 64 * 1024];
        let mut sent = 0;
        while sent < size {
            let n = block.len().min(size - sent);
            if chunked {
                stream
                    .write_all(format!("{n:x}\r\n").as_bytes())
                    .await
                    .expect("chunk size sent");
            }
            stream.write_all(&block[..n]).await.unwrap_or_else(|e| {
                panic!("{size} bytes (chunked: {chunked}): write failed after {sent}: {e}")
            });
            if chunked {
                stream.write_all(b"\r\n").await.expect("chunk end sent");
            }
            sent += n;
        }
        if chunked {
            stream
                .write_all(b"0\r\n\r\n")
                .await
                .expect("last chunk sent");
        }
        stream.shutdown().await.expect("half-close");
        let mut answer = Vec::new();
        stream
            .read_to_end(&mut answer)
            .await
            .unwrap_or_else(|e| panic!("{size} bytes (chunked: {chunked}): read failed: {e}"));
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 413 "), "{text}");
        assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
        assert!(text.ends_with(TOO_LARGE), "{text}");
    }
    // A real client sending 20 MB reads the same answer.
    let r = server
        .client
        .post(server.url("/v1/check"))
        .body(vec![b'x'; 20_000_000])
        .send()
        .await
        .expect("the 413 is read, not a reset");
    assert_eq!(r.status(), 413);
    assert_eq!(r.text().await.expect("body"), TOO_LARGE);
    server.stop().await;
}

/// A body that stalls gets a 408 once `server.request_timeout_ms` has
/// passed, instead of holding its connection open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_gets_a_408_after_the_request_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start(&format!(
        "server: {{ request_timeout_ms: 300 }}\n{POLICIES}"
    ))
    .await;
    let mut stream = tokio::net::TcpStream::connect(server.base.trim_start_matches("http://"))
        .await
        .expect("connect");
    stream
        .write_all(b"POST /v1/check HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"policy\":")
        .await
        .expect("send a part");
    let mut got = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut got),
    )
    .await
    .expect("answered and closed within 10 s")
    .expect("read");
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408 "), "{text}");
    assert!(
        text.ends_with(r#"{"detail":"the request body did not arrive within 300 ms","status":408,"title":"Request Timeout","type":"about:blank"}"#),
        "{text}"
    );
    let (status, body) = server
        .check(r#"{"policy":"slow","key":"v","cost":0}"#)
        .await;
    assert_eq!(
        (status, &body["remaining"]),
        (200, &json!(5)),
        "nothing consumed"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn problem_responses_carry_the_problem_media_type() {
    let server = TestServer::start(POLICIES).await;
    let r = server
        .client
        .post(server.url("/v1/check"))
        .body("{")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 400);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let r = server
        .client
        .get(server.url("/nowhere"))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 404);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let r = server
        .client
        .get(server.url("/v1/check"))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 405);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_retry_after_admits_and_one_ms_less_does_not() {
    let server = TestServer::start(POLICIES).await;
    server.clock.set(5_000_250);
    for _ in 0..3 {
        server.check(r#"{"policy":"window","key":"r"}"#).await;
    }
    let (_, body) = server.check(r#"{"policy":"window","key":"r"}"#).await;
    assert_eq!(body["allowed"], false);
    assert_eq!(body["retry_after_ms"], 750);
    server.clock.set(5_000_999);
    let (_, body) = server.check(r#"{"policy":"window","key":"r"}"#).await;
    assert_eq!(body["allowed"], false);
    server.clock.set(5_001_000);
    let (_, body) = server.check(r#"{"policy":"window","key":"r"}"#).await;
    assert_eq!(body["allowed"], true);
    server.stop().await;
}

/// `"refund": true` on `store` (YAML, or "" for memory): the refunded
/// units come back exactly, never past full.
async fn refunds_on(store: &str) {
    let server = TestServer::start(&format!("{store}{POLICIES}")).await;
    let spend = r#"{"policy":"slow","key":"acme","cost":3}"#;
    let (_, body) = server.check(spend).await;
    assert_eq!(body["remaining"], 2, "{body}");
    let (status, body) = server
        .check(r#"{"policy":"slow","key":"acme","cost":2,"refund":true}"#)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        (
            body["refunded"].clone(),
            body["remaining"].clone(),
            body["limit"].clone()
        ),
        (json!(2), json!(4), json!(5)),
        "{body}"
    );
    // 5 asked back, 1 fits: full, never more.
    let (_, body) = server
        .check(r#"{"policy":"slow","key":"acme","cost":5,"refund":true}"#)
        .await;
    assert_eq!(
        (body["refunded"].clone(), body["remaining"].clone()),
        (json!(1), json!(5)),
        "{body}"
    );
    // A key never charged gets nothing: it is full already.
    let (_, body) = server
        .check(r#"{"policy":"slow","key":"never","cost":5,"refund":true}"#)
        .await;
    assert_eq!(
        (body["refunded"].clone(), body["remaining"].clone()),
        (json!(0), json!(5)),
        "{body}"
    );
    // The whole limit again, and not one more.
    let (_, body) = server
        .check(r#"{"policy":"slow","key":"acme","cost":5}"#)
        .await;
    assert_eq!(
        (body["allowed"].clone(), body["remaining"].clone()),
        (json!(true), json!(0))
    );
    let (_, body) = server.check(r#"{"policy":"slow","key":"acme"}"#).await;
    assert_eq!(body["allowed"], false);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_gives_back_exactly_and_never_past_full_on_the_memory_store() {
    refunds_on("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_gives_back_exactly_and_never_past_full_on_redis() {
    let redis = tollgate_testkit::RedisServer::start().expect("redis-server starts");
    refunds_on(&format!("store:\n  redis:\n    url: {}\n", redis.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_is_refused_in_a_batch_or_not_a_flag() {
    let server = TestServer::start(POLICIES).await;
    for (body, detail) in [(
        r#"{"checks":[{"policy":"slow","key":"a"}],"refund":true}"#,
        "refund: give policy, key and cost (the units to give back) of one check, not checks",
    )] {
        let (status, problem) = server.check(body).await;
        assert_eq!(
            (status, problem["detail"].as_str()),
            (422, Some(detail)),
            "{problem}"
        );
    }
    let (status, problem) = server
        .check(r#"{"policy":"slow","key":"a","refund":"yes"}"#)
        .await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(
        problem["detail"],
        "refund must be true or false, got \"yes\""
    );
    server.stop().await;
}
