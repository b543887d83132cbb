//! Envoy's rate limit service over real loopback gRPC: envoyproxy/ratelimit's
//! documented config examples, loaded unchanged, decide as its README says;
//! every request field is honoured; bad requests are refused.

mod support;

use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use support::T0;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tollgate::{App, ServeConfig, serve_grpc};
use tollgate_core::ManualClock;
use tonic::transport::Channel;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;
const SECOND: i32 = 1;
const MINUTE: i32 = 2;
const HOUR: i32 = 3;
const DAY: i32 = 4;

/// tollgate with envoyproxy/ratelimit files, its gRPC service on loopback.
struct Rls {
    client: RateLimitServiceClient<Channel>,
    addr: String,
    app: Arc<App>,
    clock: Arc<ManualClock>,
    dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
}

impl Rls {
    /// `tollgate_yaml` is the main config; `files` are written beside it.
    async fn start(tollgate_yaml: &str, files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
        let config_path = dir.path().join("tollgate.yaml");
        std::fs::write(&config_path, tollgate_yaml).expect("write config");
        let config = ServeConfig::load(&config_path).expect("config loads");
        let clock = Arc::new(ManualClock::new(T0));
        let app = Arc::new(
            App::open(config, config_path, clock.clone())
                .await
                .expect("store opens"),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = format!("http://{}", listener.local_addr().expect("addr"));
        let (tx, rx) = oneshot::channel();
        tokio::spawn(serve_grpc(Arc::clone(&app), listener, async {
            let _ = rx.await;
        }));
        let client = RateLimitServiceClient::connect(addr.clone())
            .await
            .expect("connect");
        Self {
            client,
            addr,
            app,
            clock,
            dir,
            stop: Some(tx),
        }
    }

    /// A config holding only envoyproxy/ratelimit files (one per domain).
    async fn envoy_only(files: &[&str]) -> Self {
        let named: Vec<(String, &str)> = files
            .iter()
            .enumerate()
            .map(|(i, f)| (format!("ratelimit/config{i}.yaml"), *f))
            .collect();
        let refs: Vec<(&str, &str)> = named.iter().map(|(n, f)| (n.as_str(), *f)).collect();
        Self::start(
            "server: {watch_interval_ms: 0}\nenvoy_ratelimit_configs: [ratelimit]\n",
            &refs,
        )
        .await
    }

    async fn call(
        &mut self,
        request: RateLimitRequest,
    ) -> Result<RateLimitResponse, tonic::Status> {
        self.client
            .should_rate_limit(request)
            .await
            .map(tonic::Response::into_inner)
    }

    async fn ask(
        &mut self,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
    ) -> RateLimitResponse {
        self.call(request(domain, descriptors, 0))
            .await
            .expect("answered")
    }

    async fn ask_hits(
        &mut self,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
        hits: u32,
    ) -> RateLimitResponse {
        self.call(request(domain, descriptors, hits))
            .await
            .expect("answered")
    }

    /// The first status of `n` identical one-descriptor requests' last answer.
    async fn spend(
        &mut self,
        domain: &str,
        entries: &[(&str, &str)],
        n: usize,
    ) -> RateLimitResponse {
        let mut last = None;
        for _ in 0..n {
            last = Some(self.ask(domain, vec![desc(entries)]).await);
        }
        last.expect("n > 0")
    }

    fn metrics(&self) -> String {
        self.app.metrics.encode()
    }
}

impl Drop for Rls {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: hits,
    }
}

/// (code, requests_per_unit, unit, remaining) of a status; a status
/// without a limit reads (code, 0, 0, remaining).
fn brief(s: &DescriptorStatus) -> (i32, u32, i32, u32) {
    let (rpu, unit) = s
        .current_limit
        .as_ref()
        .map_or((0, 0), |l| (l.requests_per_unit, l.unit));
    (s.code, rpu, unit, s.limit_remaining)
}

fn reset_ms(s: &DescriptorStatus) -> u64 {
    let d = s
        .duration_until_reset
        .as_ref()
        .expect("duration_until_reset");
    u64::try_from(d.seconds).expect("seconds") * 1000
        + u64::try_from(d.nanos).expect("nanos") / 1_000_000
}

fn metric(text: &str, line_start: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no metric {line_start} in:\n{text}"))
}

// ---- envoyproxy/ratelimit README, examples 1-11 ----

const EXAMPLE_1: &str = "domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
";

#[tokio::test]
async fn example_1_each_value_has_its_own_500_per_second() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_1]).await;
    let r = rls
        .ask_hits("mongo_cps", vec![desc(&[("database", "users")])], 500)
        .await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 0));
    // T0 is a whole second: the window ends in exactly 1000 ms.
    assert_eq!(reset_ms(&r.statuses[0]), 1000);
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "users")])])
        .await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(brief(&r.statuses[0]), (OVER, 500, SECOND, 0));
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "default")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 499));
    // The next window starts empty.
    rls.clock.advance(1000);
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "users")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 499));
    // A value the file does not name matches nothing.
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "other")])])
        .await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(brief(&r.statuses[0]), (OK, 0, 0, 0));
    assert!(r.statuses[0].duration_until_reset.is_none());
}

const EXAMPLE_2: &str = "domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
";

