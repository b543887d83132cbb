//! The `/v1/check` schemas are one contract for both ends: what a client
//! writes the server reads back as the same value, and the answer the
//! server writes keeps, byte for byte, the text it wrote by hand before.

use tollgate_core::Decision;
use tollgate_http::{
    BatchDecision, CheckBody, CheckDecision, CheckItem, CheckKey, parse_check_body,
};

fn decision(allowed: bool, remaining: i64, retry_after_ms: Option<u64>) -> Decision {
    Decision {
        allowed,
        limit: 5,
        remaining,
        retry_after_ms,
        reset_after_ms: 1_200,
        permit: None,
    }
}

#[test]
fn a_body_a_client_writes_is_the_body_the_server_reads() {
    let bodies = [
        CheckBody::one("write-api", CheckKey::value("acme"), 3),
        CheckBody::one(
            "per-route",
            CheckKey::parts([("tenant", "acme"), ("route", "/orders \"x\"")]),
            1,
        )
        .with_request_id("order-17"),
        CheckBody::one("write-api", CheckKey::value("acme"), 2).refund(),
        CheckBody::batch([
            CheckItem::new("write-api", CheckKey::value("acme"), 1),
            CheckItem::new("reads", CheckKey::parts([("ip", "10.0.0.1")]), 0),
        ]),
    ];
    for body in bodies {
        let text = serde_json::to_string(&body).expect("a body serializes");
        let read = parse_check_body(text.as_bytes()).expect("the server reads it");
        assert_eq!(read, body, "{text}");
    }
}

#[test]
fn a_body_is_written_with_only_the_fields_that_are_set() {
    let one = CheckBody::one("p", CheckKey::value("k"), 2).with_request_id("r1");
    assert_eq!(
        serde_json::to_string(&one).expect("serializes"),
        r#"{"policy":"p","key":"k","cost":2,"request_id":"r1"}"#
    );
    let batch = CheckBody::batch([CheckItem::new("p", CheckKey::parts([("a", "1")]), 1)]);
    assert_eq!(
        serde_json::to_string(&batch).expect("serializes"),
        r#"{"checks":[{"policy":"p","key":{"a":"1"},"cost":1}]}"#
    );
}

#[test]
fn a_decision_is_written_as_the_server_always_wrote_it_and_read_back() {
    let cases = [
        (
            CheckDecision::new("p", &decision(true, 4, Some(0)), None),
            r#"{"allowed":true,"policy":"p","limit":5,"remaining":4,"retry_after_ms":0,"reset_after_ms":1200}"#,
        ),
        (
            CheckDecision::new("p", &decision(false, -2, None), Some("fail_closed")),
            r#"{"allowed":false,"policy":"p","limit":5,"remaining":0,"retry_after_ms":null,"reset_after_ms":1200,"degraded":true,"path":"fail_closed"}"#,
        ),
        (
            CheckDecision::new("s", &decision(false, 0, Some(300)), None)
                .shadowed(false)
                .replayed(),
            r#"{"allowed":true,"policy":"s","limit":5,"remaining":0,"retry_after_ms":300,"reset_after_ms":1200,"shadow":true,"would_allow":false,"replayed":true}"#,
        ),
        (
            CheckDecision::new("p", &decision(true, 5, Some(0)), None).refunded(2),
            r#"{"allowed":true,"policy":"p","limit":5,"remaining":5,"retry_after_ms":0,"reset_after_ms":1200,"refunded":2}"#,
        ),
    ];
    for (answer, text) in cases {
        assert_eq!(serde_json::to_string(&answer).expect("serializes"), text);
        let read: CheckDecision<'_> = serde_json::from_str(text).expect("a client reads it");
        assert_eq!(read, answer, "{text}");
    }
}

#[test]
fn a_batch_answer_is_written_as_the_server_always_wrote_it_and_read_back() {
    let answer = BatchDecision {
        allowed: false,
        replayed: false,
        degraded: true,
        path: Some("local".into()),
        decisions: vec![CheckDecision::new(
            "p",
            &decision(false, 0, Some(250)),
            Some("local"),
        )],
    };
    let text = r#"{"allowed":false,"degraded":true,"path":"local","decisions":[{"allowed":false,"policy":"p","limit":5,"remaining":0,"retry_after_ms":250,"reset_after_ms":1200,"degraded":true,"path":"local"}]}"#;
    assert_eq!(serde_json::to_string(&answer).expect("serializes"), text);
    let read: BatchDecision<'static> = serde_json::from_str(text).expect("a client reads it");
    assert_eq!(read, answer);
}
