//! `server.trace` through a real `tollgate serve`: the decisions it makes,
//! captured as replay input with identities hashed, replay through
//! `tollgate replay` on the same config to the same outcomes.

mod support;

use std::process::Command;

use serde_json::Value;
use support::{TollgateProcess, tollgate_bin};

const KEY: &str = "0123456789abcdef0123456789abcdef-trace-capture";
const TENANT_A: &str = "tenant-alpha-91c2";
const TENANT_B: &str = "tenant-bravo-5e7d";

const CONFIG: &str = r#"
server:
  trace: { path: capture.jsonl, sample_percent: 100 }
policies:
  - name: api
    algorithm: token_bucket
    capacity: 3
    refill: { tokens: 1, per: 1h }
  - name: search
    algorithm: sliding_window
    limit: 2
    window: 1h
"#;

/// The capture's lines, once it holds `n` (the writer is a thread of its own).
fn capture_lines(path: &std::path::Path, n: usize) -> String {
    for _ in 0..2_000 {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= n {
            return text;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    panic!("the capture never held {n} lines");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capture_from_serve_replays_to_the_same_outcomes_without_raw_identities() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, CONFIG).expect("write config");
    let serve = TollgateProcess::spawn(&config, &[("TOLLGATE_IDENTITY_KEY", KEY)]);
    let composite = format!(r#"{{"tenant":"{TENANT_B}","route":"/search"}}"#);
    let requests = [
        ("api", format!("\"{TENANT_A}\""), 1),
        ("api", format!("\"{TENANT_A}\""), 1),
        ("search", composite.clone(), 1),
        ("api", format!("\"{TENANT_B}\""), 3),
        ("api", format!("\"{TENANT_A}\""), 1),
        ("api", format!("\"{TENANT_A}\""), 1),
        ("search", composite.clone(), 1),
        ("search", composite, 1),
        ("api", format!("\"{TENANT_B}\""), 1),
        ("api", format!("\"{TENANT_A}\""), 0),
    ];
    let client = reqwest::Client::new();
    let mut served = Vec::new();
    for (policy, key, cost) in &requests {
        let answer: Value = client
            .post(format!("{}/v1/check", serve.base))
            .body(format!(
                r#"{{"policy":"{policy}","key":{key},"cost":{cost}}}"#
            ))
            .header("content-type", "application/json")
            .send()
            .await
            .expect("a check answer")
            .json()
            .await
            .expect("a JSON answer");
        served.push((answer["allowed"].clone(), answer["remaining"].clone()));
    }
    assert_eq!(
        served
            .iter()
            .map(|(a, _)| a.as_bool().expect("allowed"))
            .collect::<Vec<_>>(),
        [
            true, true, true, true, true, false, true, false, false, true
        ]
    );
    let capture = capture_lines(&dir.path().join("capture.jsonl"), requests.len());
    let metrics = support::metrics_text(&client, &serve.base).await;
    assert_eq!(
        support::metric(&metrics, "tollgate_trace_dropped_total"),
        Some(0.0)
    );
    drop(serve);
    assert_eq!(capture.lines().count(), requests.len(), "{capture}");
    for raw in [TENANT_A, TENANT_B, "/search"] {
        assert!(!capture.contains(raw), "{raw} captured raw: {capture}");
    }
    for (line, (policy, _, cost)) in capture.lines().zip(&requests) {
        let event: Value = serde_json::from_str(line).expect("a JSON line");
        assert_eq!(event["policy"], *policy, "{line}");
        assert_eq!(event["cost"], *cost, "{line}");
        assert!(
            event["key"]
                .as_str()
                .is_some_and(|k| k.starts_with("hash:")),
            "{line}"
        );
        assert!(event["t_ms"].is_u64(), "{line}");
    }

    let (stdout, _) = support::replay_capture(&config, KEY, &[], &capture);
    let replayed: Vec<(Value, Value)> = stdout
        .lines()
        .map(|line| {
            let d: Value = serde_json::from_str(line).expect("a decision line");
            (d["allowed"].clone(), d["remaining"].clone())
        })
        .collect();
    assert_eq!(replayed, served);
}

#[test]
fn a_trace_without_an_identity_key_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, CONFIG).expect("write config");
    let out = Command::new(tollgate_bin())
        .args(["validate", "--config"])
        .arg(&config)
        .env_remove("TOLLGATE_IDENTITY_KEY")
        .output()
        .expect("run validate");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("server.trace hashes the identities it captures with the identity key, so the environment variable TOLLGATE_IDENTITY_KEY must hold it"),
        "{stderr}"
    );
    assert!(!dir.path().join("capture.jsonl").exists());
}