#[tokio::test]
async fn example_2_nested_descriptors_limit_each_number_and_decide_all_or_nothing() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_2]).await;
    let both = |n: &str| {
        vec![
            desc(&[("message_type", "marketing"), ("to_number", n)]),
            desc(&[("to_number", n)]),
        ]
    };
    for i in 0..5u32 {
        let r = rls.ask("messaging", both("2061111111")).await;
        assert_eq!(r.overall_code, OK);
        assert_eq!(brief(&r.statuses[0]), (OK, 5, DAY, 4 - i));
        assert_eq!(brief(&r.statuses[1]), (OK, 100, DAY, 99 - i));
    }
    // The sixth marketing message is over; all-or-nothing, so the 100/day
    // limit is not spent by the rejected request (envoyproxy/ratelimit
    // would count it: 94).
    let r = rls.ask("messaging", both("2061111111")).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(brief(&r.statuses[0]), (OVER, 5, DAY, 0));
    assert_eq!(brief(&r.statuses[1]), (OK, 100, DAY, 95));
    let r = rls
        .ask("messaging", vec![desc(&[("to_number", "2061111111")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 100, DAY, 94));
    // Every number has its own limits.
    let r = rls.ask("messaging", both("2062222222")).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 5, DAY, 4));
    assert_eq!(brief(&r.statuses[1]), (OK, 100, DAY, 99));
}

const EXAMPLE_3: &str = "domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
";

#[tokio::test]
async fn example_3_the_most_specific_match_wins_and_zero_blocks() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_3]).await;
    let r = rls
        .spend("edge_proxy_per_ip", &[("remote_address", "50.0.0.1")], 10)
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 10, SECOND, 0));
    let r = rls
        .spend("edge_proxy_per_ip", &[("remote_address", "50.0.0.1")], 1)
        .await;
    assert_eq!(brief(&r.statuses[0]), (OVER, 10, SECOND, 0));
    let r = rls
        .spend("edge_proxy_per_ip", &[("remote_address", "50.0.0.5")], 1)
        .await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(brief(&r.statuses[0]), (OVER, 0, SECOND, 0));
    assert_eq!(reset_ms(&r.statuses[0]), 1000);
    let r = rls
        .spend("edge_proxy_per_ip", &[("remote_address", "50.0.0.2")], 1)
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 10, SECOND, 9));
}

#[tokio::test]
async fn example_4_a_limit_applies_only_at_the_request_depth() {
    let shallow = "domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
";
    let nested = "domain: example4b
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
";
    let mut rls = Rls::envoy_only(&[shallow, nested]).await;
    let two = [("key", "value"), ("subkey", "subvalue")];
    let r = rls.ask("example4", vec![desc(&two)]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 0, 0, 0));
    let r = rls.ask("example4b", vec![desc(&two)]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 300, SECOND, 299));
    // The nested file's first level alone has no limit.
    let r = rls.ask("example4b", vec![desc(&[("key", "value")])]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 0, 0, 0));
}

const EXAMPLE_5: &str = "domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
";

#[tokio::test]
async fn example_5_unlimited_answers_ok_with_max_remaining() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_5]).await;
    let r = rls
        .ask_hits("internal", vec![desc(&[("ldap", "x")])], 1_000_000)
        .await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(brief(&r.statuses[0]), (OK, 0, 0, u32::MAX));
    let r = rls.ask("internal", vec![desc(&[("azure", "x")])]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 100, MINUTE, 99));
    // 1_700_000_000 s is 20 s into its minute.
    assert_eq!(reset_ms(&r.statuses[0]), 40_000);
    let m = rls.metrics();
    assert_eq!(
        metric(
            &m,
            "tollgate_rls_hits_total{domain=\"internal\",key=\"ldap\",outcome=\"unlimited\"}"
        ),
        1_000_000
    );
}

const EXAMPLE_6: &str = "domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
";

#[tokio::test]
async fn example_6_shadow_mode_decides_and_counts_but_answers_ok() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_6]).await;
    let a = [("service", "auth-service"), ("user", "user-a")];
    let b = [("service", "auth-service"), ("user", "user-b")];
    let r = rls.spend("example6", &a, 12).await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(brief(&r.statuses[0]), (OK, 10, SECOND, 0));
    let r = rls.spend("example6", &b, 21).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(brief(&r.statuses[0]), (OVER, 20, SECOND, 0));
    // A shadow limit never blocks the others of its request.
    let r = rls
        .ask(
            "example6",
            vec![
                desc(&a),
                desc(&[("service", "auth-service"), ("user", "user-b")]),
            ],
        )
        .await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(r.statuses[0].code, OK);
    let m = rls.metrics();
    let key = "domain=\"example6\",key=\"service.user_user-a\"";
    assert_eq!(
        metric(
            &m,
            &format!("tollgate_rls_hits_total{{{key},outcome=\"within_limit\"}}")
        ),
        10
    );
    assert_eq!(
        metric(
            &m,
            &format!("tollgate_rls_hits_total{{{key},outcome=\"shadow_mode\"}}")
        ),
        3
    );
    assert_eq!(
        metric(
            &m,
            &format!("tollgate_rls_hits_total{{{key},outcome=\"over_limit\"}}")
        ),
        0
    );
}

const EXAMPLE_7: &str = "domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
";

#[tokio::test]
async fn example_7_replaces_drops_the_named_limit_and_leaves_it_unspent() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_7]).await;
    let one = [("key_1", "value_1"), ("user", "bkthomps")];
    let two = [("key_2", "value_2"), ("user", "bkthomps")];
    let r = rls.ask("example7", vec![desc(&one), desc(&two)]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 0, 0, 0));
    assert_eq!(brief(&r.statuses[1]), (OK, 10, SECOND, 9));
    // The replaced 5/s limit was not spent.
    let r = rls.ask("example7", vec![desc(&one)]).await;
    let limit = r.statuses[0].current_limit.as_ref().expect("limit");
    assert_eq!(limit.name, "specific_limit");
    assert_eq!(brief(&r.statuses[0]), (OK, 5, SECOND, 4));
    let r = rls.ask("example7", vec![desc(&two)]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 10, SECOND, 8));
}

