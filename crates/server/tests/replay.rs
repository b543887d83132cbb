//! `tollgate replay` and `tollgate validate`, run as the built binary: the
//! shipped vectors reproduce byte for byte, a malformed line stops the run
//! with status 2 naming the line and the fault (after the decisions of the
//! lines before it), and an invalid config is refused naming the fault.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn vectors(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/vectors")
        .join(name)
}

/// Runs `tollgate replay --config <config>` with `input` on stdin.
fn replay(config: &Path, input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("replay")
        .arg("--config")
        .arg(config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tollgate starts");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_vec();
    // Fed from a thread so a large output cannot block the writer.
    let feeder = std::thread::spawn(move || {
        // tollgate may stop reading early (a malformed line); that is fine.
        let _ = stdin.write_all(&input);
    });
    let output = child.wait_with_output().expect("tollgate runs");
    feeder.join().expect("feeder finished");
    output
}

/// `tollgate <subcommand> --config <config>`, run to completion.
fn run_on_config(subcommand: &str, config: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg(subcommand)
        .arg("--config")
        .arg(config)
        .output()
        .expect("tollgate runs")
}

fn validate(config: &Path) -> Output {
    run_on_config("validate", config)
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).expect("UTF-8 output")
}

/// A config file in a temporary directory (kept alive by the returned guard).
fn config_file(yaml: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("policies.yaml");
    std::fs::write(&path, yaml).expect("write config");
    (dir, path)
}

#[test]
fn shipped_vectors_reproduce_byte_for_byte() {
    let events = std::fs::read(vectors("events.jsonl")).expect("events");
    let expected = std::fs::read(vectors("expected.jsonl")).expect("expected");
    let out = replay(&vectors("policies.yaml"), &events);
    assert_eq!(text(&out.stderr), "");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), text(&expected));
}

const FW: &str =
    "policies:\n  - name: fw\n    algorithm: fixed_window\n    limit: 2\n    window: 1s\n";

#[test]
fn cost_defaults_to_one_and_blank_lines_are_skipped() {
    let (_dir, config) = config_file(FW);
    let out = replay(
        &config,
        b"{\"t_ms\": 1000, \"policy\": \"fw\", \"key\": \"a\"}\n\
          \n\
          {\"t_ms\": 1500, \"policy\": \"fw\", \"key\": \"a\", \"cost\": 1}\n\
          {\"t_ms\": 1999, \"policy\": \"fw\", \"key\": \"a\"}",
    );
    assert_eq!(text(&out.stderr), "");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        "{\"allowed\": true, \"limit\": 2, \"remaining\": 1, \"retry_after_ms\": 0, \"reset_after_ms\": 1000}\n\
         {\"allowed\": true, \"limit\": 2, \"remaining\": 0, \"retry_after_ms\": 0, \"reset_after_ms\": 500}\n\
         {\"allowed\": false, \"limit\": 2, \"remaining\": 0, \"retry_after_ms\": 1, \"reset_after_ms\": 1}\n"
    );
}

