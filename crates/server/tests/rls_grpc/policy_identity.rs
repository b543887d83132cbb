//! A descriptor rule bound to a tollgate policy keys by that policy's
//! identity rules, as forward auth does (docs/envoy.md, "A bound rule is
//! the policy's own budget"): one IPv6 /64 is one client, a mapped IPv4
//! address is its IPv4 address, an API key is kept only as its keyed hash,
//! and an empty part is refused over the limit, spending nothing — never an
//! error, which Envoy's `failure_mode_deny: false` would let through.

use tollgate_core::SecretHasher;

use crate::harness::{OK, OVER, Rls, desc, request};
use crate::support::metric;

/// The identity key the tests configure (`TOLLGATE_IDENTITY_KEY`).
const IDENTITY_KEY: &str = "an identity key of thirty-two bytes or more";

/// `login` keys by the client's network, `keyed` by an API key; both allow
/// 5 an hour.
const POLICIES: &str = "policies:
  - {name: login, algorithm: fixed_window, limit: 5, window: 1h, identity: [client_ip]}
  - {name: keyed, algorithm: fixed_window, limit: 5, window: 1h, identity: [{api_key: X-Api-Key}]}
";

/// Envoy's `remote_address` action and an entry named `client_ip` both
/// name the `client_ip` part.
const RULES: &str = "domain: edge
descriptors:
  - key: remote_address
    tollgate: {policy: login}
  - key: client_ip
    tollgate: {policy: login}
  - key: api_key
    tollgate: {policy: keyed}
";

async fn start(store: &str) -> Rls {
    Rls::start_with(&format!("{store}{POLICIES}"), RULES, "", |name| {
        (name == "TOLLGATE_IDENTITY_KEY").then(|| IDENTITY_KEY.to_owned())
    })
    .await
}

impl Rls {
    /// One descriptor of `entries` in domain `edge`: the overall code.
    async fn code(&mut self, entries: &[(&str, &str)]) -> i32 {
        let r = self.send(request("edge", vec![desc(entries)], 0)).await;
        r.expect("answered, never an error").overall_code
    }
}

#[tokio::test]
async fn eight_addresses_of_one_ipv6_64_share_one_login_budget() {
    let mut rls = start("").await;
    let mut codes = Vec::new();
    for host in 1..=8 {
        let address = format!("2001:db8:7:7::{host:x}");
        codes.push(rls.code(&[("remote_address", &address)]).await);
    }
    assert_eq!(codes, [OK, OK, OK, OK, OK, OVER, OVER, OVER]);
    // The next /64 is another client, and forward auth's spelling of the
    // network (`/v1/check` names it as forward auth keys it) is this one.
    assert_eq!(rls.code(&[("client_ip", "2001:db8:7:8::1")]).await, OK);
    let checked = rls
        .check(r#"{"policy":"login","key":{"client_ip":"2001:db8:7:7::/64"},"cost":0}"#)
        .await;
    assert_eq!(checked["remaining"], 0, "{checked}");
}

#[tokio::test]
async fn a_mapped_ipv4_address_spends_the_plain_addresses_budget() {
    let mut rls = start("").await;
    let mut codes = Vec::new();
    for address in [
        "1.2.3.4",
        "::ffff:1.2.3.4",
        "1.2.3.4",
        "::ffff:1.2.3.4",
        "::ffff:1.2.3.4",
    ] {
        codes.push(rls.code(&[("client_ip", address)]).await);
    }
    assert_eq!(codes, [OK; 5]);
    assert_eq!(rls.code(&[("remote_address", "1.2.3.4")]).await, OVER);
    assert_eq!(
        rls.code(&[("remote_address", "::ffff:1.2.3.4")]).await,
        OVER
    );
    let checked = rls
        .check(r#"{"policy":"login","key":{"client_ip":"1.2.3.4"},"cost":0}"#)
        .await;
    assert_eq!(checked["remaining"], 0, "{checked}");
}

/// The raw key reaches no Redis key, no `/v1/hot` entry and no metric:
/// the budget it spends is the one keyed by its hash.
#[tokio::test]
async fn an_api_key_is_kept_only_as_its_keyed_hash() {
    let redis = tollgate_testkit::RedisServer::start().expect("redis-server starts");
    let mut rls = start(&format!("store:\n  redis:\n    url: {}\n", redis.url())).await;
    for _ in 0..2 {
        assert_eq!(rls.code(&[("api_key", "sk_live_raw_secret")]).await, OK);
    }
    let keys = redis.cli(&["KEYS", "*"]).expect("KEYS");
    assert!(keys.contains("keyed"), "{keys}");
    assert!(!keys.contains("sk_live"), "{keys}");
    let http = rls.http.clone().expect("HTTP is served");
    let hot = reqwest::get(format!("{http}/v1/hot"))
        .await
        .expect("GET /v1/hot")
        .text()
        .await
        .expect("body");
    assert!(hot.contains("keyed"), "{hot}");
    assert!(!hot.contains("sk_live"), "{hot}");
    assert!(!rls.metrics().contains("sk_live"));
    let hash = SecretHasher::new(IDENTITY_KEY.as_bytes()).hash(b"sk_live_raw_secret");
    let checked = rls
        .check(&format!(
            r#"{{"policy":"keyed","key":{{"api_key":"{hash}"}},"cost":0}}"#
        ))
        .await;
    assert_eq!(checked["remaining"], 3, "{checked}");
}

/// An empty part (or an address that is none) is the client's fault, as a
/// missing identity part is forward auth's 400: the request is over the
/// limit, says why in `Tollgate-Problem`, and nothing of it is spent.
#[tokio::test]
async fn an_empty_part_is_refused_over_the_limit_and_spends_nothing() {
    let mut rls = start("").await;
    let refusals = [
        (
            vec![
                desc(&[("client_ip", "10.0.0.1")]),
                desc(&[("remote_address", "")]),
            ],
            "descriptors[1]: policy login: identity part client_ip is empty",
        ),
        (
            vec![
                desc(&[("api_key", " ")]),
                desc(&[("client_ip", "10.0.0.1")]),
            ],
            "descriptors[0]: policy keyed: identity part api_key is empty",
        ),
        (
            vec![
                desc(&[("client_ip", "10.0.0.1")]),
                desc(&[("client_ip", "10.0.0.x")]),
            ],
            "descriptors[1]: policy login: identity part client_ip is not an IP address",
        ),
    ];
    for (descriptors, problem) in refusals {
        let count = descriptors.len();
        let r = rls
            .send(request("edge", descriptors, 0))
            .await
            .expect("answered, never an error");
        assert_eq!(r.overall_code, OVER);
        let codes: Vec<i32> = r.statuses.iter().map(|s| s.code).collect();
        assert_eq!(codes.len(), count);
        assert_eq!(codes.iter().filter(|c| **c == OVER).count(), 1);
        let headers: Vec<(&str, &str)> = r
            .response_headers_to_add
            .iter()
            .map(|h| (h.key.as_str(), h.value.as_str()))
            .collect();
        assert_eq!(headers, [("tollgate-problem", problem)]);
    }
    // 10.0.0.1 was in every refused request and spent nothing.
    let checked = rls
        .check(r#"{"policy":"login","key":{"client_ip":"10.0.0.1"},"cost":0}"#)
        .await;
    assert_eq!(checked["remaining"], 5, "{checked}");
    let m = rls.metrics();
    assert_eq!(
        metric(&m, "tollgate_rls_requests_total{code=\"refused\"}"),
        Some(3.0)
    );
}
