//! envoyproxy/ratelimit's README, examples 1-11: each file loaded unchanged
//! decides as the README says.

use crate::harness::*;
use crate::support::metric;

pub const EXAMPLE_1: &str = "domain: mongo_cps
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

pub const EXAMPLE_3: &str = "domain: edge_proxy_per_ip
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

pub const EXAMPLE_5: &str = "domain: internal
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
        Some(1_000_000.0)
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
        Some(10.0)
    );
    assert_eq!(
        metric(
            &m,
            &format!("tollgate_rls_hits_total{{{key},outcome=\"shadow_mode\"}}")
        ),
        Some(3.0)
    );
    assert_eq!(
        metric(
            &m,
            &format!("tollgate_rls_hits_total{{{key},outcome=\"over_limit\"}}")
        ),
        Some(0.0)
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
        Some(61.0)
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
