//! Shadow mode through the real binary, its wall clock frozen by
//! libfaketime so every figure is exact: a shadow policy is decided, spent
//! and counted but never rejects, sends no RateLimit fields, never vetoes a
//! batch, and the server-wide switch puts an enforced policy in shadow.

mod support;

use std::path::Path;
use std::process::Command;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use serde_json::{Value, json};
use support::{TollgateProcess, check_json, libfaketime, metric, metrics_text, tollgate_bin};
use tonic::transport::Channel;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

const CONFIG: &str = r#"
server:
  trusted_proxies: [127.0.0.1]
policies:
  - name: trial
    algorithm: token_bucket
    capacity: 2
    refill: { tokens: 1, per: 1h }
    mode: shadow
    match: { path_prefix: /api/ }
    identity: [{ header: X-Tenant }]
  - name: enforced
    algorithm: token_bucket
    capacity: 3
    refill: { tokens: 1, per: 1h }
    match: { path_prefix: /api/ }
    identity: [{ header: X-Tenant }]
"#;

/// `tollgate serve` on `yaml`, its wall clock frozen at 2026-01-01 00:00 UTC
/// (the monotonic clock left real), with `env` besides.
fn serve(dir: &Path, yaml: &str, env: &[(&str, &str)]) -> TollgateProcess {
    let path = dir.join("tollgate.yaml");
    std::fs::write(&path, yaml).expect("write config");
    let library = libfaketime();
    let mut all = vec![
        ("LD_PRELOAD", library.as_str()),
        ("FAKETIME", "2026-01-01 00:00:00"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ("TZ", "UTC"),
    ];
    all.extend_from_slice(env);
    TollgateProcess::spawn(&path, &all)
}

fn count(metrics: &str, policy: &str, outcome: &str) -> Option<f64> {
    metric(
        metrics,
        &format!("tollgate_decisions_total{{policy=\"{policy}\",outcome=\"{outcome}\"}}"),
    )
}

/// A token's worth of a 1-per-hour bucket: the wait for one more.
const HOUR_MS: u64 = 3_600_000;

#[tokio::test]
async fn a_shadow_policy_admits_and_counts_what_it_would_have_rejected() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = serve(dir.path(), CONFIG, &[]);
    let client = reqwest::Client::new();
    let ask = || {
        check_json(
            &client,
            &server.base,
            json!({"policy": "trial", "key": "acme"}).to_string(),
        )
    };
    assert_eq!(
        ask().await,
        json!({"allowed": true, "policy": "trial", "limit": 2, "remaining": 1, "retry_after_ms": 0, "reset_after_ms": HOUR_MS, "shadow": true, "would_allow": true})
    );
    assert_eq!(
        ask().await,
        json!({"allowed": true, "policy": "trial", "limit": 2, "remaining": 0, "retry_after_ms": 0, "reset_after_ms": 2 * HOUR_MS, "shadow": true, "would_allow": true})
    );
    // Spent to empty: admitted, and what it would have said besides.
    assert_eq!(
        ask().await,
        json!({"allowed": true, "policy": "trial", "limit": 2, "remaining": 0, "retry_after_ms": HOUR_MS, "reset_after_ms": 2 * HOUR_MS, "shadow": true, "would_allow": false})
    );
    let m = metrics_text(&client, &server.base).await;
    assert_eq!(count(&m, "trial", "allowed"), Some(2.0));
    assert_eq!(count(&m, "trial", "shadow"), Some(1.0));
    assert_eq!(count(&m, "trial", "rejected"), Some(0.0));
    // An enforced policy exports no shadow series.
    assert_eq!(count(&m, "enforced", "shadow"), None);
}

/// One forward-auth call as nginx makes it, for tenant `tenant`.
async fn authorize(client: &reqwest::Client, base: &str, tenant: &str) -> reqwest::Response {
    client
        .get(format!("{base}/v1/authorize"))
        .header("x-original-method", "GET")
        .header("x-original-uri", "/api/orders")
        .header("x-tenant", tenant)
        .send()
        .await
        .expect("authorize")
}

