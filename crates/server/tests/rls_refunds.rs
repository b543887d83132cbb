//! Envoy's `is_negative_hits` (a refund) and envoyproxy/ratelimit's
//! `quota_mode` over real loopback gRPC, with a tonic client: a refund
//! gives back exactly the units refunded, never past full, on the memory
//! store and on a real Redis alike.

mod support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::google::protobuf::UInt64Value;
use support::rls::{OK, OVER, Rls};

impl Rls {
    /// One call of `descriptors` (key, hits, is_negative_hits), each
    /// `key=acme`: the overall code and each (code, remaining).
    async fn ask(&mut self, descriptors: &[(&str, u64, bool)]) -> (i32, Vec<(i32, u32)>) {
        let descriptors = descriptors
            .iter()
            .map(|&(key, hits, negative)| RateLimitDescriptor {
                entries: vec![Entry {
                    key: key.to_owned(),
                    value: "acme".to_owned(),
                }],
                hits_addend: Some(UInt64Value { value: hits }),
                is_negative_hits: negative,
                ..RateLimitDescriptor::default()
            })
            .collect();
        self.call(descriptors).await.expect("answered")
    }

    async fn hit(&mut self, key: &str, hits: u64) -> (i32, u32) {
        let (overall, statuses) = self.ask(&[(key, hits, false)]).await;
        assert_eq!(overall, statuses[0].0);
        statuses[0]
    }

    async fn refund(&mut self, key: &str, hits: u64) -> (i32, u32) {
        let (overall, statuses) = self.ask(&[(key, hits, true)]).await;
        assert_eq!(overall, statuses[0].0);
        statuses[0]
    }
}

/// Two an hour: envoyproxy/ratelimit's fixed window, and a token bucket
/// (2 a burst, refilled 2 an hour: nothing refills while a test runs,
/// whichever clock decides).
const RULES: &str = "domain: api
descriptors:
  - key: window
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 2}
    tollgate: {algorithm: token_bucket}
";

/// Hit, refund twice, hit, hit: every one OK, each refund giving back
/// exactly what was spent and nothing past full.
async fn hit_refund_refund_hit_hit(rls: &mut Rls, key: &str) {
    let answers = [
        rls.hit(key, 1).await,
        rls.refund(key, 1).await,
        rls.refund(key, 1).await,
        rls.hit(key, 1).await,
        rls.hit(key, 1).await,
    ];
    assert_eq!(
        answers,
        [(OK, 1), (OK, 2), (OK, 2), (OK, 1), (OK, 0)],
        "{key}"
    );
    // Empty: over. A refund of 5 lifts it to full (2), not to 5.
    assert_eq!(rls.hit(key, 1).await, (OVER, 0), "{key}");
    assert_eq!(rls.refund(key, 5).await, (OK, 2), "{key}");
    assert_eq!(rls.hit(key, 2).await, (OK, 0), "{key}");
    assert_eq!(rls.hit(key, 1).await, (OVER, 0), "{key}");
}

#[tokio::test]
async fn a_refund_restores_exactly_the_refunded_units_on_the_memory_store() {
    let mut rls = Rls::start("", RULES).await;
    hit_refund_refund_hit_hit(&mut rls, "window").await;
    hit_refund_refund_hit_hit(&mut rls, "bucket").await;
}

#[tokio::test]
async fn a_refund_restores_exactly_the_refunded_units_on_redis() {
    let redis = tollgate_testkit::RedisServer::start().expect("redis-server starts");
    let store = format!("store:\n  redis:\n    url: {}\n", redis.url());
    let mut rls = Rls::start(&store, RULES).await;
    hit_refund_refund_hit_hit(&mut rls, "bucket").await;
}

#[tokio::test]
async fn a_refund_beside_a_hit_in_one_request_is_given_back_first() {
    let mut rls = Rls::start("", RULES).await;
    assert_eq!(rls.hit("window", 2).await, (OK, 0));
    // The refund's status is a look at the state it left; the hit then spends.
    let r = rls.ask(&[("window", 1, true), ("bucket", 2, false)]).await;
    assert_eq!(r, (OK, vec![(OK, 1), (OK, 0)]));
}

