//! Envoy's RLS where its features meet: refunds, quota and shadow modes,
//! overrides, failure modes and hits_addend together, over real loopback
//! gRPC with a tonic client (a real Redis where the store matters).

mod support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::google::protobuf::UInt64Value;
use support::rls::{OK, OVER, Rls};

impl Rls {
    async fn ask(&mut self, descriptors: &[Desc]) -> Result<(i32, Vec<(i32, u32)>), tonic::Code> {
        self.call(descriptors.iter().map(Desc::proto).collect())
            .await
    }
}

/// A descriptor `key=acme`: its hits, whether they are a refund, and an
/// optional `limit` override (requests per year).
#[derive(Clone, Copy)]
struct Desc {
    key: &'static str,
    hits: u64,
    refund: bool,
    limit: Option<u32>,
}

const fn hit(key: &'static str, hits: u64) -> Desc {
    Desc {
        key,
        hits,
        refund: false,
        limit: None,
    }
}

const fn refund(key: &'static str, hits: u64) -> Desc {
    Desc {
        key,
        hits,
        refund: true,
        limit: None,
    }
}

impl Desc {
    const fn limit(self, per_year: u32) -> Self {
        Self {
            limit: Some(per_year),
            ..self
        }
    }

    fn proto(&self) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: vec![Entry {
                key: self.key.to_owned(),
                value: "acme".to_owned(),
            }],
            hits_addend: Some(UInt64Value { value: self.hits }),
            is_negative_hits: self.refund,
            limit: self.limit.map(|n| RateLimitOverride {
                requests_per_unit: n,
                unit: Unit::Year as i32,
            }),
        }
    }
}

const RULES: &str = "domain: api
descriptors:
  - key: window
    rate_limit: {unit: year, requests_per_unit: 2}
  - key: blocked
    rate_limit: {unit: year, requests_per_unit: 0}
  - key: blocked_quota
    rate_limit: {unit: year, requests_per_unit: 0}
    quota_mode: true
  - key: quota
    rate_limit: {unit: year, requests_per_unit: 2}
    quota_mode: true
  - key: unlimited_quota
    rate_limit: {unlimited: true}
    quota_mode: true
  - key: log
    rate_limit: {unit: year, requests_per_unit: 2}
    tollgate: {algorithm: sliding_log}
  - key: bucket
    rate_limit: {unit: year, requests_per_unit: 2}
    tollgate: {algorithm: token_bucket}
  - key: gcra
    rate_limit: {unit: year, requests_per_unit: 2}
    tollgate: {algorithm: gcra}
  - key: sliding
    rate_limit: {unit: year, requests_per_unit: 2}
    tollgate: {algorithm: sliding_window}
";

/// A refund to a blocked limit gives nothing back and answers OK, whether
/// the block is a rule's `requests_per_unit: 0` or a request's own
/// `limit` of 0; a hit beside it is still over.
#[tokio::test]
async fn a_refund_to_a_blocked_rule_or_override_answers_ok() {
    let mut rls = Rls::start("", RULES).await;
    assert_eq!(
        rls.ask(&[refund("blocked", 1)]).await,
        Ok((OK, vec![(OK, 0)]))
    );
    assert_eq!(
        rls.ask(&[refund("any", 3).limit(0)]).await,
        Ok((OK, vec![(OK, 0)]))
    );
    assert_eq!(
        rls.ask(&[refund("any", 1).limit(0), hit("window", 1)])
            .await,
        Ok((OK, vec![(OK, 0), (OK, 1)]))
    );
    assert_eq!(
        rls.ask(&[hit("any", 1).limit(0)]).await,
        Ok((OVER, vec![(OVER, 0)]))
    );
}