#[test]
fn malformed_line_stops_with_status_2_naming_the_line_after_the_lines_before_it() {
    let (_dir, config) = config_file(FW);
    let good = "{\"t_ms\": 1000, \"policy\": \"fw\", \"key\": \"a\", \"cost\": 1}";
    let before = "{\"allowed\": true, \"limit\": 2, \"remaining\": 1, \"retry_after_ms\": 0, \"reset_after_ms\": 1000}\n\
                  {\"allowed\": true, \"limit\": 2, \"remaining\": 0, \"retry_after_ms\": 0, \"reset_after_ms\": 1000}\n";
    let long_key = format!(
        "{{\"t_ms\": 1, \"policy\": \"fw\", \"key\": \"{}\"}}",
        "k".repeat(1 << 20)
    );
    let cases: [(&str, &str); 10] = [
        (
            "{\"t_ms\": 1000, \"policy\": \"fw\"",
            "not a trace event: EOF while parsing an object at line 1 column 29",
        ),
        (
            "garbage",
            "not a trace event: expected value at line 1 column 1",
        ),
        (
            "{\"t_ms\": 1000, \"policy\": \"fw\"}",
            "not a trace event: missing field `key`",
        ),
        (
            "{\"policy\": \"fw\", \"key\": \"a\"}",
            "not a trace event: missing field `t_ms` at line 1 column 28",
        ),
        (
            "{\"t_ms\": 1000, \"policy\": \"fw\", \"key\": \"a\", \"weight\": 1}",
            "not a trace event: unknown field `weight`, expected one of `t_ms`, `policy`, `key`, `cost`, `refund`, `checks` at line 1 column 51",
        ),
        (
            "{\"t_ms\": 1000, \"policy\": \"fw\", \"key\": \"a\", \"cost\": -1}",
            "not a trace event: invalid value: integer `-1`, expected u64 at line 1 column 53",
        ),
        (
            "{\"t_ms\": 1000, \"policy\": \"fw\", \"key\": \"a\", \"cost\": 1.5}",
            "not a trace event: invalid type: floating point `1.5`, expected u64 at line 1 column 54",
        ),
        (
            "{\"t_ms\": -1, \"policy\": \"fw\", \"key\": \"a\"}",
            "not a trace event: invalid value: integer `-1`, expected u64 at line 1 column 11",
        ),
        (
            "{\"t_ms\": 1000, \"policy\": \"nope\", \"key\": \"a\"}",
            "unknown policy \"nope\"",
        ),
        (long_key.as_str(), "longer than 1048576 bytes"),
    ];
    for (bad, fault) in cases {
        // Two good lines, a blank one (still counted), the bad one, then more.
        let input = format!("{good}\n{good}\n\n{bad}\n{good}\n");
        let out = replay(&config, input.as_bytes());
        assert_eq!(out.status.code(), Some(2), "{bad:.80}");
        assert_eq!(
            text(&out.stderr),
            format!("tollgate: line 4: {fault}\n"),
            "{bad:.80}"
        );
        assert_eq!(text(&out.stdout), before, "{bad:.80}");
    }
}

#[test]
fn invalid_config_exits_2_naming_the_fault() {
    let (_dir, config) = config_file("policies:\n  - name: x\n    algorithm: leaky\n");
    let out = replay(
        &config,
        b"{\"t_ms\": 1, \"policy\": \"x\", \"key\": \"a\"}\n",
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stdout), "");
    let message = "policy \"x\": algorithm: unknown algorithm \"leaky\" (expected one of: token_bucket, gcra, fixed_window, sliding_window, sliding_log, concurrency)";
    assert_eq!(
        text(&out.stderr),
        format!(
            "tollgate: {path}: {message}\n --> {path}:3:5\n  |\n1 | policies:\n2 |   - name: x\n3 |     algorithm: leaky\n  |     ^ {message}\n",
            path = config.display()
        )
    );

    let missing = config.with_file_name("absent.yaml");
    let out = replay(&missing, b"");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        format!(
            "tollgate: cannot read config {}: No such file or directory (os error 2)\n",
            missing.display()
        )
    );
}

#[test]
fn validate_prints_each_policy_of_a_valid_config() {
    let config = vectors("policies.yaml");
    let out = validate(&config);
    assert_eq!(text(&out.stderr), "");
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    let (first, rest) = stdout.split_once('\n').expect("several lines");
    let hash = first
        .strip_prefix(&format!("config {} is valid (hash ", config.display()))
        .and_then(|h| h.strip_suffix(')'))
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"));
    assert_eq!(hash.len(), 16, "{hash:?}");
    assert!(hash.chars().all(|c| c.is_ascii_hexdigit()), "{hash:?}");
    assert_eq!(
        rest,
        "tb-seed: token_bucket capacity 20 refill 5 per 1s\n\
         tb-slow: token_bucket capacity 3 refill 1 per 1h\n\
         tb-odd: token_bucket capacity 7 refill 100 per 1m\n\
         gcra-odd: gcra capacity 7 refill 100 per 1m\n\
         fw: fixed_window limit 10 per 1s\n\
         sw: sliding_window limit 10 per 1s\n\
         sw-odd: sliding_window limit 7 per 700ms\n\
         log: sliding_log limit 5 per 2s\n"
    );
    // The same text, the same hash.
    assert_eq!(text(&validate(&config).stdout), stdout);
}

