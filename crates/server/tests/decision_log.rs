//! The per-decision debug log through a real `tollgate serve`: exactly the
//! sampled decisions, with their fields, identities hashed as the hot
//! identity series hash them; and refused requests logged with their
//! status and reason.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;
use support::tollgate_bin;

const KEY: &str = "0123456789abcdef0123456789abcdef-decision-log";
const TENANT: &str = "acme-tenant-7f3a";

fn config(server: &str) -> String {
    format!(
        r#"
server:
{server}
policies:
  - name: api
    algorithm: fixed_window
    limit: 3
    window: 1h
"#
    )
}

/// `tollgate serve --log-format json` on `yaml`, its stderr in a file, the
/// decision and request targets at debug; `requests` sent, then its log
/// lines parsed.
async fn serve_and_log(yaml: &str, requests: &[&str]) -> (Vec<Value>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, yaml).expect("write config");
    let stderr = dir.path().join("stderr");
    let mut child = Command::new(tollgate_bin())
        .args([
            "serve",
            "--log-format",
            "json",
            "--listen",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&config)
        .env(
            "RUST_LOG",
            "info,tollgate::decision=debug,tollgate::request=debug",
        )
        .env("TOLLGATE_IDENTITY_KEY", KEY)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).expect("stderr file"))
        .spawn()
        .expect("spawn tollgate serve");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("a listen line");
    let announced: Value = serde_json::from_str(&first).expect("a JSON listen line");
    let base = announced["listening"]
        .as_str()
        .expect("listening")
        .to_owned();
    let client = reqwest::Client::new();
    for body in requests {
        client
            .post(format!("{base}/v1/check"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("a check answer");
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = read(&stderr);
    let lines = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("every log line is JSON"))
        .collect();
    (lines, text)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).expect("read the log")
}

fn check(cost: u64) -> String {
    format!(r#"{{"policy":"api","key":"{TENANT}","cost":{cost}}}"#)
}

fn targeted<'a>(lines: &'a [Value], target: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["target"] == target).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_decision_is_logged_at_one_hundred_percent_with_a_hashed_identity() {
    let bodies: Vec<String> = (0..5).map(|_| check(1)).collect();
    let requests: Vec<&str> = bodies.iter().map(String::as_str).collect();
    let yaml = config("  decision_log: { sample_percent: 100 }");
    let (lines, text) = serve_and_log(&yaml, &requests).await;
    let decisions = targeted(&lines, "tollgate::decision");
    assert_eq!(decisions.len(), 5, "{text}");
    let hash = decisions[0]["fields"]["identity"]
        .as_str()
        .expect("identity");
    assert!(hash.starts_with("hash:"), "{hash}");
    let outcomes: Vec<(&str, i64)> = decisions
        .iter()
        .map(|d| {
            let f = &d["fields"];
            assert_eq!(d["level"], "DEBUG");
            assert_eq!(f["message"], "decision");
            assert_eq!(f["policy"], "api");
            assert_eq!(f["identity"], hash);
            assert_eq!(f["cost"], 1);
            assert_eq!(f["store"], "local");
            assert_eq!(f["degraded"], "none");
            assert!(f["latency_us"].is_u64(), "{f}");
            (
                f["outcome"].as_str().expect("outcome"),
                f["remaining"].as_i64().expect("remaining"),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        vec![
            ("allowed", 2),
            ("allowed", 1),
            ("allowed", 0),
            ("rejected", 0),
            ("rejected", 0)
        ]
    );
    assert!(!text.contains(TENANT), "a raw identity was logged: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sample_spreads_evenly_and_zero_or_absent_logs_none() {
    let bodies: Vec<String> = (0..6).map(|_| check(0)).collect();
    let requests: Vec<&str> = bodies.iter().map(String::as_str).collect();
    for (server, expected) in [
        ("  decision_log: { sample_percent: 50 }", 3),
        ("  decision_log: { sample_percent: 0 }", 0),
        ("  listen: 127.0.0.1:0", 0),
    ] {
        let (lines, text) = serve_and_log(&config(server), &requests).await;
        let decisions = targeted(&lines, "tollgate::decision");
        assert_eq!(decisions.len(), expected, "{server}: {text}");
        assert!(!text.contains(TENANT), "{server}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_hot_identity_metrics_log_identities_raw() {
    let yaml = config("  decision_log: { sample_percent: 100 }\n  hot_identity_metrics: raw");
    let (lines, text) = serve_and_log(&yaml, &[&check(1)]).await;
    let decisions = targeted(&lines, "tollgate::decision");
    assert_eq!(decisions.len(), 1, "{text}");
    assert_eq!(decisions[0]["fields"]["identity"], TENANT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_is_logged_with_its_status_and_reason() {
    let yaml = config("  listen: 127.0.0.1:0");
    let unknown = r#"{"policy":"nope","key":"k","cost":1}"#;
    let (lines, text) = serve_and_log(&yaml, &[unknown]).await;
    let refused = targeted(&lines, "tollgate::request");
    assert_eq!(refused.len(), 1, "{text}");
    let fields = &refused[0]["fields"];
    assert_eq!(refused[0]["level"], "DEBUG");
    assert_eq!(fields["message"], "request refused");
    assert_eq!(fields["status"], 404);
    assert_eq!(fields["reason"], "unknown policy \"nope\"");
}
