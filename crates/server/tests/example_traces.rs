//! examples/traces/: each trace is what its maker (the `example_traces`
//! example, which scripts/example-traces runs) makes, byte for byte, and
//! each replays through each of the four `api` configs beside it to the
//! numbers docs/traces.md states.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use support::tollgate_bin;

#[path = "../examples/example_traces/traces.rs"]
mod traces;

fn traces_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/traces")
}

#[test]
fn the_committed_traces_are_what_the_script_makes() {
    let made = traces::all();
    let names: Vec<&str> = made.iter().map(|(name, _)| *name).collect();
    assert_eq!(
        names,
        [
            "boundary-attack",
            "steady",
            "bursty",
            "diurnal",
            "region-shift"
        ]
    );
    for (name, text) in made {
        let path = traces_dir().join(format!("{name}.jsonl"));
        let committed =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            committed == text,
            "{} differs from what scripts/example-traces makes: run it and commit the result",
            path.display()
        );
    }
    let script = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/example-traces"),
    )
    .expect("scripts/example-traces");
    assert!(
        script.contains("--example example_traces -- examples/traces"),
        "{script}"
    );
}

/// `tollgate replay --summary` of trace `name` through config `config`:
/// its summary, once every decision line is read.
fn summary(name: &str, config: &str) -> String {
    let trace = std::fs::File::open(traces_dir().join(format!("{name}.jsonl"))).expect("a trace");
    let out = Command::new(tollgate_bin())
        .args(["replay", "--summary", "--config"])
        .arg(traces_dir().join(format!("api-{config}.yaml")))
        .stdin(Stdio::from(trace))
        .output()
        .expect("run tollgate replay");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{name} through {config}: {stderr}");
    let decisions = String::from_utf8_lossy(&out.stdout);
    let offered = std::fs::read_to_string(traces_dir().join(format!("{name}.jsonl")))
        .expect("a trace")
        .lines()
        .count();
    assert_eq!(
        decisions.lines().count(),
        offered,
        "{name} through {config}"
    );
    stderr
}

/// A trace, its events, and what each config admits of them.
type Row = (&'static str, u64, [(&'static str, u64); 4]);

#[test]
fn each_trace_replays_through_each_config_to_the_documented_numbers() {
    // The table of docs/traces.md; rejected is offered less admitted.
    let expected: [Row; 5] = [
        (
            "boundary-attack",
            360,
            [
                ("fixed-window", 360),
                ("sliding-window", 300),
                ("sliding-log", 300),
                ("token-bucket", 300),
            ],
        ),
        (
            "steady",
            1050,
            [
                ("fixed-window", 931),
                ("sliding-window", 921),
                ("sliding-log", 928),
                ("token-bucket", 949),
            ],
        ),
        (
            "bursty",
            547,
            [
                ("fixed-window", 397),
                ("sliding-window", 376),
                ("sliding-log", 373),
                ("token-bucket", 426),
            ],
        ),
        (
            "diurnal",
            847,
            [
                ("fixed-window", 769),
                ("sliding-window", 740),
                ("sliding-log", 746),
                ("token-bucket", 814),
            ],
        ),
        (
            "region-shift",
            1461,
            [
                ("fixed-window", 1211),
                ("sliding-window", 1180),
                ("sliding-log", 1193),
                ("token-bucket", 1290),
            ],
        ),
    ];
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/traces.md"))
            .expect("docs/traces.md");
    for (name, offered, configs) in expected {
        let mut row = format!("| `{name}` | {offered} |");
        for (config, admitted) in configs {
            let rejected = offered - admitted;
            assert_eq!(
                summary(name, config),
                format!(
                    "api: offered {offered} (cost {offered}), admitted {admitted} (cost {admitted}), rejected {rejected} (cost {rejected})\n"
                ),
                "{name} through api-{config}.yaml"
            );
            row.push_str(&format!(" {admitted} / {rejected} |"));
        }
        assert!(
            docs.lines().any(|line| line == row),
            "docs/traces.md has no row {row}"
        );
    }
}