/// What `explain` says of a gcra policy on the memory store, after its
/// header line.
const MEMORY_EXPLAINED: &str = r#"store local: memory, inside each tollgate process (at most 1000000 keys)

api: gcra capacity 10 refill 1 per 1s
  match: every request
  identity: one budget per client_ip
  scope: instance: each tollgate process decides alone, on its memory store.
  bound: at most N × the limit (a burst of 10 then 1 per 1s) for N tollgate processes (list
      `regions:` with their instances to state N).
  span: each process: a burst, then a rate: from any instant to T later (both included), at most
      10 + ⌊1 × T / 1s⌋, the full burst then the refill: 11 within 1s. For N tollgate processes,
      N × each figure.
  on store failure: nothing can fail; the store is in the process.
  state: one slot of the memory store per identity (128 bytes), forgotten once idle past its reset.
  request ids: a retry inside 1m of its admission is charged once; at most 64 ids per identity, each
      counted as a key toward max_keys.
"#;

/// What `explain` says of three policies on one Redis, after its header.
const REDIS_EXPLAINED: &str = r#"store global: redis standalone, shared by every tollgate process that names it, prefix "rl" (timeout
    250ms)

login: sliding_log limit 5 per 10m
  match: every request
  identity: one budget per client_ip
  scope: global: every decision on the global store (global, redis standalone).
  bound: the limit, 5 per 10m, exact: one Redis decides every request, atomically on its own clock
      (while it keeps its data: one restarted empty forgets what was spent, up to one more limit).
  span: exact over any span: any 10m span sees at most 5, wherever it starts.
  log: at most 129 entries per identity: exact while an identity's log holds fewer than 64; beyond,
      a request is logged at the end of its 9375ms bucket (the window / 64, rounded up), so a unit
      counts up to 9374ms longer than exact: never more than the limit in any 10m, a rejection's
      Retry-After up to 9374ms late.
  on store failure: fail_closed (its global store down, or slower than 250ms): every request is
      rejected (429) while the shared store is down.
  state: key rl:login:sliding_log:{<identity>} with a TTL of the time to refill/forget it + 1s;
      about 120 bytes per identity in Redis, plus each logged entry (at most 129, about 10 bytes
      each).
  request ids: a retry inside 1m of its admission is charged once; at most 64 ids per identity in
      key rl:login:sliding_log:{<identity>}:ids with a TTL of 1m, about 170 bytes with one id and 57
      for each more.

api: gcra capacity 100 refill 100 per 1s
  match: every request
  identity: one budget per client_ip
  scope: global: every decision on the global store (global, redis standalone).
  bound: the limit, a burst of 100 then 100 per 1s, exact: one Redis decides every request,
      atomically on its own clock (while it keeps its data: one restarted empty forgets what was
      spent, up to one more limit).
  span: a burst, then a rate: from any instant to T later (both included), at most
      100 + ⌊100 × T / 1s⌋, the full burst then the refill: 200 within 1s.
  on store failure: local (its global store down, or slower than 250ms): each instance enforces 25
      per 1s alone: at most instances × 25 while the shared store is down.
  state: key rl:api:gcra:{<identity>} with a TTL of the time to refill/forget it + 1s; about 72
      bytes per identity in Redis.
  request ids: a retry inside 1m of its admission is charged once; at most 64 ids per identity in
      key rl:api:gcra:{<identity>}:ids with a TTL of 1m, about 170 bytes with one id and 57 for each
      more.