#[tokio::test]
async fn forward_auth_answers_by_the_enforced_policies_alone_and_a_shadow_one_sends_no_fields() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = serve(dir.path(), CONFIG, &[]);
    let client = reqwest::Client::new();
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let r = authorize(&client, &server.base, "acme").await;
        statuses.push(r.status().as_u16());
        let policy = r
            .headers()
            .get("ratelimit-policy")
            .map(|v| v.to_str().expect("ASCII").to_owned());
        let fields = r
            .headers()
            .get("ratelimit")
            .map(|v| v.to_str().expect("ASCII").to_owned());
        // Only the enforced policy speaks.
        assert_eq!(policy.as_deref(), Some("\"enforced\";q=3;w=10800"));
        assert!(
            fields
                .as_deref()
                .is_some_and(|f| f.starts_with("\"enforced\";")),
            "{fields:?}"
        );
        if r.status() == 429 {
            assert_eq!(r.headers()["retry-after"], "3600");
            let body: Value = r.json().await.expect("problem");
            assert_eq!(body["violated-policies"], json!(["enforced"]), "{body}");
        }
    }
    // trial (2) would have rejected the third; only enforced (3) rejects the fourth.
    assert_eq!(statuses, [200, 200, 200, 429]);
    let m = metrics_text(&client, &server.base).await;
    assert_eq!(count(&m, "trial", "allowed"), Some(2.0));
    // The fourth, rejected by enforced, spent nothing of trial and is not its verdict.
    assert_eq!(count(&m, "trial", "shadow"), Some(1.0));
    assert_eq!(count(&m, "enforced", "allowed"), Some(3.0));
    assert_eq!(count(&m, "enforced", "rejected"), Some(1.0));
    // trial's bucket holds what enforcing it would have left: empty.
    let left = check_json(
        &client,
        &server.base,
        json!({"policy": "trial", "key": {"x-tenant": "acme"}, "cost": 0}).to_string(),
    )
    .await;
    assert_eq!(left["remaining"], 0, "{left}");
}

#[tokio::test]
async fn a_mixed_batch_is_decided_by_its_enforced_policies_and_a_rejected_one_spends_no_shadow_budget()
 {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = serve(dir.path(), CONFIG, &[]);
    let client = reqwest::Client::new();
    let batch = |trial_cost: u64| {
        json!({"checks": [
            {"policy": "trial", "key": "k", "cost": trial_cost},
            {"policy": "enforced", "key": "k", "cost": 1},
        ]})
        .to_string()
    };
    let brief = |v: &Value| -> Vec<(bool, Value, i64)> {
        v["decisions"]
            .as_array()
            .expect("decisions")
            .iter()
            .map(|d| {
                (
                    d["allowed"].as_bool().expect("allowed"),
                    d["would_allow"].clone(),
                    d["remaining"].as_i64().expect("remaining"),
                )
            })
            .collect()
    };
    // trial would reject a cost of 3 (capacity 2): the request is admitted,
    // enforced spends, trial spends nothing (a rejection never does).
    let r = check_json(&client, &server.base, batch(3)).await;
    assert_eq!(r["allowed"], true, "{r}");
    assert_eq!(brief(&r), [(true, json!(false), 2), (true, Value::Null, 2)]);
    let r = check_json(&client, &server.base, batch(2)).await;
    assert_eq!(r["allowed"], true);
    assert_eq!(brief(&r), [(true, json!(true), 0), (true, Value::Null, 1)]);
    let r = check_json(&client, &server.base, batch(1)).await;
    assert_eq!(r["allowed"], true);
    assert_eq!(brief(&r), [(true, json!(false), 0), (true, Value::Null, 0)]);
    // enforced rejects: the request fails, trial is only looked at.
    let r = check_json(&client, &server.base, batch(1)).await;
    assert_eq!(r["allowed"], false, "{r}");
    assert_eq!(
        brief(&r),
        [(true, json!(false), 0), (false, Value::Null, 0)]
    );
    let m = metrics_text(&client, &server.base).await;
    assert_eq!(count(&m, "trial", "allowed"), Some(1.0));
    assert_eq!(count(&m, "trial", "shadow"), Some(2.0));
    assert_eq!(count(&m, "enforced", "allowed"), Some(3.0));
    assert_eq!(count(&m, "enforced", "rejected"), Some(1.0));
}