#[tokio::test]
async fn example_8_detailed_metric_loads_and_each_value_has_its_bucket() {
    let example_8 = "domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
";
    let mut rls = Rls::envoy_only(&[example_8]).await;
    let r = rls
        .spend("example8", &[("key1", "unspecified_value")], 10)
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 10, MINUTE, 0));
    let r = rls
        .spend("example8", &[("key1", "unspecified_value2")], 1)
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 10, MINUTE, 9));
    let r = rls.spend("example8", &[("key1", "value1")], 1).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 20, MINUTE, 19));
}

#[tokio::test]
async fn example_9_wildcards_trailing_middle_and_multiple() {
    let trailing = "domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
";
    let middle = "domain: example9b
descriptors:
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
";
    let multiple = "domain: example9c
descriptors:
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
";
    let mut rls = Rls::envoy_only(&[trailing, middle, multiple]).await;
    for v in ["value1", "value2", "valueXYZ"] {
        let r = rls.ask("example9", vec![desc(&[("key1", v)])]).await;
        // Without share_threshold each value has its own bucket.
        assert_eq!(brief(&r.statuses[0]), (OK, 20, MINUTE, 19), "{v}");
    }
    let r = rls.ask("example9", vec![desc(&[("key1", "other")])]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 0, 0, 0));
    for (v, limited) in [
        ("/api/123/action", true),
        ("/api/user-id/action", true),
        ("/api/123/other", false),
    ] {
        let r = rls.ask("example9b", vec![desc(&[("path", v)])]).await;
        let expected = if limited {
            (OK, 20, MINUTE, 19)
        } else {
            (OK, 0, 0, 0)
        };
        assert_eq!(brief(&r.statuses[0]), expected, "{v}");
    }
    for v in ["/api/v1/resource/123/action", "/api/v2/resource/456/action"] {
        let r = rls.ask("example9c", vec![desc(&[("route", v)])]).await;
        assert_eq!(brief(&r.statuses[0]), (OK, 20, MINUTE, 19), "{v}");
    }
    let r = rls
        .ask(
            "example9c",
            vec![desc(&[("route", "/api/v1/resource/123")])],
        )
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 0, 0, 0));
}

#[tokio::test]
async fn example_10_value_to_metric_loads_and_limits_by_subject() {
    let example_10 = "domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
";
    let mut rls = Rls::envoy_only(&[example_10]).await;
    let r = rls
        .ask_hits(
            "example10",
            vec![desc(&[
                ("route", "api"),
                ("http_method", "GET"),
                ("subject_id", "123"),
            ])],
            60,
        )
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 60, MINUTE, 0));
    let r = rls
        .ask(
            "example10",
            vec![desc(&[
                ("route", "web"),
                ("http_method", "POST"),
                ("subject_id", "456"),
            ])],
        )
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 60, MINUTE, 59));
    // Metric labels stay the configured keys, never request values.
    let m = rls.metrics();
    assert_eq!(
        metric(
            &m,
            "tollgate_rls_hits_total{domain=\"example10\",key=\"route.http_method.subject_id\",outcome=\"within_limit\"}"
        ),
        61
    );
}

const EXAMPLE_11: &str = "domain: example11
descriptors:
  # With share_threshold: true, all files/* matches share the same threshold
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10

  # Without share_threshold, each files_no_share/* match has its own isolated threshold
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
";

#[tokio::test]
async fn example_11_share_threshold_shares_one_bucket_across_wildcard_matches() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_11]).await;
    rls.spend("example11", &[("files", "files/a.pdf")], 5).await;
    let r = rls.spend("example11", &[("files", "files/b.csv")], 5).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 10, HOUR, 0));
    let r = rls.spend("example11", &[("files", "files/c.txt")], 1).await;
    assert_eq!(brief(&r.statuses[0]), (OVER, 10, HOUR, 0));
    let r = rls
        .spend(
            "example11",
            &[("files_no_share", "files_no_share/a.pdf")],
            11,
        )
        .await;
    assert_eq!(brief(&r.statuses[0]), (OVER, 10, HOUR, 0));
    let r = rls
        .spend(
            "example11",
            &[("files_no_share", "files_no_share/b.csv")],
            1,
        )
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 10, HOUR, 9));
}

// ---- request fields ----

#[tokio::test]
async fn hits_addend_on_the_request_and_on_each_descriptor() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_1]).await;
    let users = || desc(&[("database", "users")]);
    let r = rls.ask_hits("mongo_cps", vec![users()], 300).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 200));
    // A descriptor's own hits_addend wins over the request's; 0 is a peek.
    let mut peek = users();
    peek.hits_addend = Some(UInt64Value { value: 0 });
    let r = rls.ask_hits("mongo_cps", vec![peek], 300).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 200));
    let mut big = users();
    big.hits_addend = Some(UInt64Value { value: 201 });
    let r = rls.ask_hits("mongo_cps", vec![big], 1).await;
    assert_eq!(brief(&r.statuses[0]), (OVER, 500, SECOND, 200));
    let mut exact = users();
    exact.hits_addend = Some(UInt64Value { value: 200 });
    let r = rls.ask("mongo_cps", vec![exact]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 0));
}