search: fixed_window limit 10 per 1s
  match: every request
  identity: one budget per client_ip
  scope: global: every decision on the global store (global, redis standalone).
  bound: the limit, 10 per 1s, exact: one Redis decides every request, atomically on its own clock
      (while it keeps its data: one restarted empty forgets what was spent, up to one more limit).
  span: exact per window (windows aligned to the Unix epoch), yet any 1s span can see up to 20: 10
      either side of a boundary.
  on store failure: fail_open (its global store down, or slower than 250ms): every request is
      admitted: no limit while the shared store is down.
  state: key rl:search:fixed_window:{<identity>} with a TTL of the time to refill/forget it + 1s;
      about 120 bytes per identity in Redis.
  request ids: a retry inside 1m of its admission is charged once; at most 64 ids per identity in
      key rl:search:fixed_window:{<identity>}:ids with a TTL of 1m, about 170 bytes with one id and
      57 for each more.
"#;

fn explain(config: &Path) -> Output {
    run_on_config("explain", config)
}

/// `tollgate explain` states each policy's scope, the bound it gives across
/// processes, and its failure mode; it needs no store to be running.
#[test]
fn explain_states_each_policys_scope_bound_and_failure_mode() {
    let dir = tempfile::tempdir().expect("tempdir");
    let memory = dir.path().join("memory.yaml");
    std::fs::write(
        &memory,
        "policies:\n  - name: api\n    algorithm: gcra\n    capacity: 10\n    refill: { tokens: 1, per: 1s }\n",
    )
    .expect("write");
    let out = explain(&memory);
    assert_eq!(text(&out.stderr), "");
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    let body = stdout.split_once('\n').expect("a header line").1;
    assert_eq!(body, MEMORY_EXPLAINED);
    let redis = dir.path().join("redis.yaml");
    std::fs::write(
        &redis,
        "store:\n  redis:\n    url: redis://127.0.0.1:1\n    prefix: rl\n\
         policies:\n  - name: login\n    algorithm: sliding_log\n    limit: 5\n    window: 10m\n    on_store_failure: fail_closed\n\
         \x20 - name: api\n    algorithm: gcra\n    capacity: 100\n    refill: { tokens: 100, per: 1s }\n    on_store_failure: local\n    local_share_percent: 25\n\
         \x20 - name: search\n    algorithm: fixed_window\n    limit: 10\n    window: 1s\n",
    )
    .expect("write");
    let out = explain(&redis);
    assert_eq!(text(&out.stderr), "");
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    let (first, body) = stdout.split_once('\n').expect("a header line");
    assert!(
        first.starts_with(&format!("config {} (hash ", redis.display())),
        "{first}"
    );
    assert_eq!(body, REDIS_EXPLAINED);
    std::fs::write(&redis, "policies: []\n").expect("write");
    let out = explain(&redis);
    assert_eq!(out.status.code(), Some(1));
    let message =
        "`policies` is empty: a config needs at least one policy (or envoy_ratelimit_configs)";
    assert_eq!(
        text(&out.stderr),
        format!(
            "tollgate: {path}: config: {message}\n --> {path}:1:1\n  |\n1 | policies: []\n  | ^ {message}\n",
            path = redis.display()
        )
    );
}