/// A `hits_addend` far past any limit (up to u64::MAX) is over and
/// spends nothing, a refund of as much lifts a limit to full and no
/// further, on every algorithm, a quota limit and a `limit` override.
async fn huge_hits_are_over_and_huge_refunds_stop_at_full(rls: &mut Rls) {
    for key in ["window", "log", "bucket", "gcra", "sliding", "quota"] {
        let r = rls.ask(&[hit(key, u64::MAX)]).await;
        assert_eq!(r, Ok((OVER, vec![(OVER, 2)])), "{key}");
        let r = rls.ask(&[hit(key, 1 << 53)]).await;
        assert_eq!(r, Ok((OVER, vec![(OVER, 2)])), "{key}");
        let r = rls.ask(&[hit(key, 1)]).await;
        assert_eq!(r, Ok((OK, vec![(OK, 1)])), "{key}");
        let r = rls.ask(&[refund(key, u64::MAX)]).await;
        assert_eq!(r, Ok((OK, vec![(OK, 2)])), "{key}");
        let r = rls.ask(&[hit(key, u64::MAX).limit(5)]).await;
        assert_eq!(r, Ok((OVER, vec![(OVER, 5)])), "{key}");
    }
}

#[tokio::test]
async fn huge_hits_on_the_memory_store() {
    let mut rls = Rls::start("", RULES).await;
    huge_hits_are_over_and_huge_refunds_stop_at_full(&mut rls).await;
}

#[tokio::test]
async fn huge_hits_on_redis() {
    let redis = tollgate_testkit::RedisServer::start().expect("redis-server starts");
    let store = format!("store:\n  redis:\n    url: {}\n", redis.url());
    let mut rls = Rls::start(&store, RULES).await;
    huge_hits_are_over_and_huge_refunds_stop_at_full(&mut rls).await;
}

/// A `requests_per_unit: 0` rule in `quota_mode` is a quota limit always
/// over: it makes the request over only when every quota limit is, and
/// never stops the enforced limits beside another quota limit that admits.
#[tokio::test]
async fn a_blocked_quota_limit_is_one_quota_limit_among_the_others() {
    let mut rls = Rls::start("", RULES).await;
    let r = rls.ask(&[hit("blocked_quota", 1), hit("quota", 1)]).await;
    assert_eq!(r, Ok((OK, vec![(OVER, 0), (OK, 1)])));
    let r = rls
        .ask(&[hit("blocked_quota", 1), hit("quota", 1), hit("window", 1)])
        .await;
    assert_eq!(r, Ok((OK, vec![(OVER, 0), (OK, 0), (OK, 1)])));
    // Every quota limit over: the request is over, the window only peeks.
    let r = rls
        .ask(&[hit("blocked_quota", 1), hit("quota", 1), hit("window", 1)])
        .await;
    assert_eq!(r, Ok((OVER, vec![(OVER, 0), (OVER, 0), (OK, 1)])));
    // Alone it is every quota limit of the request.
    let r = rls.ask(&[hit("blocked_quota", 1), hit("window", 1)]).await;
    assert_eq!(r, Ok((OVER, vec![(OVER, 0), (OK, 1)])));
    // A peek (hits 0) at it is not over.
    let r = rls.ask(&[hit("blocked_quota", 0), hit("window", 1)]).await;
    assert_eq!(r, Ok((OK, vec![(OK, 0), (OK, 0)])));
}

/// An `unlimited` rule in `quota_mode` is a quota limit never over: beside
/// it, the other quota limits being over does not make the request over.
#[tokio::test]
async fn an_unlimited_quota_limit_keeps_the_request_within_its_quotas() {
    let mut rls = Rls::start("", RULES).await;
    assert_eq!(rls.ask(&[hit("quota", 2)]).await, Ok((OK, vec![(OK, 0)])));
    assert_eq!(
        rls.ask(&[hit("quota", 1)]).await,
        Ok((OVER, vec![(OVER, 0)]))
    );
    let r = rls.ask(&[hit("unlimited_quota", 1), hit("quota", 1)]).await;
    assert_eq!(r, Ok((OK, vec![(OK, u32::MAX), (OVER, 0)])));
    let r = rls
        .ask(&[
            hit("unlimited_quota", 1),
            hit("blocked_quota", 1),
            hit("window", 1),
        ])
        .await;
    assert_eq!(r, Ok((OK, vec![(OK, u32::MAX), (OVER, 0), (OK, 1)])));
}