#[tokio::test]
async fn a_limit_override_replaces_the_configured_limit() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_1]).await;
    let mut d = desc(&[("database", "users")]);
    d.limit = Some(RateLimitOverride {
        requests_per_unit: 3,
        unit: MINUTE,
    });
    for left in [2, 1, 0] {
        let r = rls.ask("mongo_cps", vec![d.clone()]).await;
        assert_eq!(brief(&r.statuses[0]), (OK, 3, MINUTE, left));
    }
    let r = rls.ask("mongo_cps", vec![d.clone()]).await;
    assert_eq!(brief(&r.statuses[0]), (OVER, 3, MINUTE, 0));
    // The configured limit's bucket is untouched.
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "users")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 499));
    // An override needs no matching rule, only a known domain.
    let mut any = desc(&[("anything", "x")]);
    any.limit = d.limit;
    let r = rls.ask("mongo_cps", vec![any.clone()]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 3, MINUTE, 2));
    let r = rls.ask("unknown_domain", vec![any]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 0, 0, 0));
}

#[tokio::test]
async fn several_domains_from_one_directory_are_independent() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_1, EXAMPLE_3, EXAMPLE_5]).await;
    let r = rls
        .ask("edge_proxy_per_ip", vec![desc(&[("database", "users")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 0, 0, 0));
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "users")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 499));
    let r = rls.ask("internal", vec![desc(&[("azure", "users")])]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 100, MINUTE, 99));
}

#[tokio::test]
async fn bad_requests_are_invalid_arguments() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_1]).await;
    let cases = [
        (
            request("", vec![desc(&[("database", "users")])], 0),
            "domain must not be empty",
        ),
        (
            request("mongo_cps", vec![], 0),
            "descriptor list must not be empty",
        ),
        (
            request("mongo_cps", vec![desc(&[])], 0),
            "descriptors[0] has no entries",
        ),
    ];
    for (req, message) in cases {
        let status = rls.call(req).await.expect_err("refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains(message), "{}", status.message());
    }
    let mut bad_unit = desc(&[("database", "users")]);
    bad_unit.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 99,
    });
    let status = rls
        .call(request("mongo_cps", vec![bad_unit], 0))
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    // Nothing was spent by the refused requests.
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "users")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 499));
    let m = rls.metrics();
    assert_eq!(
        metric(&m, "tollgate_rls_requests_total{code=\"invalid_argument\"}"),
        4
    );
}

/// Bytes sent as the request message as they are, and the answer's bytes
/// back: for messages a generated client would never write.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        let n = bytes::Buf::remaining(src);
        Ok(Some(bytes::Buf::copy_to_bytes(src, n).to_vec()))
    }
}

async fn call_raw(addr: &str, message: Vec<u8>) -> Result<RateLimitResponse, tonic::Status> {
    use prost::Message;
    let channel = Channel::from_shared(addr.to_owned())
        .expect("address")
        .connect()
        .await
        .expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    );
    let answer = grpc
        .unary(tonic::Request::new(message), path, RawCodec)
        .await?
        .into_inner();
    Ok(RateLimitResponse::decode(&answer[..]).expect("a RateLimitResponse"))
}

#[tokio::test]
async fn malformed_messages_are_refused_naming_the_field_and_spend_nothing() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_1]).await;
    // domain "mongo_cps"; one descriptor of one entry (database, users);
    // the value's bytes are `users` unless changed below.
    let message = |value: &[u8], hits: &[u8]| {
        let entry = [
            &[0x0a, 8][..],
            b"database",
            &[0x12, value.len() as u8],
            value,
        ]
        .concat();
        let descriptor = [&[0x0a, entry.len() as u8][..], &entry, hits].concat();
        [
            &[0x0a, 9][..],
            b"mongo_cps",
            &[0x12, descriptor.len() as u8],
            &descriptor,
        ]
        .concat()
    };
    let refused = [
        (
            message(b"us\xffrs", &[]),
            "the request message: descriptors[0].entries[0].value: a string is not UTF-8",
        ),
        (
            message(b"users", &[0x1a, 9, 0x08]),
            "the request message: descriptors[0].hits_addend: the bytes end inside a field",
        ),
        (
            [&message(b"users", &[])[..], &[0x18, 0xff]].concat(),
            "the request message: hits_addend: the bytes end inside a field",
        ),
    ];
    for (bytes, expected) in refused {
        let status = call_raw(&rls.addr, bytes).await.expect_err("refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(status.message(), expected);
    }
    // A descriptor's hits_addend sent twice: the last wins, as for every
    // protobuf reader (Envoy's own, envoyproxy/ratelimit's).
    let twice = message(b"users", &[0x1a, 2, 0x08, 1, 0x1a, 3, 0x08, 0xc8, 0x01]);
    let r = call_raw(&rls.addr, twice).await.expect("answered");
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 300));
    // The refused messages spent nothing: 500 - 200, then one more.
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "users")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 299));
    let m = rls.metrics();
    assert_eq!(
        metric(&m, "tollgate_rls_requests_total{code=\"invalid_argument\"}"),
        3
    );
}

// ---- tollgate's additions ----

