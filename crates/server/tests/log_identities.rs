//! What `tollgate serve` logs at debug never holds a raw identity, nor a
//! client's newline or terminal escape: identities are named by the keyed
//! hash of their encoding (as the hot identity series name them), and
//! client input a log line quotes is escaped, in the text format and in
//! JSON alike.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

use support::tollgate_bin;
use tollgate_core::{Identity, SecretHasher};

const IDENTITY_KEY: &str = "log-identities-test-key-of-32-bytes!!";

const CONFIG: &str = "server:\n  decision_log: { sample_percent: 100 }\npolicies:\n  - {name: tiny, algorithm: token_bucket, capacity: 1, refill: {tokens: 1, per: 1h}}\n";

/// A key that would forge a log line of its own, in red, were it printed.
const FORGING: &str =
    "acme\n2026-12-03T00:00:00.000000Z  INFO tollgate::serve: forged line\u{1b}[31m";

/// A POST of `body` to /v1/check over a fresh connection.
fn post_check(base: &str, body: &str) {
    let host = base.strip_prefix("http://").expect("http URL");
    let mut stream = std::net::TcpStream::connect(host).expect("connect");
    write!(
        stream,
        "POST /v1/check HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
}

/// Everything `serve` logged in `format` while it decided for the forging
/// key (admitted, rejected twice) and refused a forging policy name.
fn logged(format: &str, config_text: &str) -> String {
    let dir = tempfile::tempdir().expect("dir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, config_text).expect("write config");
    let mut child = Command::new(tollgate_bin())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--log-format",
            format,
            "--config",
        ])
        .arg(&config)
        .env("RUST_LOG", "tollgate=debug")
        .env("TOLLGATE_IDENTITY_KEY", IDENTITY_KEY)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the listen line");
    let base = match serde_json::from_str::<serde_json::Value>(&line) {
        Ok(v) => v["listening"].as_str().expect("listening").to_owned(),
        Err(_) => line
            .trim()
            .strip_prefix("listening on ")
            .expect("a URL")
            .to_owned(),
    };
    let check = serde_json::json!({"policy": "tiny", "key": FORGING}).to_string();
    for _ in 0..3 {
        post_check(&base, &check);
    }
    let unknown = serde_json::json!({"policy": FORGING, "key": "k"}).to_string();
    post_check(&base, &unknown);
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read the log");
    child.wait().expect("serve stops");
    stderr
}

/// The log names the forging key only by its hash, and carries none of
/// its bytes raw.
fn assert_unforged(format: &str, log: &str) {
    let material = format!("tollgate hot identity series\0{IDENTITY_KEY}");
    let hash = SecretHasher::new(material.as_bytes()).hash(Identity::value(FORGING).as_bytes());
    assert!(!log.contains('\u{1b}'), "{format}: an ESC byte in {log}");
    assert!(!log.contains("acme\n"), "{format}: a raw identity in {log}");
    for line in log.lines() {
        assert!(
            !line.starts_with("2026-12-03T00:00:00"),
            "{format}: forged: {line}"
        );
    }
    for (what, needle) in [
        ("a sampled decision", "\"decision\""),
        ("a rejection", "rejected (one line per policy"),
    ] {
        let line = log
            .lines()
            .find(|l| l.contains(needle.trim_matches('"')) && l.contains("tiny"))
            .unwrap_or_else(|| panic!("{format}: no line for {what} in {log}"));
        assert!(
            line.contains(&format!("hash:{hash}")),
            "{format}: {what}: {line}"
        );
    }
    // The refused policy name is quoted escaped and cut.
    let refused = log
        .lines()
        .find(|l| l.contains("request refused"))
        .unwrap_or_else(|| panic!("{format}: no refusal in {log}"));
    assert!(refused.contains("unknown policy"), "{format}: {refused}");
    assert!(
        refused.contains("acme\\\\n2026") || refused.contains("acme\\n2026"),
        "{refused}"
    );
}

#[test]
fn text_logs_name_identities_by_hash_and_escape_client_bytes() {
    let log = logged("text", CONFIG);
    assert_unforged("text", &log);
}

#[test]
fn json_logs_name_identities_by_hash_and_escape_client_bytes() {
    let log = logged("json", CONFIG);
    for line in log.lines() {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("not one JSON event a line ({e}): {line}"));
    }
    assert_unforged("json", &log);
}

/// With `hot_identity_metrics: raw` a log names identities raw, as the
/// series do: by their label, escaped and bounded, never their bytes.
#[test]
fn raw_identities_are_logged_by_their_escaped_label() {
    let raw = CONFIG.replace("server:\n", "server:\n  hot_identity_metrics: raw\n");
    let log = logged("text", &raw);
    let label = Identity::value(FORGING).label();
    assert!(label.starts_with("acme\\n2026-12-03"), "{label}");
    assert!(!log.contains('\u{1b}'), "an ESC byte in {log}");
    assert!(!log.contains("acme\n"), "a raw identity in {log}");
    for line in log.lines() {
        assert!(!line.starts_with("2026-12-03T00:00:00"), "forged: {line}");
    }
    let rejected = log
        .lines()
        .find(|l| l.contains("rejected (one line per policy"))
        .unwrap_or_else(|| panic!("no rejection in {log}"));
    // tracing writes a string field quoted, its backslashes doubled.
    assert!(
        rejected.contains(&label) || rejected.contains(&label.replace('\\', "\\\\")),
        "{rejected}"
    );
}
