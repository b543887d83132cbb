//! `tollgate replay --store redis://...`: the vectors through Redis's
//! scripts at each event's own time give the expected lines exactly, under
//! a prefix of the replay's own that never touches a serving tollgate's
//! keys; and a trace's keys are spelled as `/v1/check` spells them.

mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use support::TollgateProcess;
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

/// `tollgate replay --config <config> <args>` fed `trace`, to completion.
fn replay(config: &Path, args: &[&str], trace: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["replay", "--config"])
        .arg(config)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tollgate runs");
    let mut stdin = child.stdin.take().expect("stdin");
    let trace = trace.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(trace.as_bytes()));
    let output = child.wait_with_output().expect("tollgate finishes");
    // A refused replay may exit before reading: a broken pipe is expected.
    let _ = writer.join().expect("writer");
    output
}

/// Every key under `pattern` with its DUMP (type, value and encoding).
fn dumps(redis: &RedisServer, pattern: &str) -> BTreeMap<String, String> {
    let keys = redis.cli(&["--scan", "--pattern", pattern]).expect("scan");
    keys.lines()
        .map(|key| {
            let dump = redis.cli(&["--no-raw", "dump", key]).expect("dump");
            (key.to_owned(), dump)
        })
        .collect()
}

const POLICIES: &str = "policies:\n  - {name: api, algorithm: token_bucket, capacity: 5, refill: {tokens: 1, per: 1h}}\n  - {name: login, algorithm: sliding_log, limit: 3, window: 10m}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_beside_a_serve_on_one_redis_leaves_every_serve_key_byte_identical() {
    let redis = RedisServer::start().expect("redis-server starts");
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(
        &config,
        format!("store: {{redis: {{url: \"{}\"}}}}\n{POLICIES}", redis.url()),
    )
    .expect("write config");
    let serve = TollgateProcess::spawn(&config, &[]);
    let client = reqwest::Client::new();
    for (policy, key, cost) in [
        ("api", "acme", 3),
        ("login", "10.0.0.1", 2),
        ("api", "other", 5),
    ] {
        let body = format!(r#"{{"policy":"{policy}","key":"{key}","cost":{cost}}}"#);
        support::check_json(&client, &serve.base, body).await;
    }
    let before = dumps(&redis, "tollgate:*");
    assert_eq!(
        before.keys().cloned().collect::<Vec<_>>(),
        [
            "tollgate:api:token_bucket:{acme}",
            "tollgate:api:token_bucket:{other}",
            "tollgate:live",
            "tollgate:login:sliding_log:{10.0.0.1}",
        ],
        "the serve's three states and its live mark"
    );

    // The same policies and keys, spending everything, at times long past.
    let trace: String = (0..20)
        .flat_map(|i| {
            [
                format!("{{\"t_ms\": {i}, \"policy\": \"api\", \"key\": \"acme\", \"cost\": 5}}\n"),
                format!("{{\"t_ms\": {i}, \"policy\": \"login\", \"key\": \"10.0.0.1\"}}\n"),
            ]
        })
        .collect();
    let output = replay(&config, &["--store", &redis.url()], &trace);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines = String::from_utf8(output.stdout).expect("UTF-8");
    assert_eq!(lines.lines().count(), 40);
    // Its own state: the api bucket at acme was full for the replay.
    assert!(
        lines
            .lines()
            .next()
            .expect("a line")
            .contains(r#""allowed": true"#),
        "{lines}"
    );

    assert_eq!(
        dumps(&redis, "tollgate:*"),
        before,
        "the serve's keys, byte for byte"
    );
    let replays = dumps(&redis, "tollgate-replay:*");
    assert_eq!(
        replays.keys().cloned().collect::<Vec<_>>(),
        [
            "tollgate-replay:api:token_bucket:{acme}",
            "tollgate-replay:login:sliding_log:{10.0.0.1}",
            "tollgate-replay:replay",
        ]
    );
    // And the serve still decides from its own state: acme has 2 left.
    let answer = support::check_json(
        &client,
        &serve.base,
        r#"{"policy":"api","key":"acme","cost":0}"#.to_owned(),
    )
    .await;
    assert_eq!(answer["remaining"], 2);
}

#[test]
fn a_replay_refuses_to_write_where_a_serves_keys_are_unless_told() {
    let redis = RedisServer::start().expect("redis-server starts");
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("policies.yaml");
    std::fs::write(&config, POLICIES).expect("write config");
    let trace = "{\"t_ms\": 0, \"policy\": \"api\", \"key\": \"acme\"}\n";
    let url = redis.url();
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();

    // serve's default prefix, even empty.
    let refused = replay(&config, &["--store", &url, "--prefix", "tollgate"], trace);
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(
        stderr(&refused),
        "tollgate: store: store misconfigured: --prefix \"tollgate\" is where `serve` keeps its keys by default: a replay would spend or reset live limits there; choose another --prefix, or pass --write-live-keys to write there anyway\n"
    );
    assert_eq!(
        redis.cli(&["dbsize"]).expect("dbsize").trim(),
        "0",
        "nothing written"
    );

    // A prefix holding a key no replay wrote (a serve with prefix: live).
    redis
        .cli(&["set", "live:login:sliding_log:{10.0.0.9}", "0;0:1"])
        .expect("set");
    let refused = replay(&config, &["--store", &url, "--prefix", "live"], trace);
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(
        stderr(&refused),
        "tollgate: store: store misconfigured: keys under \"live\" were not written by a replay (one is \"live:login:sliding_log:{10.0.0.9}\"): a replay would spend or reset live limits there; choose another --prefix, or pass --write-live-keys to write there anyway\n"
    );
    assert_eq!(
        redis.cli(&["dbsize"]).expect("dbsize").trim(),
        "1",
        "nothing written"
    );

    // Told explicitly, it writes there.
    let told = replay(
        &config,
        &["--store", &url, "--prefix", "live", "--write-live-keys"],
        trace,
    );
    assert!(told.status.success(), "{}", stderr(&told));

    // A prefix a replay marked is a replay's: the next replay continues there.
    for _ in 0..2 {
        let again = replay(&config, &["--store", &url, "--prefix", "mine"], trace);
        assert!(again.status.success(), "{}", stderr(&again));
    }
    let pttl: i64 = redis
        .cli(&["pttl", "mine:replay"])
        .expect("pttl")
        .trim()
        .parse()
        .expect("int");
    assert!(pttl > 0 && pttl <= 86_400_000, "the mark has a TTL: {pttl}");
}

#[test]
fn a_replay_takes_object_keys_as_v1_check_spells_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("policies.yaml");
    std::fs::write(&config, POLICIES).expect("write config");
    // One identity, its parts in either order; then a part named twice.
    let trace = concat!(
        "{\"t_ms\": 0, \"policy\": \"api\", \"key\": {\"tenant\": \"acme\", \"route\": \"/x\"}, \"cost\": 4}\n",
        "{\"t_ms\": 1, \"policy\": \"api\", \"key\": {\"route\": \"/x\", \"tenant\": \"acme\"}, \"cost\": 2}\n",
        "{\"t_ms\": 2, \"policy\": \"api\", \"key\": {\"tenant\": \"acme\", \"tenant\": \"other\"}}\n",
        "{\"t_ms\": 3, \"policy\": \"api\", \"key\": {\"tenant\": 7}}\n",
    );
    let output = replay(&config, &["--format", "full", "--skip-bad-lines"], trace);
    assert_eq!(output.status.code(), Some(3), "two lines skipped");
    let lines: Vec<serde_json::Value> = String::from_utf8(output.stdout)
        .expect("UTF-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        lines[0]["key"],
        serde_json::json!({"tenant": "acme", "route": "/x"})
    );
    assert_eq!(lines[0]["allowed"], true);
    assert_eq!(lines[0]["remaining"], 1);
    // The reordered key is the same identity: 1 left, cost 2 refused.
    assert_eq!(lines[1]["allowed"], false);
    assert_eq!(lines[1]["remaining"], 1);
    let stderr = String::from_utf8(output.stderr).expect("UTF-8");
    let errors: Vec<&str> = stderr.lines().collect();
    assert_eq!(errors.len(), 2, "{stderr}");
    assert_eq!(
        errors[0],
        "tollgate: line 3: key: identity part \"tenant\" appears twice (skipped)"
    );
    assert!(
        errors[1].starts_with(
            "tollgate: line 4: not a trace event: invalid type: integer `7`, expected a string"
        ),
        "{}",
        errors[1]
    );
}