/// A sliding_log's explanation states its length bound and the error that
/// bound costs (docs/design.md §3): the bucket width q and "q − 1 ms late";
/// a window under 64 ms has buckets of 1 ms and stays exact.
#[test]
fn explain_states_a_sliding_logs_bound_its_bucket_and_its_error() {
    let (_dir, config) = config_file(
        "policies:\n  - {name: export, algorithm: sliding_log, limit: 10000, window: 1h}\n\
         \x20 - {name: burst, algorithm: sliding_log, limit: 3, window: 50ms}\n\
         \x20 - {name: api, algorithm: sliding_window, limit: 3, window: 1h}\n",
    );
    let out = explain(&config);
    assert_eq!(text(&out.stderr), "");
    // Each `log:` field, its wrapped lines joined as they were broken.
    let stdout = text(&out.stdout);
    let mut logs: Vec<String> = Vec::new();
    let mut inside = false;
    for line in stdout.lines() {
        let rest = line.strip_prefix("      ");
        if line.starts_with("  log: ") {
            logs.push(line.to_owned());
            inside = true;
        } else if let (true, Some(log), Some(rest)) = (inside, logs.last_mut(), rest) {
            log.push(' ');
            log.push_str(rest);
        } else {
            inside = false;
        }
    }
    assert_eq!(
        logs,
        vec![
            "  log: at most 129 entries per identity: exact while an identity's log holds fewer than 64; beyond, a request is logged at the end of its 56250ms bucket (the window / 64, rounded up), so a unit counts up to 56249ms longer than exact: never more than the limit in any 1h, a rejection's Retry-After up to 56249ms late.",
            "  log: at most 129 entries per identity, exact: a window under 64ms has buckets of 1ms.",
        ]
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["explain", "--json", "--config"])
        .arg(&config)
        .output()
        .expect("tollgate runs");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let log = &json["policies"][0]["scope"]["log"];
    assert_eq!(
        (
            &log["max_entries"],
            &log["exact_below_entries"],
            &log["bucket_ms"],
            &log["late_ms_at_most"]
        ),
        (
            &serde_json::json!(129),
            &serde_json::json!(64),
            &serde_json::json!(56_250),
            &serde_json::json!(56_249)
        )
    );
    assert_eq!(json["policies"][1]["scope"]["log"]["bucket_ms"], 1);
    assert_eq!(json["policies"][2]["scope"]["log"], serde_json::Value::Null);
}

#[test]
fn validate_exits_1_naming_the_fault_of_an_invalid_config() {
    let (_dir, config) = config_file(
        "policies:\n  - name: x\n    algorithm: sliding_log\n    limit: 10001\n    window: 1s\n",
    );
    let out = validate(&config);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    let message = "policy \"x\": limit: 10001 is too large for sliding_log, at most 10000; use sliding_window for larger limits";
    assert_eq!(
        text(&out.stderr),
        format!(
            "tollgate: {path}: {message}\n --> {path}:4:5\n  |\n2 |   - name: x\n3 |     algorithm: sliding_log\n4 |     limit: 10001\n  |     ^ {message}\n5 |     window: 1s\n  |\n",
            path = config.display()
        )
    );
}

/// `tollgate replay --config <config> <flags…>` with `input` on stdin.
fn replay_with(config: &Path, flags: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("replay")
        .arg("--config")
        .arg(config)
        .args(flags)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tollgate starts");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let output = child.wait_with_output().expect("tollgate runs");
    feeder.join().expect("feeder finished");
    output
}

#[test]
fn format_full_adds_the_events_time_policy_and_key() {
    let (_dir, config) = config_file(FW);
    let out = replay_with(
        &config,
        &["--format", "full"],
        b"{\"t_ms\": 1000, \"policy\": \"fw\", \"key\": \"a\\\"b\"}\n\
          {\"t_ms\": 1500, \"policy\": \"fw\", \"key\": \"a\\\"b\", \"cost\": 2}\n",
    );
    assert_eq!(text(&out.stderr), "");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        "{\"t_ms\": 1000, \"policy\": \"fw\", \"key\": \"a\\\"b\", \"allowed\": true, \"limit\": 2, \"remaining\": 1, \"retry_after_ms\": 0, \"reset_after_ms\": 1000}\n\
         {\"t_ms\": 1500, \"policy\": \"fw\", \"key\": \"a\\\"b\", \"allowed\": false, \"limit\": 2, \"remaining\": 1, \"retry_after_ms\": 500, \"reset_after_ms\": 500}\n"
    );
}