#[tokio::test]
async fn the_server_wide_switch_puts_an_enforced_policy_in_shadow() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = serve(dir.path(), CONFIG, &[("TOLLGATE_SHADOW_MODE", "true")]);
    let client = reqwest::Client::new();
    let mut answers = Vec::new();
    for _ in 0..4 {
        let r = check_json(
            &client,
            &server.base,
            json!({"policy": "enforced", "key": "acme"}).to_string(),
        )
        .await;
        answers.push((
            r["allowed"].clone(),
            r["shadow"].clone(),
            r["would_allow"].clone(),
            r["remaining"].clone(),
        ));
    }
    assert_eq!(
        answers,
        [
            (json!(true), json!(true), json!(true), json!(2)),
            (json!(true), json!(true), json!(true), json!(1)),
            (json!(true), json!(true), json!(true), json!(0)),
            (json!(true), json!(true), json!(false), json!(0)),
        ]
    );
    // Forward auth: admitted, and no RateLimit fields from any policy.
    let r = authorize(&client, &server.base, "acme").await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("ratelimit").is_none());
    assert!(r.headers().get("ratelimit-policy").is_none());
    let m = metrics_text(&client, &server.base).await;
    // Three /v1/check and the forward-auth call (its identity the named
    // part X-Tenant, a bucket of its own); the fourth /v1/check would
    // have been rejected.
    assert_eq!(count(&m, "enforced", "allowed"), Some(4.0));
    assert_eq!(count(&m, "enforced", "shadow"), Some(1.0));
    assert_eq!(count(&m, "enforced", "rejected"), Some(0.0));
}

/// `tollgate explain` on `yaml` with `env`: its stdout.
fn explain(dir: &Path, yaml: &str, env: &[(&str, &str)]) -> String {
    let path = dir.join("explain.yaml");
    std::fs::write(&path, yaml).expect("write config");
    let out = Command::new(tollgate_bin())
        .args(["explain", "--config"])
        .arg(&path)
        .envs(env.iter().copied())
        .env_remove("TOLLGATE_SHADOW_MODE")
        .output()
        .expect("explain");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn explain_says_which_policies_are_in_shadow_and_why() {
    let dir = tempfile::tempdir().expect("temp dir");
    let text = explain(dir.path(), CONFIG, &[]);
    // Each `mode:` field with its wrapped line.
    let lines: Vec<&str> = text.lines().collect();
    let modes: Vec<String> = lines
        .windows(2)
        .filter(|w| w[0].starts_with("  mode: "))
        .map(|w| w.join("\n"))
        .collect();
    assert_eq!(
        modes,
        [
            "  mode: shadow (mode: shadow): decided, spent and counted, never rejects; its would-be rejections\n      \
             count under outcome=\"shadow\""
        ]
    );
    let path = dir.path().join("explain.yaml");
    let out = Command::new(tollgate_bin())
        .args(["explain", "--json", "--config"])
        .arg(&path)
        .arg("--shadow-mode")
        .output()
        .expect("explain --json");
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    // The file's own switch says so once, and puts every policy in shadow.
    let text = explain(
        dir.path(),
        &CONFIG.replace("server:\n", "server:\n  shadow_mode: true\n"),
        &[],
    );
    assert!(text.contains(
        "shadow mode: every policy and envoy rule is decided and counted but never rejects\n    \
         (server.shadow_mode)\n"
    ));
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("  mode: shadow"))
            .count(),
        2
    );
    let modes: Vec<&Value> = v["policies"]
        .as_array()
        .expect("policies")
        .iter()
        .map(|p| &p["mode"])
        .collect();
    assert_eq!(modes, [&json!("shadow"), &json!("shadow")]);
}