/// A replay's mark left under a prefix that a serving tollgate later uses
/// does not let the next replay write there: the serve marks the prefix
/// live (and takes the replay's mark off), and replay refuses a live
/// prefix whatever else it holds. The serve's exhausted login stays so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_refuses_a_prefix_a_serve_marks_live_whatever_a_replay_left_there() {
    let redis = RedisServer::start().expect("redis-server starts");
    // An earlier replay's mark, under the prefix a serve is then given.
    redis
        .cli(&["set", "shared:replay", "written by tollgate replay"])
        .expect("set");
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(
        &config,
        format!(
            "store: {{redis: {{url: \"{}\", prefix: shared}}}}\n{POLICIES}",
            redis.url()
        ),
    )
    .expect("write config");
    let serve = TollgateProcess::spawn(&config, &[]);
    let client = reqwest::Client::new();
    let login = r#"{"policy":"login","key":"10.0.0.9"}"#;
    let mut remaining = Vec::new();
    for _ in 0..4 {
        let answer = support::check_json(&client, &serve.base, login.to_owned()).await;
        remaining.push((answer["allowed"].clone(), answer["remaining"].clone()));
    }
    assert_eq!(
        remaining,
        [(true, 2), (true, 1), (true, 0), (false, 0)]
            .map(|(a, r)| (serde_json::Value::from(a), serde_json::Value::from(r)))
    );
    assert_eq!(
        redis
            .cli(&["exists", "shared:replay"])
            .expect("exists")
            .trim(),
        "0"
    );
    let ttl: u64 = redis
        .cli(&["pttl", "shared:live"])
        .expect("pttl")
        .trim()
        .parse()
        .expect("a TTL");
    assert!((1..=60_000).contains(&ttl), "a bounded live mark: {ttl}");

    let trace = "{\"t_ms\": 0, \"policy\": \"login\", \"key\": \"10.0.0.9\"}\n";
    let before = dumps(&redis, "shared:*");
    let refused = replay(
        &config,
        &["--store", &redis.url(), "--prefix", "shared"],
        trace,
    );
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr),
        "tollgate: store: store misconfigured: a serving tollgate marks \"shared\" as its own (shared:live, refreshed while it serves), whatever a replay left there: a replay would spend or reset live limits there; choose another --prefix, or pass --write-live-keys to write there anyway\n"
    );
    assert_eq!(dumps(&redis, "shared:*"), before, "nothing written");
    // The serve's login is still exhausted, exactly.
    let answer = support::check_json(
        &client,
        &serve.base,
        r#"{"policy":"login","key":"10.0.0.9","cost":0}"#.to_owned(),
    )
    .await;
    assert_eq!(answer["remaining"], 0, "{answer}");
    let answer = support::check_json(&client, &serve.base, login.to_owned()).await;
    assert_eq!(answer["allowed"], false, "{answer}");
}