#[test]
fn skip_bad_lines_reports_each_on_stderr_goes_on_and_exits_3() {
    let (_dir, config) = config_file(FW);
    let long_key = format!(
        "{{\"t_ms\": 1, \"policy\": \"fw\", \"key\": \"{}\"}}",
        "k".repeat(1 << 20)
    );
    let good = "{\"t_ms\": 1000, \"policy\": \"fw\", \"key\": \"a\"}";
    let input = format!(
        "{good}\ngarbage\n{long_key}\n{{\"t_ms\": 1000, \"policy\": \"nope\", \"key\": \"a\"}}\n{good}\n"
    );
    let out = replay_with(&config, &["--skip-bad-lines"], input.as_bytes());
    assert_eq!(
        text(&out.stderr),
        "tollgate: line 2: not a trace event: expected value at line 1 column 1 (skipped)\n\
         tollgate: line 3: longer than 1048576 bytes (skipped)\n\
         tollgate: line 4: unknown policy \"nope\" (skipped)\n"
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "a skipped line is not a clean run"
    );
    assert_eq!(
        text(&out.stdout),
        "{\"allowed\": true, \"limit\": 2, \"remaining\": 1, \"retry_after_ms\": 0, \"reset_after_ms\": 1000}\n\
         {\"allowed\": true, \"limit\": 2, \"remaining\": 0, \"retry_after_ms\": 0, \"reset_after_ms\": 1000}\n"
    );
    // Nothing to skip: a clean run exits 0.
    let out = replay_with(&config, &["--skip-bad-lines"], good.as_bytes());
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn summary_counts_events_and_their_cost_per_policy_in_name_order() {
    let (_dir, config) = config_file(
        "policies:\n  - {name: zeta, algorithm: fixed_window, limit: 2, window: 1s}\n  - {name: alpha, algorithm: fixed_window, limit: 5, window: 1s}\n",
    );
    let out = replay_with(
        &config,
        &["--summary"],
        b"{\"t_ms\": 1000, \"policy\": \"zeta\", \"key\": \"a\"}\n\
          {\"t_ms\": 1000, \"policy\": \"zeta\", \"key\": \"a\", \"cost\": 2}\n\
          {\"t_ms\": 1000, \"policy\": \"alpha\", \"key\": \"a\", \"cost\": 3}\n\
          {\"t_ms\": 1000, \"policy\": \"zeta\", \"key\": \"b\", \"cost\": 2}\n",
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stderr),
        "alpha: offered 1 (cost 3), admitted 1 (cost 3), rejected 0 (cost 0)\n\
         zeta: offered 3 (cost 5), admitted 2 (cost 3), rejected 1 (cost 2)\n"
    );
    assert_eq!(text(&out.stdout).lines().count(), 4);
}

#[test]
fn line_buffered_output_reaches_a_reader_before_stdin_closes() {
    use std::io::{BufRead, BufReader};
    use std::sync::mpsc;
    use std::time::Duration;

    let (_dir, config) = config_file(FW);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["replay", "--line-buffered", "--config"])
        .arg(&config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("tollgate starts");
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin
        .write_all(b"{\"t_ms\": 1000, \"policy\": \"fw\", \"key\": \"a\"}\n")
        .expect("one event");
    stdin.flush().expect("flushed");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    // A safety net, not a speed assertion: stdin is still open.
    let line = rx.recv_timeout(Duration::from_secs(30));
    drop(stdin);
    let _ = child.wait();
    assert_eq!(
        line.expect("the first decision arrived while stdin was open"),
        "{\"allowed\": true, \"limit\": 2, \"remaining\": 1, \"retry_after_ms\": 0, \"reset_after_ms\": 1000}\n"
    );
}