#[test]
fn a_bad_mode_is_refused_naming_the_policy_and_the_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, CONFIG.replace("mode: shadow", "mode: dry-run")).expect("write");
    let out = Command::new(tollgate_bin())
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .expect("validate");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("policy \"trial\": mode: must be enforce or shadow, got string \"dry-run\""),
        "{err}"
    );
}

/// A descriptor rule bound to `trial` beside one bound to `enforced`.
const RULES: &str = "domain: shop
descriptors:
  - key: trial
    tollgate: {policy: trial}
  - key: enforced
    tollgate: {policy: enforced}
";

/// One `ShouldRateLimit` of the descriptors `keys` (each `key=acme`):
/// the overall code and each descriptor's (code, remaining).
async fn should_rate_limit(
    client: &mut RateLimitServiceClient<Channel>,
    keys: &[&str],
) -> (i32, Vec<(i32, u32)>) {
    let descriptors = keys
        .iter()
        .map(|k| RateLimitDescriptor {
            entries: vec![Entry {
                key: (*k).to_owned(),
                value: "acme".to_owned(),
            }],
            ..Default::default()
        })
        .collect();
    let r = client
        .should_rate_limit(RateLimitRequest {
            domain: "shop".to_owned(),
            descriptors,
            hits_addend: 1,
        })
        .await
        .expect("ShouldRateLimit")
        .into_inner();
    let statuses = r
        .statuses
        .iter()
        .map(|s| (s.code, s.limit_remaining))
        .collect();
    (r.overall_code, statuses)
}

#[tokio::test]
async fn a_rule_bound_to_a_shadow_policy_answers_ok_and_never_vetoes_over_grpc() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("rules.yaml"), RULES).expect("write rules");
    let yaml = format!("{CONFIG}envoy_ratelimit_configs: [rules.yaml]\n")
        .replace("server:\n", "server:\n  grpc_response_headers: true\n");
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, &yaml).expect("write config");
    let library = libfaketime();
    let (server, grpc) = TollgateProcess::spawn_with_grpc(
        &path,
        &[
            ("LD_PRELOAD", library.as_str()),
            ("FAKETIME", "2026-01-01 00:00:00"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ("TZ", "UTC"),
        ],
    );
    let mut client = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .expect("connect");
    let mut answers = Vec::new();
    for _ in 0..4 {
        answers.push(should_rate_limit(&mut client, &["trial", "enforced"]).await);
    }
    assert_eq!(
        answers,
        [
            (OK, vec![(OK, 1), (OK, 2)]),
            (OK, vec![(OK, 0), (OK, 1)]),
            // trial would have rejected: still OK.
            (OK, vec![(OK, 0), (OK, 0)]),
            // enforced rejects; trial is only looked at.
            (OVER, vec![(OK, 0), (OVER, 0)]),
        ]
    );
    let m = metrics_text(&reqwest::Client::new(), &server.base).await;
    assert_eq!(count(&m, "trial", "allowed"), Some(2.0));
    assert_eq!(count(&m, "trial", "shadow"), Some(1.0));
    assert_eq!(count(&m, "trial", "rejected"), Some(0.0));
    assert_eq!(count(&m, "enforced", "rejected"), Some(1.0));
    let hits = |key: &str, outcome: &str| {
        metric(
            &m,
            &format!(
                "tollgate_rls_hits_total{{domain=\"shop\",key=\"{key}\",outcome=\"{outcome}\"}}"
            ),
        )
    };
    // envoyproxy/ratelimit's own counters: a shadow rejection is shadow_mode.
    assert_eq!(hits("trial", "shadow_mode"), Some(1.0));
    assert_eq!(hits("trial", "over_limit"), Some(0.0));
    // A shadow-only request carries no RateLimit fields.
    let r = client
        .should_rate_limit(RateLimitRequest {
            domain: "shop".to_owned(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "trial".to_owned(),
                    value: "acme".to_owned(),
                }],
                ..Default::default()
            }],
            hits_addend: 1,
        })
        .await
        .expect("ShouldRateLimit")
        .into_inner();
    assert_eq!(r.overall_code, OK);
    assert!(
        r.response_headers_to_add.is_empty(),
        "{:?}",
        r.response_headers_to_add
    );
    drop(server);
}