#[tokio::test]
async fn response_headers_carry_the_ratelimit_fields_and_retry_after() {
    let file = "domain: api
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 2
";
    let mut rls = Rls::start(
        "server: {watch_interval_ms: 0, grpc_response_headers: true}\nenvoy_ratelimit_configs: [api.yaml]\n",
        &[("api.yaml", file)],
    )
    .await;
    let headers = |r: &RateLimitResponse| -> Vec<(String, String)> {
        r.response_headers_to_add
            .iter()
            .map(|h| (h.key.clone(), h.value.clone()))
            .collect()
    };
    let r = rls.ask("api", vec![desc(&[("user", "u1")])]).await;
    assert_eq!(
        headers(&r),
        [
            (
                "ratelimit-policy".to_owned(),
                "\"api.user\";q=2;w=60".to_owned()
            ),
            ("ratelimit".to_owned(), "\"api.user\";r=1;t=40".to_owned()),
        ]
    );
    rls.ask("api", vec![desc(&[("user", "u1")])]).await;
    rls.clock.advance(30_500);
    let r = rls.ask("api", vec![desc(&[("user", "u1")])]).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(
        headers(&r),
        [
            (
                "ratelimit-policy".to_owned(),
                "\"api.user\";q=2;w=60".to_owned()
            ),
            ("ratelimit".to_owned(), "\"api.user\";r=0;t=10".to_owned()),
            ("retry-after".to_owned(), "10".to_owned()),
        ]
    );
}

/// What `response_headers_to_add` holds, in order.
fn added_headers(r: &RateLimitResponse) -> Vec<(String, String)> {
    r.response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test]
async fn a_fast_bucket_states_its_rate_per_second_over_grpc_as_over_http() {
    // The HTTP test (answers.rs) states this policy `"per-ip";q=1000;w=1`.
    let config = "server: {watch_interval_ms: 0, grpc_response_headers: true}
envoy_ratelimit_configs: [api.yaml]
policies:
  - name: per-ip
    algorithm: gcra
    capacity: 50
    refill: {tokens: 1000, per: 1s}
";
    let file = "domain: api
descriptors:
  - key: ip
    tollgate: {policy: per-ip}
  - key: client
    rate_limit: {unit: second, requests_per_unit: 1000}
    tollgate: {algorithm: gcra, capacity: 50}
";
    let mut rls = Rls::start(config, &[("api.yaml", file)]).await;
    let r = rls.ask("api", vec![desc(&[("ip", "10.0.0.1")])]).await;
    assert_eq!(r.overall_code, OK);
    // 50 at 1000/s refills within a second: 1000 a second, not "50 a second".
    assert_eq!(
        added_headers(&r),
        pairs(&[
            ("ratelimit-policy", "\"per-ip\";q=1000;w=1"),
            ("ratelimit", "\"per-ip\";r=49;t=1"),
        ])
    );
    let r = rls.ask("api", vec![desc(&[("client", "c")])]).await;
    assert_eq!(
        added_headers(&r),
        pairs(&[
            ("ratelimit-policy", "\"api.client\";q=1000;w=1"),
            ("ratelimit", "\"api.client\";r=49;t=1"),
        ])
    );
    // Sent at once only the burst passes; the quota stated stays the rate.
    let r = rls.spend("api", &[("ip", "10.0.0.1")], 50).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(
        added_headers(&r),
        pairs(&[
            ("ratelimit-policy", "\"per-ip\";q=1000;w=1"),
            ("ratelimit", "\"per-ip\";r=0;t=1"),
            ("retry-after", "1"),
        ])
    );
}

#[tokio::test]
async fn a_sub_second_window_states_the_whole_windows_of_a_second_over_grpc() {
    let file = "domain: api
descriptors:
  - key: burst
    tollgate: {algorithm: fixed_window, limit: 10, window: 100ms}
  - key: counter
    tollgate: {algorithm: sliding_window, limit: 10, window: 100ms}
";
    let mut rls = Rls::start(
        "server: {watch_interval_ms: 0, grpc_response_headers: true}\nenvoy_ratelimit_configs: [api.yaml]\n",
        &[("api.yaml", file)],
    )
    .await;
    let r = rls
        .ask(
            "api",
            vec![desc(&[("burst", "k")]), desc(&[("counter", "k")])],
        )
        .await;
    assert_eq!(r.overall_code, OK);
    // Ten windows of 10 a second; the counter L − 2 a window (docs/http-api.md).
    assert_eq!(
        added_headers(&r),
        pairs(&[
            (
                "ratelimit-policy",
                "\"api.burst\";q=100;w=1, \"api.counter\";q=80;w=1"
            ),
            (
                "ratelimit",
                "\"api.burst\";r=9;t=1, \"api.counter\";r=9;t=1"
            ),
        ])
    );
    // T0 starts a window: the eleventh of it waits for the next, 100 ms on.
    let r = rls.spend("api", &[("burst", "k")], 10).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(reset_ms(&r.statuses[0]), 100);
    assert_eq!(
        added_headers(&r),
        pairs(&[
            ("ratelimit-policy", "\"api.burst\";q=100;w=1"),
            ("ratelimit", "\"api.burst\";r=0;t=1"),
            ("retry-after", "1"),
        ])
    );
}

#[tokio::test]
async fn without_the_setting_no_headers_are_added() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_1]).await;
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "users")])])
        .await;
    assert!(r.response_headers_to_add.is_empty());
}