#[test]
fn a_checks_line_is_decided_all_or_nothing_and_a_refund_gives_back() {
    let (_dir, config) = config_file(
        "policies:\n  - {name: fw, algorithm: fixed_window, limit: 2, window: 1s}\n  - {name: one, algorithm: fixed_window, limit: 1, window: 1s}\n",
    );
    let out = replay(
        &config,
        b"{\"t_ms\": 1000, \"checks\": [{\"policy\": \"fw\", \"key\": \"a\"}, {\"policy\": \"one\", \"key\": \"a\"}]}\n\
          {\"t_ms\": 1100, \"checks\": [{\"policy\": \"fw\", \"key\": \"a\"}, {\"policy\": \"one\", \"key\": \"a\"}]}\n\
          {\"t_ms\": 1200, \"policy\": \"one\", \"key\": \"a\", \"refund\": true}\n\
          {\"t_ms\": 1300, \"policy\": \"fw\", \"key\": \"a\", \"cost\": 2}\n",
    );
    assert_eq!(text(&out.stderr), "");
    assert_eq!(out.status.code(), Some(0));
    // The second line's `one` rejects, so its `fw` spends nothing (its
    // decision reports the state it left: 1 remaining, as at the end).
    assert_eq!(
        text(&out.stdout),
        "{\"allowed\": true, \"limit\": 2, \"remaining\": 1, \"retry_after_ms\": 0, \"reset_after_ms\": 1000}\n\
         {\"allowed\": true, \"limit\": 1, \"remaining\": 0, \"retry_after_ms\": 0, \"reset_after_ms\": 1000}\n\
         {\"allowed\": true, \"limit\": 2, \"remaining\": 1, \"retry_after_ms\": 0, \"reset_after_ms\": 900}\n\
         {\"allowed\": false, \"limit\": 1, \"remaining\": 0, \"retry_after_ms\": 900, \"reset_after_ms\": 900}\n\
         {\"allowed\": true, \"limit\": 1, \"remaining\": 1, \"retry_after_ms\": 0, \"reset_after_ms\": 800, \"refunded\": 1}\n\
         {\"allowed\": false, \"limit\": 2, \"remaining\": 1, \"retry_after_ms\": 700, \"reset_after_ms\": 700}\n"
    );
}

#[test]
fn a_checks_line_that_mixes_shapes_is_refused_by_name() {
    let (_dir, config) = config_file(FW);
    let one = "{\"policy\": \"fw\", \"key\": \"a\"}";
    let many = vec![one; 65].join(", ");
    let cases = [
        (
            format!("{{\"t_ms\": 1, \"policy\": \"fw\", \"checks\": [{one}]}}"),
            "not a trace event: a line with `checks` has no `policy`, `key` or `cost` of its own",
        ),
        (
            format!("{{\"t_ms\": 1, \"refund\": true, \"checks\": [{one}]}}"),
            "not a trace event: a refund gives back one check, not `checks`",
        ),
        (
            "{\"t_ms\": 1, \"checks\": []}".to_owned(),
            "not a trace event: `checks` is empty",
        ),
        (
            format!("{{\"t_ms\": 1, \"checks\": [{many}]}}"),
            "not a trace event: 65 checks, more than 64 a line",
        ),
        (
            "{\"t_ms\": 1, \"checks\": [{\"policy\": \"fw\"}]}".to_owned(),
            "not a trace event: missing field `key` at line 1 column 39",
        ),
        (
            "{\"t_ms\": 1, \"checks\": [{\"policy\": \"nope\", \"key\": \"a\"}]}".to_owned(),
            "unknown policy \"nope\"",
        ),
    ];
    for (bad, fault) in cases {
        let out = replay(&config, format!("{bad}\n").as_bytes());
        assert_eq!(out.status.code(), Some(2), "{bad:.80}");
        assert_eq!(text(&out.stderr), format!("tollgate: line 1: {fault}\n"));
        assert_eq!(text(&out.stdout), "");
    }
}
