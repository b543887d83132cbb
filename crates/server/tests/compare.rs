//! `tollgate compare`: one trace through several policies side by side,
//! whose totals agree with what `tollgate replay` decides for each policy
//! alone; and, `--against` an old config, exactly the identities whose
//! decisions changed, hashed as the metrics hash them.

mod support;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use support::{summary_line, tollgate_bin};
use tollgate_core::{Identity, SecretHasher};

const KEY: &str = "compare-test-identity-key-of-32-bytes!";

const ALGORITHMS: &str = r#"
policies:
  - name: fixed
    algorithm: fixed_window
    limit: 10
    window: 10s
  - name: sliding
    algorithm: sliding_window
    limit: 10
    window: 10s
  - name: bucket
    algorithm: token_bucket
    capacity: 10
    refill: { tokens: 1, per: 1s }
  - name: log
    algorithm: sliding_log
    limit: 10
    window: 10s
"#;

/// A boundary attack (10 in a window's last 100 ms, 10 in the next's
/// first), then a steady 2 a second for 20 s, all by one identity.
fn attack(policy: &str) -> String {
    let mut times: Vec<u64> = (0..10).map(|i| 9_900 + i).collect();
    times.extend((0..10).map(|i| 10_000 + i));
    times.extend((0..40).map(|i| 11_000 + 500 * i));
    times
        .iter()
        .map(|t| format!("{{\"t_ms\": {t}, \"policy\": \"{policy}\", \"key\": \"alice\"}}\n"))
        .collect()
}

fn run(args: &[&str], dir: &Path, key: Option<&str>, input: Option<&str>) -> Output {
    let mut command = Command::new(tollgate_bin());
    command
        .args(args)
        .current_dir(dir)
        .env_remove("TOLLGATE_IDENTITY_KEY");
    if let Some(key) = key {
        command.env("TOLLGATE_IDENTITY_KEY", key);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(input.unwrap_or_default().as_bytes())
        .expect("write stdin");
    drop(stdin);
    child.wait_with_output().expect("tollgate output")
}

fn stdout_of(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn side_by_side_shows_each_algorithm_against_its_bound_as_replay_decides_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("algorithms.yaml"), ALGORITHMS).expect("config");
    std::fs::write(dir.path().join("attack.jsonl"), attack("any")).expect("trace");
    let args = [
        "compare",
        "--config",
        "algorithms.yaml",
        "--trace",
        "attack.jsonl",
    ];
    let table = stdout_of(&run(&args, dir.path(), None, None));
    // The fixed window admits 20 across its boundary, the sliding window
    // 19, the log never more than 10; the bucket its burst, then 1 a second.
    assert_eq!(
        table,
        "policy   config  offered (cost)  admitted (cost)  rejected (cost)  worst span  bound  below bound\n\
         fixed    -       60 (60)         32 (32)          28 (28)          20 in 10s   20     0\n\
         sliding  -       60 (60)         29 (29)          31 (31)          19 in 10s   19     0\n\
         bucket   -       60 (60)         30 (30)          30 (30)          10 in 1s    11     1\n\
         log      -       60 (60)         22 (22)          38 (38)          10 in 10s   10     0\n\
         \n\
         fixed: fixed_window limit 10 per 10s\n\
         sliding: sliding_window limit 10 per 10s\n\
         bucket: token_bucket capacity 10 refill 1 per 1s\n\
         log: sliding_log limit 10 per 10s\n"
    );
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let json: Value =
        serde_json::from_str(&stdout_of(&run(&json_args, dir.path(), None, None))).expect("JSON");
    // Each policy's totals are replay's, the trace's events named by it.
    for row in json["policies"].as_array().expect("policies") {
        let policy = row["policy"].as_str().expect("name");
        let replay = run(
            &["replay", "--summary", "--config", "algorithms.yaml"],
            dir.path(),
            None,
            Some(&attack(policy)),
        );
        assert!(replay.status.success());
        let d = &row["decided"];
        assert_eq!(
            String::from_utf8_lossy(&replay.stderr),
            summary_line(policy, d)
        );
    }
    assert_eq!(
        json["policies"][1]["decided"]["worst_span"],
        serde_json::json!({"span_ms": 10000, "both_ends": false, "admitted": 19, "admissions_not_followed": 0})
    );
    assert_eq!(json["policies"][2]["decided"]["below_bound"], 1);
}

const OLD: &str = r#"
policies:
  - name: api
    algorithm: fixed_window
    limit: 5
    window: 1h
  - name: search
    algorithm: token_bucket
    capacity: 2
    refill: { tokens: 1, per: 1h }
"#;

// api stricter, search looser: some identities are newly rejected by
// api, one newly admitted by search.
const NEW: &str = r#"
policies:
  - name: api
    algorithm: fixed_window
    limit: 3
    window: 1h
  - name: search
    algorithm: token_bucket
    capacity: 3
    refill: { tokens: 1, per: 1h }
"#;

/// alice 6 api checks, bob 3, carol 4; dave 3 searches, erin 1.
fn traffic() -> String {
    let mut lines = Vec::new();
    let mut t = 1_000;
    for (policy, key, n) in [
        ("api", "alice", 6),
        ("api", "bob", 3),
        ("search", "dave", 3),
        ("api", "carol", 4),
        ("search", "erin", 1),
    ] {
        for _ in 0..n {
            lines.push(format!(
                "{{\"t_ms\": {t}, \"policy\": \"{policy}\", \"key\": \"{key}\"}}"
            ));
            t += 10;
        }
    }
    lines.join("\n") + "\n"
}