#[tokio::test]
async fn the_tollgate_key_picks_a_token_bucket_or_binds_a_policy() {
    let file = "domain: api
descriptors:
  - key: burst
    rate_limit:
      unit: second
      requests_per_unit: 5
    tollgate:
      algorithm: token_bucket
      capacity: 20
  - key: bound
    tollgate:
      policy: write-api
  - key: sliding
    rate_limit:
      unit: minute
      requests_per_unit: 10
    tollgate: {algorithm: sliding_window}
";
    let config = "server: {watch_interval_ms: 0}
envoy_ratelimit_configs: [api.yaml]
policies:
  - name: write-api
    algorithm: gcra
    capacity: 3
    refill: {tokens: 1, per: 1s}
";
    let mut rls = Rls::start(config, &[("api.yaml", file)]).await;
    // A burst of 20, refilled 5 per second (docs/design.md §3's worked example).
    let r = rls.ask_hits("api", vec![desc(&[("burst", "k")])], 17).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 5, SECOND, 3));
    rls.clock.advance(100);
    let r = rls.ask_hits("api", vec![desc(&[("burst", "k")])], 4).await;
    assert_eq!(brief(&r.statuses[0]), (OVER, 5, SECOND, 3));
    rls.clock.advance(300);
    let r = rls.ask_hits("api", vec![desc(&[("burst", "k")])], 4).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 5, SECOND, 1));
    // The bound gcra policy: capacity 3, 1 per second.
    let r = rls.ask_hits("api", vec![desc(&[("bound", "k")])], 3).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 1, SECOND, 0));
    let r = rls.ask("api", vec![desc(&[("bound", "k")])]).await;
    assert_eq!(brief(&r.statuses[0]), (OVER, 1, SECOND, 0));
    assert_eq!(reset_ms(&r.statuses[0]), 3000);
    let r = rls
        .ask_hits("api", vec![desc(&[("sliding", "k")])], 10)
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 10, MINUTE, 0));
}

#[tokio::test]
async fn an_envoy_file_edit_reloads_with_the_config() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_1]).await;
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "users")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 499));
    std::fs::write(
        rls.dir.path().join("ratelimit/config0.yaml"),
        EXAMPLE_1.replacen("500", "7", 1),
    )
    .expect("write");
    rls.app.reload().expect("reloads");
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "users")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 7, SECOND, 5));
    // A broken file is refused and the previous rules keep serving.
    std::fs::write(rls.dir.path().join("ratelimit/config0.yaml"), "domain: mongo_cps\ndescriptors:\n  - key: database\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
        .expect("write");
    let err = rls.app.reload().expect_err("refused").to_string();
    assert!(
        err.contains(
            "config0.yaml: descriptors[0].rate_limit.unit: invalid rate limit unit \"fortnight\""
        ),
        "{err}"
    );
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "users")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 7, SECOND, 4));
}

#[tokio::test]
async fn the_grpc_health_service_reports_serving() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let rls = Rls::envoy_only(&[EXAMPLE_1]).await;
    let mut health = HealthClient::new(
        Channel::from_shared(rls.addr.clone())
            .expect("uri")
            .connect()
            .await
            .expect("connect"),
    );
    for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        let r = health
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .expect("health")
            .into_inner();
        assert_eq!(r.status, 1, "{service:?} is SERVING");
    }
}

// ---- config faults name the file and the path ----

fn load_error(tollgate_yaml: &str, files: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("dir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, tollgate_yaml).expect("write");
    ServeConfig::load(&path).expect_err("refused").to_string()
}

#[test]
fn malformed_envoy_files_are_refused_with_file_and_path() {
    let top = "envoy_ratelimit_configs: [r.yaml]\n";
    let cases: &[(&str, &str)] = &[
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 3}\n",
            "r.yaml: descriptors[0].rate_limit.burst: unknown key",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        colour: red\n",
            "r.yaml: descriptors[0].descriptors[0].colour: unknown key",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n",
            "r.yaml: descriptors[0].rate_limit: should not specify rate limit unit when unlimited",
        ),
        (
            "descriptors:\n  - key: a\n",
            "r.yaml: config file cannot have an empty domain",
        ),
        (
            "domain: d\ndescriptors:\n  - value: a\n",
            "r.yaml: descriptors[0]: descriptor has an empty key",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n  - key: a\n",
            "r.yaml: descriptors[1]: duplicate descriptor composite key \"a\"",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    value: x\n    share_threshold: true\n",
            "r.yaml: descriptors[0].share_threshold: share_threshold can only be used with wildcard values",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {replaces: [{name: n}], name: n, unit: second, requests_per_unit: 1}\n",
            "r.yaml: descriptors[0].rate_limit.replaces[0]: replaces should not contain name of same descriptor",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    tollgate: {policy: nope}\n",
            "r.yaml: descriptors[0].tollgate.policy: no tollgate policy named \"nope\"",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n    tollgate: {algorithm: leaky}\n",
            "r.yaml: descriptors[0].tollgate",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
            "r.yaml: descriptors[0].rate_limit.requests_per_unit: must be a whole number",
        ),
    ];
    for (file, expected) in cases {
        let err = load_error(top, &[("r.yaml", file)]);
        assert!(err.contains(expected), "expected {expected:?} in {err:?}");
    }
    // A fault at a place in the file shows where, with the lines around it.
    let err = load_error(top, &[("r.yaml", cases[1].0)]);
    assert!(
        err.ends_with(
            "r.yaml:6:9\n  |\n4 |     descriptors:\n5 |       - key: b\n6 |         colour: red\n  |         ^ descriptors[0].descriptors[0].colour: unknown key (expected: key, value, rate_limit, descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold, metadata, tollgate)"
        ),
        "{err}"
    );
    // A bound rule's identity holds one value a key: a key repeated along
    // its path could never be decided, so it is refused at load.
    let bound = "policies:\n  - {name: tenants, algorithm: fixed_window, limit: 5, window: 1m}\nenvoy_ratelimit_configs: [r.yaml]\n";
    let err = load_error(
        bound,
        &[(
            "r.yaml",
            "domain: d\ndescriptors:\n  - key: tenant\n    descriptors:\n      - key: tenant\n        value: vip\n        tollgate: {policy: tenants}\n",
        )],
    );
    assert!(
        err.contains("r.yaml: descriptors[0].descriptors[0].tollgate.policy: a rule bound to policy \"tenants\" cannot repeat the key \"tenant\" of a descriptor above it"),
        "{err}"
    );
    // An unbound rule may repeat a key, as envoyproxy/ratelimit allows, and
    // a bound rule below other keys loads.
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(
        dir.path().join("r.yaml"),
        "domain: d\ndescriptors:\n  - key: tenant\n    descriptors:\n      - key: tenant\n        value: vip\n        rate_limit: {unit: second, requests_per_unit: 1}\n      - key: plan\n        tollgate: {policy: tenants}\n",
    )
    .expect("write");
    std::fs::write(dir.path().join("tollgate.yaml"), bound).expect("write");
    ServeConfig::load(&dir.path().join("tollgate.yaml"))
        .expect("repeated keys without a bound policy load");
    let err = load_error(
        "envoy_ratelimit_configs: [a.yaml, b.yaml]\n",
        &[("a.yaml", EXAMPLE_1), ("b.yaml", EXAMPLE_1)],
    );
    assert!(
        err.contains("b.yaml: duplicate domain \"mongo_cps\""),
        "{err}"
    );
    let err = load_error("envoy_ratelimit_configs: [missing.yaml]\n", &[]);
    assert!(err.contains("missing.yaml: cannot read"), "{err}");
    let err = load_error("envoy_ratelimit_configs: []\n", &[]);
    assert!(
        err.contains("envoy_ratelimit_configs must be a non-empty list"),
        "{err}"
    );
}