/// The policy `RULES2`'s `trial` rule is bound to.
const TRIAL: &str =
    "policies:\n  - {name: trial, algorithm: fixed_window, limit: 2, window: 365d, mode: shadow}\n";

const RULES2: &str = "domain: api
descriptors:
  - key: window
    rate_limit: {unit: year, requests_per_unit: 2}
  - key: blocked
    rate_limit: {unit: year, requests_per_unit: 0}
  - key: closed_quota
    rate_limit: {unit: year, requests_per_unit: 2}
    quota_mode: true
    tollgate: {on_store_failure: fail_closed}
  - key: closed
    rate_limit: {unit: year, requests_per_unit: 2}
    tollgate: {on_store_failure: fail_closed}
  - key: open_quota
    rate_limit: {unit: year, requests_per_unit: 2}
    quota_mode: true
    tollgate: {on_store_failure: fail_open}
  - key: open
    rate_limit: {unit: year, requests_per_unit: 2}
    tollgate: {on_store_failure: fail_open}
  - key: shadow_closed
    rate_limit: {unit: year, requests_per_unit: 2}
    shadow_mode: true
    tollgate: {on_store_failure: fail_closed}
  - key: shadow
    rate_limit: {unit: year, requests_per_unit: 2}
    shadow_mode: true
  - key: trial
    tollgate: {policy: trial}
  - key: path
    value: /api/*
    rate_limit: {unit: year, requests_per_unit: 3}
  - key: path
    value: /api/x
    rate_limit: {unit: year, requests_per_unit: 1}
";

/// With the store down, a request already over without it — a blocked
/// limit, or every quota limit over by `fail_closed` — stays over: the
/// look at its other limits cannot be had, and does not turn the answer
/// into `UNAVAILABLE` (which Envoy's `failure_mode_deny: false` admits).
#[tokio::test]
async fn a_request_over_without_the_store_stays_over_while_it_is_down() {
    let mut redis = tollgate_testkit::RedisServer::start().expect("redis-server starts");
    let store = format!("store:\n  redis:\n    url: {}\n{TRIAL}", redis.url());
    let mut rls = Rls::start(&store, RULES2).await;
    assert_eq!(rls.ask(&[hit("window", 1)]).await, Ok((OK, vec![(OK, 1)])));
    redis.kill().expect("kill redis-server");
    // Nothing is counting, so the look promises no budget.
    let r = rls.ask(&[hit("blocked", 1), hit("window", 1)]).await;
    assert_eq!(r, Ok((OVER, vec![(OVER, 0), (OK, 0)])));
    let r = rls.ask(&[hit("closed_quota", 1), hit("window", 1)]).await;
    assert_eq!(r, Ok((OVER, vec![(OVER, 0), (OK, 0)])));
    // Not over without the store: the limit without a failure mode answers.
    let r = rls.ask(&[hit("blocked", 0), hit("window", 1)]).await;
    assert_eq!(r, Err(tonic::Code::Unavailable));
    let r = rls.ask(&[hit("open_quota", 1), hit("window", 1)]).await;
    assert_eq!(r, Err(tonic::Code::Unavailable));
    // A fail_closed limit beside one without a mode wins, as before.
    let r = rls.ask(&[hit("closed", 1), hit("window", 1)]).await;
    assert_eq!(r, Ok((OVER, vec![(OVER, 0), (OK, 0)])));
}

const HOT: &str = "policies:
  - {name: hot, algorithm: fixed_window, limit: 100, window: 365d, hot_lease: {above: 2, term: 10s}}
";
const HOT_RULES: &str = "domain: api
descriptors:
  - key: hot
    tollgate: {policy: hot}
";

/// Under `hot_lease`, a look (hits 0) says what remains as a hit does:
/// the store's state plus what this instance's block has not spent.
#[tokio::test]
async fn a_look_at_a_hot_identity_counts_its_unspent_block() {
    let redis = tollgate_testkit::RedisServer::start().expect("redis-server starts");
    let store = format!("store:\n  redis:\n    url: {}\n{HOT}", redis.url());
    let mut rls = Rls::start(&store, HOT_RULES).await;
    for left in [99, 98, 97, 96, 95] {
        assert_eq!(rls.ask(&[hit("hot", 1)]).await, Ok((OK, vec![(OK, left)])));
    }
    assert_eq!(rls.ask(&[hit("hot", 0)]).await, Ok((OK, vec![(OK, 95)])));
    assert_eq!(rls.ask(&[hit("hot", 1)]).await, Ok((OK, vec![(OK, 94)])));
    assert_eq!(rls.ask(&[hit("hot", 0)]).await, Ok((OK, vec![(OK, 94)])));
}

/// A refund to a hot identity first ends this instance's block, its
/// unspent units given back exactly: a refund of more than was spent then
/// lifts the limit to full and no further, and the units the block held
/// cannot be admitted on top of it.
#[tokio::test]
async fn a_refund_to_a_hot_identity_never_lifts_it_past_its_limit() {
    let redis = tollgate_testkit::RedisServer::start().expect("redis-server starts");
    let store = format!("store:\n  redis:\n    url: {}\n{HOT}", redis.url());
    let mut rls = Rls::start(&store, HOT_RULES).await;
    for left in [99, 98, 97, 96, 95] {
        assert_eq!(rls.ask(&[hit("hot", 1)]).await, Ok((OK, vec![(OK, left)])));
    }
    assert_eq!(rls.ask(&[refund("hot", 1)]).await, Ok((OK, vec![(OK, 96)])));
    assert_eq!(rls.ask(&[hit("hot", 1)]).await, Ok((OK, vec![(OK, 95)])));
    assert_eq!(
        rls.ask(&[refund("hot", 1000)]).await,
        Ok((OK, vec![(OK, 100)]))
    );
    assert_eq!(rls.ask(&[hit("hot", 0)]).await, Ok((OK, vec![(OK, 100)])));
    assert_eq!(rls.ask(&[hit("hot", 1)]).await, Ok((OK, vec![(OK, 99)])));
    let mut admitted = 1;
    for _ in 0..300 {
        if rls.ask(&[hit("hot", 1)]).await.map(|r| r.0) == Ok(OK) {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 100);
}

const ONE: &str = "policies:
  - {name: api, algorithm: fixed_window, limit: 3, window: 365d}
  - {name: bucket, algorithm: token_bucket, capacity: 3, refill: {tokens: 3, per: 365d}}
";
const ONE_RULES: &str = "domain: api
descriptors:
  - key: api
    tollgate: {policy: api}
  - key: bucket
    tollgate: {policy: bucket}
  - key: path
    value: /a/*
    share_threshold: true
    tollgate: {policy: api}
";

const SPLIT: &str = "region: eu
regions: {eu: {weight: 2}, us: {weight: 1}}
policies:
  - {name: api, algorithm: fixed_window, limit: 8, window: 365d, scope: split}
  - {name: lea, algorithm: token_bucket, capacity: 8, refill: {tokens: 8, per: 365d}, scope: split, mode: shadow}
";
const SPLIT_RULES: &str = "domain: api
descriptors:
  - key: api
    tollgate: {policy: api}
  - key: quota
    quota_mode: true
    tollgate: {policy: api}
  - key: lea
    tollgate: {policy: lea}
";

/// A bound rule under `scope: split` decides the region's share (5 of 8
/// for eu): a refund, a quota limit and a shadow policy meet there as
/// elsewhere, and `/v1/check` sees the same share.
#[tokio::test]
async fn refunds_quotas_and_shadow_meet_on_a_split_share() {
    let redis = tollgate_testkit::RedisServer::start().expect("redis-server starts");
    let config = format!(
        "stores:\n  local: memory\n  regional: {{redis: {{url: \"{0}\"}}}}\n  global: {{redis: {{url: \"{0}\"}}}}\n{SPLIT}",
        redis.url()
    );
    let mut rls = Rls::start(&config, SPLIT_RULES).await;
    assert_eq!(rls.ask(&[hit("api", 5)]).await, Ok((OK, vec![(OK, 0)])));
    assert_eq!(rls.ask(&[hit("api", 1)]).await, Ok((OVER, vec![(OVER, 0)])));
    assert_eq!(rls.ask(&[refund("api", 2)]).await, Ok((OK, vec![(OK, 2)])));
    let look = rls
        .check(r#"{"policy":"api","key":{"api":"acme"},"cost":0}"#)
        .await;
    assert_eq!((&look["limit"], &look["remaining"]), (&5.into(), &2.into()));
    // The one quota limit over its share: the request is over.
    assert_eq!(
        rls.ask(&[hit("quota", 6)]).await,
        Ok((OVER, vec![(OVER, 5)]))
    );
    // A refund is given back first; its status is a look after the quota spent.
    let r = rls.ask(&[hit("quota", 5), refund("quota", 5)]).await;
    assert_eq!(r, Ok((OK, vec![(OK, 0), (OK, 0)])));
    // A shadow policy's share: a would-be rejection spends nothing.
    assert_eq!(rls.ask(&[hit("lea", 6)]).await, Ok((OK, vec![(OK, 5)])));
    assert_eq!(rls.ask(&[hit("lea", 5)]).await, Ok((OK, vec![(OK, 0)])));
    let r = rls.ask(&[refund("lea", 2), hit("lea", 3)]).await;
    assert_eq!(r, Ok((OK, vec![(OK, 2), (OK, 2)])));
    assert_eq!(rls.ask(&[hit("lea", 1)]).await, Ok((OK, vec![(OK, 1)])));
    let metrics = rls.app.metrics.encode();
    for (series, value) in [
        (
            r#"tollgate_decisions_total{policy="api",outcome="allowed"}"#,
            3.0,
        ),
        (
            r#"tollgate_decisions_total{policy="api",outcome="rejected"}"#,
            2.0,
        ),
        (
            r#"tollgate_decisions_total{policy="lea",outcome="allowed"}"#,
            2.0,
        ),
        (
            r#"tollgate_decisions_total{policy="lea",outcome="shadow"}"#,
            2.0,
        ),
        (
            r#"tollgate_split_turned_away_units_total{policy="api",region="eu"}"#,
            7.0,
        ),
    ] {
        assert_eq!(support::metric(&metrics, series), Some(value), "{series}");
    }
}

/// A bound rule is its policy's budget at both doors, refunds included,
/// and a `share_threshold` wildcard is spelled as its pattern there.
#[tokio::test]
async fn rls_and_check_refund_one_budget() {
    let mut rls = Rls::start(ONE, ONE_RULES).await;
    let remaining = |v: serde_json::Value| (v["allowed"].clone(), v["remaining"].clone());
    assert_eq!(rls.ask(&[hit("api", 2)]).await, Ok((OK, vec![(OK, 1)])));
    let r = rls.check(r#"{"policy":"api","key":{"api":"acme"}}"#).await;
    assert_eq!(remaining(r), (true.into(), 0.into()));
    let r = rls
        .check(r#"{"policy":"api","key":{"api":"acme"},"refund":true,"cost":2}"#)
        .await;
    assert_eq!(remaining(r), (true.into(), 2.into()));
    assert_eq!(rls.ask(&[refund("api", 1)]).await, Ok((OK, vec![(OK, 3)])));
    assert_eq!(rls.ask(&[hit("bucket", 3)]).await, Ok((OK, vec![(OK, 0)])));
    let r = rls
        .check(r#"{"policy":"bucket","key":{"bucket":"acme"},"refund":true,"cost":1}"#)
        .await;
    assert_eq!(remaining(r), (true.into(), 1.into()));
    assert_eq!(rls.ask(&[hit("bucket", 1)]).await, Ok((OK, vec![(OK, 0)])));
    let r = rls
        .check(r#"{"policy":"bucket","key":{"bucket":"acme"}}"#)
        .await;
    assert_eq!(remaining(r), (false.into(), 0.into()));
    let path = |v: &str| RateLimitDescriptor {
        entries: vec![Entry {
            key: "path".into(),
            value: v.into(),
        }],
        ..RateLimitDescriptor::default()
    };
    let r = rls.call(vec![path("/a/x"), path("/a/y")]).await;
    assert_eq!(r, Ok((OK, vec![(OK, 2), (OK, 1)])));
    let r = rls.check(r#"{"policy":"api","key":{"path":"/a/*"}}"#).await;
    assert_eq!(remaining(r), (true.into(), 0.into()));
}

/// With the store down, a rule in `shadow_mode` without a failure mode
/// never vetoes: it cannot make the answer `UNAVAILABLE` (which Envoy's
/// `failure_mode_deny: true` turns into a denial) where the enforced
/// limits answered by their failure modes. A rule bound to a policy in
/// `mode: shadow` has the policy's mode (`fail_open` by default).
#[tokio::test]
async fn a_shadow_limit_never_turns_a_store_failure_into_an_error() {
    let mut redis = tollgate_testkit::RedisServer::start().expect("redis-server starts");
    let store = format!("store:\n  redis:\n    url: {}\n{TRIAL}", redis.url());
    let mut rls = Rls::start(&store, RULES2).await;
    assert_eq!(rls.ask(&[hit("shadow", 1)]).await, Ok((OK, vec![(OK, 1)])));
    redis.kill().expect("kill redis-server");
    // Nothing is counting, so no budget is promised.
    assert_eq!(rls.ask(&[hit("shadow", 1)]).await, Ok((OK, vec![(OK, 0)])));
    assert_eq!(rls.ask(&[hit("trial", 1)]).await, Ok((OK, vec![(OK, 0)])));
    let r = rls
        .ask(&[hit("open", 1), hit("shadow", 1), hit("trial", 1)])
        .await;
    assert_eq!(r, Ok((OK, vec![(OK, 0), (OK, 0), (OK, 0)])));
    let r = rls.ask(&[hit("closed", 1), hit("shadow", 1)]).await;
    assert_eq!(r, Ok((OVER, vec![(OVER, 0), (OK, 0)])));
    // An enforced limit without a failure mode still answers UNAVAILABLE.
    let r = rls.ask(&[hit("window", 1), hit("shadow", 1)]).await;
    assert_eq!(r, Err(tonic::Code::Unavailable));
    let metrics = rls.app.metrics.encode();
    let failures = r#"tollgate_rls_store_failures_total{path="fail_open"}"#;
    assert_eq!(support::metric(&metrics, failures), Some(6.0));
    // Each store call answered by a failure mode is a degraded decision,
    // the shadow rule's three among them (a policy in `mode: shadow` is
    // decided in a call of its own); the UNAVAILABLE answer is not.
    let degraded = |path: &str, outcome: &str| {
        support::metric(
            &metrics,
            &format!(r#"tollgate_degraded_decisions_total{{path="{path}",outcome="{outcome}"}}"#),
        )
    };
    assert_eq!(
        (
            degraded("fail_open", "allowed"),
            degraded("fail_closed", "rejected")
        ),
        (Some(6.0), Some(1.0)),
        "{metrics}"
    );
}

/// A value matching both an exact rule and a wildcard listed before it is
/// decided by the exact one alone; other values by the wildcard, each its
/// own bucket.
#[tokio::test]
async fn an_exact_value_wins_over_a_wildcard_listed_before_it() {
    let mut rls = Rls::start(TRIAL, RULES2).await;
    let path = |v: &str, hits: u64| RateLimitDescriptor {
        entries: vec![Entry {
            key: "path".into(),
            value: v.into(),
        }],
        hits_addend: Some(UInt64Value { value: hits }),
        ..RateLimitDescriptor::default()
    };
    let r = rls.call(vec![path("/api/x", 1)]).await;
    assert_eq!(r, Ok((OK, vec![(OK, 0)])));
    let r = rls.call(vec![path("/api/x", 1), path("/api/y", 1)]).await;
    assert_eq!(r, Ok((OVER, vec![(OVER, 0), (OK, 3)])));
    let r = rls.call(vec![path("/api/y", 3), path("/api/z", 3)]).await;
    assert_eq!(r, Ok((OK, vec![(OK, 0), (OK, 0)])));
}