const QUOTAS: &str = "domain: api
descriptors:
  - key: small
    rate_limit: {unit: hour, requests_per_unit: 1}
    quota_mode: true
  - key: large
    rate_limit: {unit: hour, requests_per_unit: 2}
    quota_mode: true
  - key: strict
    rate_limit: {unit: hour, requests_per_unit: 5}
";

#[tokio::test]
async fn quota_limits_make_a_request_over_only_when_every_one_is_over() {
    let mut rls = Rls::start("", QUOTAS).await;
    let both = [("small", 1, false), ("large", 1, false)];
    assert_eq!(rls.ask(&both).await, (OK, vec![(OK, 0), (OK, 1)]));
    // small is over, large is not: the request passes, and large spends.
    assert_eq!(rls.ask(&both).await, (OK, vec![(OVER, 0), (OK, 0)]));
    // Both over: the request is over.
    assert_eq!(rls.ask(&both).await, (OVER, vec![(OVER, 0), (OVER, 0)]));
    // A plain limit beside them is spent only when the request passes.
    let mixed = [("small", 1, false), ("strict", 1, false)];
    assert_eq!(rls.ask(&mixed).await, (OVER, vec![(OVER, 0), (OK, 5)]));
    // A refund to a quota limit lets the next request in.
    assert_eq!(rls.refund("small", 1).await, (OK, 1));
    assert_eq!(rls.ask(&mixed).await, (OK, vec![(OK, 0), (OK, 4)]));
}

const TRACE_KEY: &str = "0123456789abcdef0123456789abcdef-rls-capture";

#[tokio::test]
async fn a_capture_of_rls_traffic_with_refunds_replays_to_the_same_answers() {
    let mut rls = Rls::start_with("", RULES, ", trace: {path: capture.jsonl}", |name| {
        (name == "TOLLGATE_IDENTITY_KEY").then(|| TRACE_KEY.to_owned())
    })
    .await;
    let mut answered = Vec::new();
    answered.push(rls.hit("window", 2).await);
    answered.push(rls.hit("window", 1).await);
    answered.extend(
        rls.ask(&[("window", 1, true), ("bucket", 2, false)])
            .await
            .1,
    );
    answered.extend(
        rls.ask(&[("window", 1, false), ("bucket", 1, false)])
            .await
            .1,
    );
    answered.push(rls.refund("bucket", 1).await);
    assert_eq!(
        answered,
        // The fourth request is over on bucket: window alone would admit,
        // and spends nothing.
        [
            (OK, 0),
            (OVER, 0),
            (OK, 1),
            (OK, 0),
            (OK, 1),
            (OVER, 0),
            (OK, 1)
        ]
    );
    // Six lines: a request's descriptors decided together are one line,
    // a refund one of its own.
    let capture_path = rls.dir.path().join("capture.jsonl");
    let mut capture = String::new();
    for _ in 0..2_000 {
        capture = std::fs::read_to_string(&capture_path).unwrap_or_default();
        if capture.lines().count() >= 6 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(capture.lines().count(), 6, "{capture}");
    assert!(!capture.contains("acme"), "captured raw: {capture}");

    let (stdout, _) = support::replay_capture(
        &rls.dir.path().join("tollgate.yaml"),
        TRACE_KEY,
        &[],
        &capture,
    );
    let replayed: Vec<(i32, u32)> = stdout
        .lines()
        .map(|line| {
            let d: serde_json::Value = serde_json::from_str(line).expect("a decision line");
            let code = if d["allowed"] == true { OK } else { OVER };
            let remaining = d["remaining"].as_u64().expect("remaining");
            (code, u32::try_from(remaining).expect("small"))
        })
        .collect();
    assert_eq!(replayed, answered);
}