#[test]
fn every_longer_unit_loads_as_envoyproxy_ratelimit_counts_it() {
    let dir = tempfile::tempdir().expect("dir");
    let file = "domain: units
descriptors:
  - {key: s, rate_limit: {unit: SECOND, requests_per_unit: 1}}
  - {key: w, rate_limit: {unit: week, requests_per_unit: 1}}
  - {key: m, rate_limit: {unit: Month, requests_per_unit: 1}}
  - {key: y, rate_limit: {unit: year, requests_per_unit: 1}}
";
    std::fs::write(dir.path().join("u.yaml"), file).expect("write");
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, "envoy_ratelimit_configs: [u.yaml]\n").expect("write");
    let config = ServeConfig::load(&path).expect("loads");
    let windows: Vec<u64> = config
        .envoy
        .rules
        .iter()
        .map(|r| match &r.kind {
            tollgate::RuleKind::Limited { policy, .. } => policy.limits().window_ms(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(windows, [1_000, 604_800_000, 2_592_000_000, 31_536_000_000]);
}

// ---- store failures ----

#[tokio::test]
async fn a_store_failure_answers_unavailable_unless_a_failure_mode_is_declared() {
    let mut redis = tollgate_testkit::RedisServer::start().expect("redis-server starts");
    let file = "domain: d
descriptors:
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 5}
    tollgate: {on_store_failure: fail_closed}
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 5}
    tollgate: {on_store_failure: fail_open}
";
    let config = format!(
        "server: {{watch_interval_ms: 0}}\nstore:\n  redis:\n    url: {}\n    timeout: 2s\nenvoy_ratelimit_configs: [d.yaml]\n",
        redis.url()
    );
    let mut rls = Rls::start(&config, &[("d.yaml", file)]).await;
    let r = rls.ask("d", vec![desc(&[("plain", "k")])]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 5, HOUR, 4));
    let r = rls.ask("d", vec![desc(&[("closed", "k")])]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 5, HOUR, 4));
    redis.kill().expect("kill redis");
    // As envoyproxy/ratelimit: an error, so Envoy's failure_mode_deny decides.
    let status = rls
        .call(request("d", vec![desc(&[("plain", "k")])], 0))
        .await
        .expect_err("store down");
    assert_eq!(status.code(), tonic::Code::Unavailable);
    // tollgate's words; the store's own (addresses, replies) stay in the log.
    assert!(
        status
            .message()
            .starts_with("the rate limit store is unavailable"),
        "{}",
        status.message()
    );
    assert!(
        !status.message().contains("127.0.0.1"),
        "{}",
        status.message()
    );
    let r = rls.ask("d", vec![desc(&[("closed", "k")])]).await;
    assert_eq!(r.overall_code, OVER);
    let r = rls.ask("d", vec![desc(&[("open", "k")])]).await;
    assert_eq!(r.overall_code, OK);
    // One limit without a declared mode makes the whole answer an error.
    let status = rls
        .call(request(
            "d",
            vec![desc(&[("open", "k")]), desc(&[("plain", "k")])],
            0,
        ))
        .await
        .expect_err("store down");
    assert_eq!(status.code(), tonic::Code::Unavailable);
    // A declared fail_closed wins over the error.
    let r = rls
        .ask("d", vec![desc(&[("plain", "k")]), desc(&[("closed", "k")])])
        .await;
    assert_eq!(r.overall_code, OVER);
    let m = rls.metrics();
    assert_eq!(
        metric(&m, "tollgate_rls_requests_total{code=\"unavailable\"}"),
        2
    );
}

// ---- many connections, many streams ----

const PER_USER: &str = "domain: fleet
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 50
";

/// Every answer for each user, sorted: (code, remaining, ms until reset).
type Answers = std::collections::BTreeMap<String, Vec<(i32, u32, u64)>>;