/// `POST /v1/check` with `body`: the answer's JSON.
async fn check(client: &reqwest::Client, base: &str, body: String) -> Value {
    support::check_json(client, base, body).await
}

/// `tollgate replay --summary` of `capture` on `config`: its output lines
/// as JSON.
fn replay_lines(config: &std::path::Path, capture: &str) -> Vec<Value> {
    let (stdout, stderr) = support::replay_capture(config, KEY, &["--summary"], capture);
    assert_eq!(
        stderr,
        // A check counts by its own decision: search in the refused batch
        // would have admitted alone (and spent nothing).
        "api: offered 3 (cost 5), admitted 2 (cost 4), rejected 1 (cost 1), refunded 1 (units 2)\n\
         search: offered 3 (cost 3), admitted 3 (cost 3), rejected 0 (cost 0)\n"
    );
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a decision line"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_and_refunds_replay_as_serve_decided_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, CONFIG).expect("write config");
    let serve = TollgateProcess::spawn(&config, &[("TOLLGATE_IDENTITY_KEY", KEY)]);
    let client = reqwest::Client::new();
    let base = serve.base.as_str();
    let one = |policy: &str, cost: u64| {
        format!(r#"{{"policy":"{policy}","key":"{TENANT_A}","cost":{cost}}}"#)
    };
    let batch = format!(
        r#"{{"checks":[{{"policy":"search","key":"{TENANT_A}"}},{{"policy":"api","key":"{TENANT_A}"}}]}}"#
    );
    // (allowed, remaining) of each check as served, in order; a refund's
    // look with the units it gave back.
    let mut served: Vec<(Value, Value, Value)> = Vec::new();
    let single = |a: Value| (a["allowed"].clone(), a["remaining"].clone(), Value::Null);
    served.push(single(check(&client, base, one("api", 3)).await));
    // api is spent: the batch is refused whole, and search spends nothing.
    let refused = check(&client, base, batch.clone()).await;
    assert_eq!(refused["allowed"], false, "{refused}");
    for d in refused["decisions"].as_array().expect("decisions") {
        served.push(single(d.clone()));
    }
    let refund = check(
        &client,
        base,
        format!(r#"{{"policy":"api","key":"{TENANT_A}","cost":2,"refund":true}}"#),
    )
    .await;
    assert_eq!(refund["refunded"], 2, "{refund}");
    served.push((
        refund["allowed"].clone(),
        refund["remaining"].clone(),
        refund["refunded"].clone(),
    ));
    let admitted = check(&client, base, batch).await;
    assert_eq!(admitted["allowed"], true, "{admitted}");
    for d in admitted["decisions"].as_array().expect("decisions") {
        served.push(single(d.clone()));
    }
    served.push(single(check(&client, base, one("search", 1)).await));
    assert_eq!(
        served
            .iter()
            .map(|(a, r, _)| (
                a.as_bool().expect("allowed"),
                r.as_i64().expect("remaining")
            ))
            .collect::<Vec<_>>(),
        [
            (true, 0),
            (true, 2),  // search alone would admit ...
            (false, 0), // ... but api rejects: nothing spent
            (true, 2),  // the refund's look: 2 back
            (true, 1),
            (true, 1),
            (true, 0), // search kept its 2: the refused batch spent none
        ]
    );
    // Five requests, five lines: a batch is one line of `checks`.
    let capture = capture_lines(&dir.path().join("capture.jsonl"), 5);
    drop(serve);
    let lines: Vec<Value> = capture
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 5, "{capture}");
    assert_eq!(
        lines[1]["checks"].as_array().map(Vec::len),
        Some(2),
        "{capture}"
    );
    assert_eq!(
        (&lines[2]["refund"], &lines[2]["cost"]),
        (&Value::Bool(true), &Value::from(2))
    );
    assert!(!capture.contains(TENANT_A), "captured raw: {capture}");

    let replayed: Vec<(Value, Value, Value)> = replay_lines(&config, &capture)
        .into_iter()
        .map(|d| {
            let refunded = d.get("refunded").cloned().unwrap_or(Value::Null);
            (d["allowed"].clone(), d["remaining"].clone(), refunded)
        })
        .collect();
    assert_eq!(replayed, served);
}

/// A policy whose identity is one header, for forward auth and /v1/check.
const TENANT_CONFIG: &str = r#"
server:
  trace: { path: capture.jsonl, sample_percent: 100 }
policies:
  - name: tenants
    algorithm: token_bucket
    capacity: 2
    refill: { tokens: 1, per: 1h }
    match: { path: /t }
    identity: [header: X-Tenant]
"#;

/// The `r` parameter of an answer's `RateLimit` field (one policy).
fn remaining_field(answer: &reqwest::Response) -> i64 {
    let field = answer.headers()["ratelimit"].to_str().expect("ascii");
    let r = field.split(";r=").nth(1).expect("an r parameter");
    r.split(';')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a number")
}

/// The `/v1/check` key `"x-tenant=acme"` and the header `X-Tenant: acme`
/// display alike but are two budgets: the capture hashes what the store
/// keys by, so they are two keys in it, and replay decides as serve did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identities_that_display_alike_are_two_keys_in_the_capture() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, TENANT_CONFIG).expect("write config");
    let serve = TollgateProcess::spawn(&config, &[("TOLLGATE_IDENTITY_KEY", KEY)]);
    let client = reqwest::Client::new();
    let base = serve.base.as_str();
    let mut served: Vec<(bool, i64)> = Vec::new();
    let by_check = r#"{"policy":"tenants","key":"x-tenant=acme"}"#;
    for _ in 0..2 {
        let a = check(&client, base, by_check.to_owned()).await;
        served.push((
            a["allowed"] == true,
            a["remaining"].as_i64().expect("remaining"),
        ));
    }
    for _ in 0..3 {
        let a = client
            .get(format!("{base}/v1/authorize/t"))
            .header("X-Tenant", "acme")
            .send()
            .await
            .expect("an authorize answer");
        served.push((a.status() == 200, remaining_field(&a)));
    }
    let a = check(&client, base, by_check.to_owned()).await;
    served.push((
        a["allowed"] == true,
        a["remaining"].as_i64().expect("remaining"),
    ));
    assert_eq!(
        served,
        [
            (true, 1),
            (true, 0),
            (true, 1),
            (true, 0),
            (false, 0),
            (false, 0)
        ]
    );
    let capture = capture_lines(&dir.path().join("capture.jsonl"), served.len());
    drop(serve);
    let keys: Vec<String> = capture
        .lines()
        .map(|l| {
            let event: Value = serde_json::from_str(l).expect("a JSON line");
            event["key"].as_str().expect("a key").to_owned()
        })
        .collect();
    assert_eq!(keys.len(), 6, "{capture}");
    assert_ne!(keys[0], keys[2], "two budgets, two keys: {capture}");
    assert_eq!(
        (&keys[0], &keys[1], &keys[5]),
        (&keys[0], &keys[0], &keys[0])
    );
    assert_eq!((&keys[3], &keys[4]), (&keys[2], &keys[2]));

    let (stdout, _) = support::replay_capture(&config, KEY, &[], &capture);
    let replayed: Vec<(bool, i64)> = stdout
        .lines()
        .map(|line| {
            let d: Value = serde_json::from_str(line).expect("a decision line");
            (
                d["allowed"] == true,
                d["remaining"].as_i64().expect("remaining"),
            )
        })
        .collect();
    assert_eq!(replayed, served);
}
