//! `tollgate compare` on the example traces (examples/traces): the four
//! `api` configs beside them as one config of four policies
//! (algorithms.yaml), side by side;
//! each policy's totals are exactly what `tollgate replay` decides for the
//! trace through that `api` config. And `--against`, one algorithm against
//! another, names exactly the identities whose decisions changed. The
//! pictures in docs/pictures are what scripts/example-pictures makes.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use support::{summary_line, tollgate_bin};
use tollgate_core::{Identity, SecretHasher};

const KEY: &str = "compare-examples-identity-key-32-bytes";

const CONFIGS: [(&str, &str); 4] = [
    ("fixed", "api-fixed-window.yaml"),
    ("sliding", "api-sliding-window.yaml"),
    ("bucket", "api-token-bucket.yaml"),
    ("log", "api-sliding-log.yaml"),
];

const TRACES: [&str; 5] = [
    "boundary-attack",
    "steady",
    "bursty",
    "diurnal",
    "region-shift",
];

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/traces")
}

fn run(args: &[&str], stdin_file: Option<&Path>, key: Option<&str>) -> Output {
    let mut command = Command::new(tollgate_bin());
    command.args(args).env_remove("TOLLGATE_IDENTITY_KEY");
    if let Some(key) = key {
        command.env("TOLLGATE_IDENTITY_KEY", key);
    }
    let stdin = match stdin_file {
        Some(path) => Stdio::from(std::fs::File::open(path).expect("a trace")),
        None => Stdio::null(),
    };
    command.stdin(stdin).output().expect("tollgate runs")
}

fn stdout_of(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

#[test]
fn side_by_side_on_every_example_trace_agrees_with_replay() {
    // The four `api` configs' policy, each under its algorithm's name.
    let four = examples().join("algorithms.yaml");
    for name in TRACES {
        let trace = examples().join(format!("{name}.jsonl"));
        let args = [
            "compare",
            "--config",
            path_str(&four),
            "--trace",
            path_str(&trace),
        ];
        let mut json_args = args.to_vec();
        json_args.push("--json");
        let json: Value =
            serde_json::from_str(&stdout_of(&run(&json_args, None, None))).expect("compare's JSON");
        let rows = json["policies"].as_array().expect("policies");
        assert_eq!(rows.len(), 4, "{name}");
        for (row, (policy, config)) in rows.iter().zip(CONFIGS) {
            assert_eq!(row["policy"], policy);
            let replay = run(
                &[
                    "replay",
                    "--summary",
                    "--config",
                    path_str(&examples().join(config)),
                ],
                Some(&trace),
                None,
            );
            assert!(replay.status.success());
            let d = &row["decided"];
            assert_eq!(
                String::from_utf8_lossy(&replay.stderr),
                summary_line("api", d),
                "{name} through {config}"
            );
            // Nothing enforced goes past its bound.
            assert!(d["below_bound"].as_i64() >= Some(0), "{name}: {row}");
        }
        if name == "boundary-attack" {
            // The fixed window lets 40 through in one minute across its
            // boundary; every other algorithm holds each client to 20.
            assert_eq!(
                stdout_of(&run(&args, None, None))
                    .lines()
                    .take(5)
                    .collect::<Vec<_>>(),
                [
                    "policy   config  offered (cost)  admitted (cost)  rejected (cost)  worst span  bound  below bound",
                    "fixed    -       360 (360)       360 (360)        0 (0)            40 in 1m    40     0",
                    "sliding  -       360 (360)       300 (300)        60 (60)          20 in 1m    39     19",
                    "bucket   -       360 (360)       300 (300)        60 (60)          20 in 1m    40     20",
                    "log      -       360 (360)       300 (300)        60 (60)          20 in 1m    20     0",
                ]
            );
        }
    }
}

fn hashed(key: &str) -> String {
    let material = [b"tollgate hot identity series\0".as_slice(), KEY.as_bytes()].concat();
    format!(
        "hash:{}",
        SecretHasher::new(&material).hash(Identity::value(key).as_bytes())
    )
}

/// The keys whose decision `replay` gives differently on `old` and `new`:
/// (newly rejected, newly admitted), hashed.
fn replayed_changes(trace: &Path, old: &str, new: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let decide = |config: &str| -> Vec<Value> {
        let out = run(
            &[
                "replay",
                "--format",
                "full",
                "--config",
                path_str(&examples().join(config)),
            ],
            Some(trace),
            None,
        );
        stdout_of(&out)
            .lines()
            .map(|l| serde_json::from_str(l).expect("a decision"))
            .collect()
    };
    let (mut rejected, mut admitted) = (BTreeSet::new(), BTreeSet::new());
    for (was, now) in decide(old).iter().zip(decide(new)) {
        if was["allowed"] == now["allowed"] {
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

#[test]
fn against_on_the_example_traces_names_exactly_the_changed_identities() {
    let (old, new) = ("api-fixed-window.yaml", "api-sliding-log.yaml");
    for name in ["boundary-attack", "bursty"] {
        let trace = examples().join(format!("{name}.jsonl"));
        let out = run(
            &[
                "compare",
                "--config",
                path_str(&examples().join(new)),
                "--against",
                path_str(&examples().join(old)),
                "--trace",
                path_str(&trace),
                "--json",
            ],
            None,
            Some(KEY),
        );
        let json: Value = serde_json::from_str(&stdout_of(&out)).expect("JSON");
        let change = &json["policies"][0]["change"];
        let (rejected, admitted) = replayed_changes(&trace, old, new);
        let names = |v: &Value| -> BTreeSet<String> {
            v.as_array()
                .expect("names")
                .iter()
                .map(|n| n.as_str().expect("a name").to_owned())
                .collect()
        };
        assert!(
            !rejected.is_empty(),
            "{name}: the log is stricter somewhere"
        );
        assert_eq!(
            names(&change["newly_rejected_identities"]),
            rejected,
            "{name}"
        );
        assert_eq!(
            names(&change["newly_admitted_identities"]),
            admitted,
            "{name}"
        );
        assert_eq!(change["changed_checks_not_named"], 0);
        let (old_t, new_t) = (&json["policies"][0]["old"], &json["policies"][0]["new"]);
        let admitted_delta = old_t["admitted"]["checks"].as_i64().expect("old")
            - new_t["admitted"]["checks"].as_i64().expect("new");
        assert_eq!(
            change["newly_rejected"]["checks"]
                .as_i64()
                .expect("rejected")
                - change["newly_admitted"]["checks"]
                    .as_i64()
                    .expect("admitted"),
            admitted_delta,
            "{name}"
        );
    }
}

#[test]
fn the_committed_pictures_are_what_the_script_makes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pictures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/pictures");
    for name in TRACES {
        let made = dir.path().join(format!("{name}.svg"));
        stdout_of(&run(
            &[
                "compare",
                "--config",
                path_str(&examples().join("algorithms.yaml")),
                "--trace",
                path_str(&examples().join(format!("{name}.jsonl"))),
                "--plot",
                path_str(&made),
            ],
            None,
            None,
        ));
        let committed = pictures.join(format!("{name}.svg"));
        let same = std::fs::read(&committed).ok() == std::fs::read(&made).ok();
        assert!(
            same,
            "{} differs from what scripts/example-pictures makes: run it and commit the result",
            committed.display()
        );
    }
    let script = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/example-pictures"),
    )
    .expect("scripts/example-pictures");
    assert!(
        script.contains("compare --config examples/traces/algorithms.yaml"),
        "{script}"
    );
}