fn record(answers: &mut Answers, user: String, r: &RateLimitResponse) {
    assert_eq!(r.statuses.len(), 1, "{r:?}");
    let s = &r.statuses[0];
    assert_eq!(r.overall_code, s.code);
    answers
        .entry(user)
        .or_default()
        .push((s.code, s.limit_remaining, reset_ms(s)));
}

/// 20 users × 80 calls: the first 50 of each user's calls are OK.
fn fleet_calls() -> Vec<String> {
    (0..80)
        .flat_map(|_| (0..20).map(|u| format!("user-{u}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_connections_and_concurrent_streams_answer_exactly_as_sequential_calls() {
    let calls = fleet_calls();
    // Sequentially, on one connection: the reference.
    let mut sequential = Answers::new();
    let mut one = Rls::envoy_only(&[PER_USER]).await;
    for user in &calls {
        let r = one.ask("fleet", vec![desc(&[("user", user)])]).await;
        record(&mut sequential, user.clone(), &r);
    }
    // 16 HTTP/2 connections, each carrying 16 calls at a time.
    let many = Rls::envoy_only(&[PER_USER]).await;
    let (connections, streams) = (16, 16);
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..connections {
        let channel = Channel::from_shared(many.addr.clone())
            .expect("address")
            .connect()
            .await
            .expect("connect");
        for s in 0..streams {
            let mut client = RateLimitServiceClient::new(channel.clone());
            let mine: Vec<String> = calls
                .iter()
                .skip(c * streams + s)
                .step_by(connections * streams)
                .cloned()
                .collect();
            tasks.spawn(async move {
                let mut answered = Vec::with_capacity(mine.len());
                for user in mine {
                    let r = client
                        .should_rate_limit(request("fleet", vec![desc(&[("user", &user)])], 0))
                        .await
                        .expect("answered")
                        .into_inner();
                    answered.push((user, r));
                }
                answered
            });
        }
    }
    let mut concurrent = Answers::new();
    let mut n = 0;
    while let Some(joined) = tasks.join_next().await {
        for (user, r) in joined.expect("task") {
            record(&mut concurrent, user, &r);
            n += 1;
        }
    }
    assert_eq!(n, calls.len());
    for answers in sequential.values_mut().chain(concurrent.values_mut()) {
        answers.sort_unstable();
    }
    // Each user: 50 OK answers, remaining 49 down to 0 each once, then 30
    // over with nothing remaining; the frozen clock (T0) is 20 s into its
    // minute.
    let mut expected: Vec<(i32, u32, u64)> = (0..50).map(|r| (OK, r, 40_000)).collect();
    expected.extend((0..30).map(|_| (OVER, 0, 40_000)));
    expected.sort_unstable();
    assert_eq!(sequential.len(), 20);
    for (user, answers) in &sequential {
        assert_eq!(answers, &expected, "{user}, sequential");
    }
    assert_eq!(concurrent, sequential);
    let text = many.metrics();
    assert_eq!(
        metric(&text, "tollgate_rls_requests_total{code=\"ok\"}"),
        1000
    );
    assert_eq!(
        metric(&text, "tollgate_rls_requests_total{code=\"over_limit\"}"),
        600
    );
}

// ---- Redis: each worker's own lane ----

/// Connections to `redis` other than the one asking.
fn redis_clients(redis: &tollgate_testkit::RedisServer) -> usize {
    redis
        .cli(&["CLIENT", "LIST"])
        .expect("CLIENT LIST")
        .lines()
        .filter(|l| l.contains("cmd=") && !l.contains("cmd=client"))
        .count()
}

#[tokio::test]
async fn on_redis_each_worker_decides_through_its_own_lane() {
    let redis = tollgate_testkit::RedisServer::start().expect("redis-server starts");
    let file = "domain: lanes\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n";
    let config = format!(
        "server: {{watch_interval_ms: 0, http_workers: 2}}\nstore:\n  redis:\n    url: {}\nenvoy_ratelimit_configs: [d.yaml]\n",
        redis.url()
    );
    // The first connection (worker 0 of 2: connections are dealt in turn).
    let mut rls = Rls::start(&config, &[("d.yaml", file)]).await;
    let opened = redis_clients(&redis);
    let mut remaining = 1000;
    let mut ask = async |client: &mut RateLimitServiceClient<Channel>| {
        let r = client
            .should_rate_limit(request("lanes", vec![desc(&[("user", "u")])], 0))
            .await
            .expect("answered")
            .into_inner();
        remaining -= 1;
        assert_eq!(brief(&r.statuses[0]), (OK, 1000, HOUR, remaining));
    };
    // Worker 0's first decision opens its lane: one more connection, which
    // its next decisions share.
    for _ in 0..20 {
        ask(&mut rls.client).await;
    }
    assert_eq!(redis_clients(&redis), opened + 1);
    // A second connection goes to worker 1: its own lane.
    let mut second = RateLimitServiceClient::connect(rls.addr.clone())
        .await
        .expect("connect");
    for _ in 0..20 {
        ask(&mut second).await;
    }
    assert_eq!(redis_clients(&redis), opened + 2);
    // A third goes to worker 0 again, and its lane.
    let mut third = RateLimitServiceClient::connect(rls.addr.clone())
        .await
        .expect("connect");
    for _ in 0..20 {
        ask(&mut third).await;
        ask(&mut second).await;
    }
    assert_eq!(redis_clients(&redis), opened + 2);
    assert_eq!(remaining, 1000 - 80);
}
