//! `server.trace` through a real `tollgate serve`: the decisions it makes,
//! captured as replay input with identities hashed, replay through
//! `tollgate replay` on the same config to the same outcomes.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};

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

    let mut replay = Command::new(tollgate_bin())
        .args(["replay", "--config"])
        .arg(&config)
        .env("TOLLGATE_IDENTITY_KEY", KEY)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate replay");
    replay
        .stdin
        .take()
        .expect("stdin")
        .write_all(capture.as_bytes())
        .expect("feed the capture");
    let out = replay.wait_with_output().expect("replay output");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replayed: Vec<(Value, Value)> = String::from_utf8_lossy(&out.stdout)
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