fn hashed(key: &str) -> String {
    let material = [b"tollgate hot identity series\0".as_slice(), KEY.as_bytes()].concat();
    format!(
        "hash:{}",
        SecretHasher::new(&material).hash(Identity::value(key).as_bytes())
    )
}

/// Per policy, the identities whose decision `replay` gives differently
/// on the two configs: (newly rejected, newly admitted).
fn replayed_changes(dir: &Path, policy: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let decide = |config: &str| -> Vec<Value> {
        let out = run(
            &["replay", "--format", "full", "--config", config],
            dir,
            None,
            Some(&traffic()),
        );
        stdout_of(&out)
            .lines()
            .map(|l| serde_json::from_str(l).expect("a decision"))
            .collect()
    };
    let (mut rejected, mut admitted) = (BTreeSet::new(), BTreeSet::new());
    for (was, now) in decide("old.yaml").iter().zip(decide("new.yaml")) {
        if was["policy"] != policy || was["allowed"] == now["allowed"] {
            continue;
        }
        let name = hashed(now["key"].as_str().expect("key"));
        if now["allowed"] == true {
            admitted.insert(name);
        } else {
            rejected.insert(name);
        }
    }
    (rejected, admitted)
}

fn names(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .expect("names")
        .iter()
        .map(|n| n.as_str().expect("a name").to_owned())
        .collect()
}

#[test]
fn against_names_exactly_the_identities_whose_decisions_changed() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("old.yaml"), OLD).expect("old");
    std::fs::write(dir.path().join("new.yaml"), NEW).expect("new");
    std::fs::write(dir.path().join("traffic.jsonl"), traffic()).expect("trace");
    let args = [
        "compare",
        "--config",
        "new.yaml",
        "--against",
        "old.yaml",
        "--trace",
        "traffic.jsonl",
    ];
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let json: Value =
        serde_json::from_str(&stdout_of(&run(&json_args, dir.path(), Some(KEY), None)))
            .expect("JSON");
    let rows = json["policies"].as_array().expect("policies");
    assert_eq!(rows.len(), 2);
    for row in rows {
        let policy = row["policy"].as_str().expect("name");
        let (rejected, admitted) = replayed_changes(dir.path(), policy);
        let change = &row["change"];
        assert_eq!(
            names(&change["newly_rejected_identities"]),
            rejected,
            "{policy}"
        );
        assert_eq!(
            names(&change["newly_admitted_identities"]),
            admitted,
            "{policy}"
        );
    }
    // By hand: api at 3 rejects alice's 4th to 6th (the old rejected her
    // 6th) and carol's 4th; search at 3 admits dave's 3rd.
    let api = &rows[0]["change"];
    assert_eq!(
        api["newly_rejected"],
        serde_json::json!({"checks": 3, "cost": 3})
    );
    assert_eq!(
        names(&api["newly_rejected_identities"]),
        BTreeSet::from([hashed("alice"), hashed("carol")])
    );
    assert_eq!(api["newly_admitted"]["checks"], 0);
    let search = &rows[1]["change"];
    assert_eq!(
        names(&search["newly_admitted_identities"]),
        BTreeSet::from([hashed("dave")])
    );
    assert_eq!(search["newly_rejected"]["checks"], 0);
    assert_eq!(rows[0]["old"]["rejected"]["checks"], 1);
    assert_eq!(rows[0]["new"]["rejected"]["checks"], 4);

    let table = stdout_of(&run(&args, dir.path(), Some(KEY), None));
    assert!(
        table.contains(&format!(
            "api: the new config rejects 3 (cost 3) the old admitted, and admits 0 (cost 0) the old rejected\n  newly rejected: {} {}\n",
            hashed("alice").min(hashed("carol")),
            hashed("alice").max(hashed("carol"))
        )),
        "{table}"
    );
    for raw in ["alice", "bob", "carol", "dave", "erin"] {
        assert!(!table.contains(raw), "{raw} shown raw:\n{table}");
    }
}

#[test]
fn raw_identities_are_never_named_without_the_key_and_bad_names_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("old.yaml"), OLD).expect("old");
    std::fs::write(dir.path().join("new.yaml"), NEW).expect("new");
    std::fs::write(dir.path().join("traffic.jsonl"), traffic()).expect("trace");
    let out = run(
        &[
            "compare",
            "--config",
            "new.yaml",
            "--against",
            "old.yaml",
            "--trace",
            "traffic.jsonl",
        ],
        dir.path(),
        None,
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(out.stdout, b"");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "tollgate: the trace's identities are not hashed, and compare names them only as the metrics do, by the identity key: set TOLLGATE_IDENTITY_KEY to the key serve uses (at least 32 bytes)\n"
    );
    let out = run(
        &[
            "compare",
            "--config",
            "new.yaml",
            "--trace",
            "traffic.jsonl",
            "--policies",
            "api,nope",
        ],
        dir.path(),
        None,
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "tollgate: --policies: no policy named \"nope\"; the config's policies: api, search\n"
    );
}
