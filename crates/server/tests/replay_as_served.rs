//! A real `tollgate serve` with `server.trace` on and shadow policies,
//! driven over HTTP; its capture replayed by `tollgate replay` on the very
//! same config — without the identity key `server.trace` needs to serve —
//! gives every decision `serve` gave: enforced and shadow, single checks,
//! batches mixing both, and refunds; and counts the rejections the shadow
//! policies would have made as `serve`'s metrics count them.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;
use support::{TollgateProcess, tollgate_bin};

const KEY: &str = "replay-as-served-identity-key-of-32-bytes";
const A: &str = "tenant-a-7f3e";
const B: &str = "tenant-b-19c4";

// Long windows: a check's figures here never depend on the millisecond
// `serve` dated it by (see docs/replay.md on retry_after_ms).
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
    mode: shadow
  - name: export
    algorithm: fixed_window
    limit: 2
    window: 24h
    mode: shadow
  - name: log
    algorithm: sliding_log
    limit: 3
    window: 1h
"#;

fn one(policy: &str, key: &str, cost: u64) -> String {
    format!(r#"{{"policy":"{policy}","key":"{key}","cost":{cost}}}"#)
}

fn batch(checks: &[(&str, &str, u64)]) -> String {
    let items: Vec<String> = checks.iter().map(|(p, k, c)| one(p, k, *c)).collect();
    format!(r#"{{"checks":[{}]}}"#, items.join(","))
}

/// The requests, in order: single checks, batches and a refund.
fn requests() -> Vec<String> {
    let mut list = vec![
        one("api", A, 1),
        one("search", A, 1),
        one("search", A, 1),
        // search A would reject: shadow, admitted.
        one("search", A, 1),
        one("export", B, 2),
        one("export", B, 1),
        // api admits, so the shadow search spends and would reject.
        batch(&[("api", A, 1), ("search", A, 1)]),
        one("api", A, 2),
        // api rejects: export only looks, and would have admitted.
        batch(&[("api", A, 2), ("export", A, 1)]),
        r#"{"policy":"api","key":"tenant-a-7f3e","cost":1,"refund":true}"#.to_owned(),
    ];
    list.extend((0..4).map(|_| one("log", B, 1)));
    list.push(batch(&[("log", B, 1), ("search", B, 1)]));
    list.extend((0..3).map(|_| one("search", B, 1)));
    list
}

/// What is compared of one decision: the fields both spell alike.
fn fields(d: &Value) -> Value {
    serde_json::json!([
        d["allowed"],
        d["limit"],
        d["remaining"],
        d["shadow"].as_bool().unwrap_or(false),
        d["would_allow"],
        d["refunded"],
    ])
}

/// `serve`'s decisions of `requests`, one a check, in order.
async fn serve_decisions(client: &reqwest::Client, base: &str) -> Vec<Value> {
    let mut served = Vec::new();
    for body in requests() {
        let answer = support::check_json(client, base, body.clone()).await;
        match answer["decisions"].as_array() {
            Some(decisions) => served.extend(decisions.iter().map(fields)),
            None => served.push(fields(&answer)),
        }
        assert!(answer["allowed"].is_boolean(), "{body}: {answer}");
    }
    served
}

/// The capture, once it holds `n` lines (its writer is a thread).
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

/// `tollgate replay --summary` of `capture` on `config`, with no identity
/// key in its environment: (stdout, stderr).
fn replay_without_key(config: &std::path::Path, capture: &str) -> (String, String) {
    let mut replay = Command::new(tollgate_bin())
        .args(["replay", "--summary", "--config"])
        .arg(config)
        .env_remove("TOLLGATE_IDENTITY_KEY")
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
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capture_with_shadow_policies_replays_to_every_decision_serve_gave() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, CONFIG).expect("write config");
    let serve = TollgateProcess::spawn(&config, &[("TOLLGATE_IDENTITY_KEY", KEY)]);
    let client = reqwest::Client::new();
    let served = serve_decisions(&client, &serve.base).await;
    let metrics = support::metrics_text(&client, &serve.base).await;
    let capture = capture_lines(&dir.path().join("capture.jsonl"), requests().len());
    drop(serve);
    assert_eq!(capture.lines().count(), requests().len(), "{capture}");

    let (stdout, stderr) = replay_without_key(&config, &capture);
    let replayed: Vec<Value> = stdout
        .lines()
        .map(|line| fields(&serde_json::from_str(line).expect("a decision line")))
        .collect();
    assert_eq!(replayed.len(), 21, "{stdout}");
    assert_eq!(replayed, served, "replayed:\n{stdout}");

    // The shadow policies admitted all, and would have rejected what
    // serve counted under outcome="shadow".
    assert_eq!(
        stderr,
        "api: offered 4 (cost 6), admitted 2 (cost 2), rejected 2 (cost 4), refunded 1 (units 1)\n\
         export: offered 3 (cost 4), admitted 3 (cost 4), rejected 0 (cost 0), shadow: would have rejected 1 (cost 1)\n\
         log: offered 5 (cost 5), admitted 3 (cost 3), rejected 2 (cost 2)\n\
         search: offered 8 (cost 8), admitted 8 (cost 8), rejected 0 (cost 0), shadow: would have rejected 3 (cost 3)\n"
    );
    for (policy, outcome, count) in [
        ("search", "shadow", 3.0),
        ("export", "shadow", 1.0),
        ("api", "rejected", 2.0),
        ("log", "rejected", 2.0),
    ] {
        let series =
            format!(r#"tollgate_decisions_total{{policy="{policy}",outcome="{outcome}"}}"#);
        assert_eq!(support::metric(&metrics, &series), Some(count), "{series}");
    }
}

#[test]
fn the_serving_config_replays_without_its_identity_key_and_says_shadow() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, CONFIG).expect("write config");
    let trace = "{\"t_ms\": 0, \"policy\": \"search\", \"key\": \"k\"}\n".repeat(3);
    let (stdout, _) = replay_without_key(&config, &trace);
    // A sliding window's figures at t = 0: the previous window (empty)
    // is weighted in, so the third waits 1.5 h and the state rests in 2 h.
    assert_eq!(
        stdout,
        "{\"allowed\": true, \"limit\": 2, \"remaining\": 1, \"retry_after_ms\": 0, \"reset_after_ms\": 7200000, \"shadow\": true, \"would_allow\": true}\n\
         {\"allowed\": true, \"limit\": 2, \"remaining\": 0, \"retry_after_ms\": 0, \"reset_after_ms\": 7200000, \"shadow\": true, \"would_allow\": true}\n\
         {\"allowed\": true, \"limit\": 2, \"remaining\": 0, \"retry_after_ms\": 5400000, \"reset_after_ms\": 7200000, \"shadow\": true, \"would_allow\": false}\n"
    );
    // Serving it still needs the key.
    let out = Command::new(tollgate_bin())
        .args(["validate", "--config"])
        .arg(&config)
        .env_remove("TOLLGATE_IDENTITY_KEY")
        .output()
        .expect("run validate");
    assert_eq!(out.status.code(), Some(1));
}

