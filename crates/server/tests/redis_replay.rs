//! `tollgate replay --store redis://...`: the vectors through Redis's
//! scripts at each event's own time give the expected lines exactly.

use std::io::Write;
use std::process::{Command, Stdio};

use tollgate_testkit::RedisServer;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/vectors");

#[test]
fn the_vectors_replay_line_for_line_through_redis() {
    let redis = RedisServer::start().expect("redis-server starts");
    let events = std::fs::read(format!("{VECTORS}/events.jsonl")).expect("events");
    let expected = std::fs::read_to_string(format!("{VECTORS}/expected.jsonl")).expect("expected");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["replay", "--config", &format!("{VECTORS}/policies.yaml")])
        .args(["--store", &redis.url()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tollgate runs");
    let mut stdin = child.stdin.take().expect("stdin");
    // Written from a thread so a full stdout pipe cannot stall the write.
    let writer = std::thread::spawn(move || stdin.write_all(&events));
    let output = child.wait_with_output().expect("tollgate finishes");
    writer.join().expect("writer").expect("events written");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let got = String::from_utf8(output.stdout).expect("utf-8");
    let parse = |text: &str| -> Vec<serde_json::Value> {
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect()
    };
    let (got, expected) = (parse(&got), parse(&expected));
    assert_eq!(got.len(), expected.len());
    for (line, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g, e, "line {}", line + 1);
    }
    // The keys it wrote carry TTLs like any other.
    let keys = redis.cli(&["--scan"]).expect("scan");
    let key = keys.lines().next().expect("some key");
    let pttl: i64 = redis
        .cli(&["pttl", key])
        .expect("pttl")
        .trim()
        .parse()
        .expect("int");
    assert!(pttl > 0, "{key}: {pttl}");
}

#[test]
fn an_unknown_store_is_refused() {
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["replay", "--config", &format!("{VECTORS}/policies.yaml")])
        .args(["--store", "postgres://nope"])
        .stdin(Stdio::null())
        .output()
        .expect("tollgate runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--store"));
}
