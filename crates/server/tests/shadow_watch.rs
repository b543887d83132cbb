//! Watching a limit in shadow mode through the real binary, its wall clock
//! frozen by libfaketime so every figure is exact: the decision log, the
//! `/v1/check` answer, the decision counters and `GET /v1/hot` tell the
//! same story of whom the shadow policy would have rejected — a request
//! an enforced policy rejected included.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};
use support::{check_json, libfaketime, metric, metrics_text, tollgate_bin};

const KEY: &str = "0123456789abcdef0123456789abcdef-shadow-watch";

/// `trial` is the new limit being tried (2 an hour), `enforced` the one in
/// force (3 an hour); every decision is logged.
const CONFIG: &str = r#"
server:
  decision_log: { sample_percent: 100 }
policies:
  - name: trial
    algorithm: token_bucket
    capacity: 2
    refill: { tokens: 1, per: 1h }
    mode: shadow
  - name: enforced
    algorithm: token_bucket
    capacity: 3
    refill: { tokens: 1, per: 1h }
"#;

/// A `tollgate serve --log-format json` whose stderr goes to a file.
struct Served {
    child: Child,
    base: String,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// The decision log's events so far, as parsed JSON objects.
    fn decisions(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .expect("read the log")
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("every log line is JSON"))
            .filter(|line| line["target"] == "tollgate::decision")
            .collect()
    }
}

/// `tollgate serve` on [`CONFIG`], its wall clock frozen at 2026-01-01
/// 00:00 UTC (the start of a hot-identity window).
fn serve() -> Served {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, CONFIG).expect("write config");
    let log = dir.path().join("stderr");
    let library = libfaketime();
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
        .env("RUST_LOG", "info,tollgate::decision=debug")
        .env("TOLLGATE_IDENTITY_KEY", KEY)
        .env("LD_PRELOAD", &library)
        .env("FAKETIME", "2026-01-01 00:00:00")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("TZ", "UTC")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("stderr file"))
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
    Served {
        child,
        base,
        log,
        _dir: dir,
    }
}

/// `acme`'s identity as the hot identity series and every log line name it.
fn logged_as() -> String {
    let material = format!("tollgate hot identity series\0{KEY}");
    let hash = tollgate_core::SecretHasher::new(material.as_bytes())
        .hash(tollgate_core::Identity::value("acme").as_bytes());
    format!("hash:{hash}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_the_answer_the_counters_and_hot_agree_on_whom_a_shadow_limit_would_reject() {
    let server = serve();
    let client = reqwest::Client::new();
    let batch = json!({"checks": [
        {"policy": "trial", "key": "acme"},
        {"policy": "enforced", "key": "acme"},
    ]})
    .to_string();
    let mut answers = Vec::new();
    for _ in 0..4 {
        let r = check_json(&client, &server.base, batch.clone()).await;
        answers.push((
            r["allowed"].clone(),
            r["decisions"][0]["would_allow"].clone(),
            r["decisions"][1]["allowed"].clone(),
        ));
    }
    // trial (2) would have rejected the third and the fourth; enforced (3)
    // rejects the fourth, which so only looks at trial's bucket.
    assert_eq!(
        answers,
        [
            (json!(true), json!(true), json!(true)),
            (json!(true), json!(true), json!(true)),
            (json!(true), json!(false), json!(true)),
            (json!(false), json!(false), json!(false)),
        ]
    );
    let hash = logged_as();
    let logged: Vec<(String, String, bool, i64)> = server
        .decisions()
        .iter()
        .map(|d| {
            let f = &d["fields"];
            assert_eq!(f["identity"], hash.as_str(), "{d}");
            (
                f["policy"].as_str().expect("policy").to_owned(),
                f["outcome"].as_str().expect("outcome").to_owned(),
                f["allowed"].as_bool().expect("allowed"),
                f["remaining"].as_i64().expect("remaining"),
            )
        })
        .collect();
    let line = |policy: &str, outcome: &str, allowed: bool, remaining: i64| {
        (policy.to_owned(), outcome.to_owned(), allowed, remaining)
    };
    assert_eq!(
        logged,
        [
            line("trial", "shadow_allowed", true, 1),
            line("enforced", "allowed", true, 2),
            line("trial", "shadow_allowed", true, 0),
            line("enforced", "allowed", true, 1),
            line("trial", "shadow_rejected", false, 0),
            line("enforced", "allowed", true, 0),
            // The log says what /v1/check's would_allow said.
            line("trial", "shadow_rejected", false, 0),
            line("enforced", "rejected", false, 0),
        ]
    );
    // The counters and the hot identities count trial's own verdicts: the
    // fourth request was only a look at its state.
    let m = metrics_text(&client, &server.base).await;
    let count = |policy: &str, outcome: &str| {
        metric(
            &m,
            &format!("tollgate_decisions_total{{policy=\"{policy}\",outcome=\"{outcome}\"}}"),
        )
    };
    assert_eq!(count("trial", "allowed"), Some(2.0));
    assert_eq!(count("trial", "shadow"), Some(1.0));
    assert_eq!(count("trial", "rejected"), Some(0.0));
    assert_eq!(count("enforced", "rejected"), Some(1.0));
    let hot: Value = client
        .get(format!("{}/v1/hot", server.base))
        .send()
        .await
        .expect("GET /v1/hot")
        .json()
        .await
        .expect("JSON");
    // The window began as the frozen clock reads: rates are over a second.
    assert_eq!(
        hot["policies"],
        json!([
            {
                "policy": "enforced",
                "by_decisions": [],
                "by_rejections": [],
                "now": {
                    "by_decisions": [{"identity": "acme", "decisions": 4, "per_second": 4.0}],
                    "by_rejections": [{"identity": "acme", "rejections": 1, "per_second": 1.0}],
                },
            },
            {
                "policy": "trial",
                "mode": "shadow",
                "by_decisions": [],
                "by_would_reject": [],
                "now": {
                    "by_decisions": [{"identity": "acme", "logged_as": hash, "decisions": 3, "per_second": 3.0}],
                    "by_would_reject": [{"identity": "acme", "logged_as": hash, "would_reject": 1, "per_second": 1.0}],
                },
            },
        ])
    );
}