/// What only serving needs — tokens it requires, TLS files, the key an API
/// key policy hashes with — is not asked of a replay; `validate` still
/// refuses the config without them.
#[test]
fn settings_only_serving_uses_do_not_stop_a_replay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(
        &config,
        r#"
server:
  require_tokens: [check, admin]
  tls: { cert: missing-cert.pem, key: missing-key.pem }
  trace: { path: capture.jsonl }
policies:
  - name: keyed
    algorithm: fixed_window
    limit: 1
    window: 1h
    identity:
      - api_key: X-Api-Key
"#,
    )
    .expect("write config");
    let trace = "{\"t_ms\": 0, \"policy\": \"keyed\", \"key\": \"hash:0123456789abcdef0123456789abcdef\"}\n"
        .repeat(2);
    let (stdout, stderr) = replay_without_key(&config, &trace);
    assert_eq!(
        stdout,
        "{\"allowed\": true, \"limit\": 1, \"remaining\": 0, \"retry_after_ms\": 0, \"reset_after_ms\": 3600000}\n\
         {\"allowed\": false, \"limit\": 1, \"remaining\": 0, \"retry_after_ms\": 3600000, \"reset_after_ms\": 3600000}\n"
    );
    assert_eq!(
        stderr,
        "keyed: offered 2 (cost 2), admitted 1 (cost 1), rejected 1 (cost 1)\n"
    );
    let out = Command::new(tollgate_bin())
        .args(["validate", "--config"])
        .arg(&config)
        .env_remove("TOLLGATE_IDENTITY_KEY")
        .output()
        .expect("run validate");
    assert_eq!(out.status.code(), Some(1));
    assert!(!dir.path().join("capture.jsonl").exists());
}
