//! `tollgate replay` held to an independent implementation of docs/design.md §3:
//! tests/reference/model.py, written from the contract alone, generates
//! random policies and traces and the decisions the contract gives; the
//! binary must reproduce them line for line.
//!
//! More seeds: `TOLLGATE_REFERENCE_SEEDS=100-300 cargo test --test reference_model`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Seeds run by default: enough to meet every algorithm, step back and edge.
const SEEDS: std::ops::RangeInclusive<u64> = 1..=8;
const EVENTS_PER_SEED: &str = "3000";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn model() -> PathBuf {
    repo().join("tests/reference/model.py")
}

/// Runs the model; a missing python3 fails with a message saying so.
fn python(args: &[&std::ffi::OsStr], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new("python3")
        .arg(model())
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run python3 ({e}): the reference model test needs Python 3.11 or later on PATH"
            )
        });
    let feeder = stdin.map(|bytes| {
        let mut pipe = child.stdin.take().expect("piped stdin");
        let bytes = bytes.to_vec();
        std::thread::spawn(move || pipe.write_all(&bytes).expect("model reads its input"))
    });
    let out = child.wait_with_output().expect("python3 runs");
    if let Some(feeder) = feeder {
        feeder.join().expect("feeder finished");
    }
    assert!(
        out.status.success(),
        "model.py {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn replay(config: &Path, events: &Path) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("replay")
        .arg("--config")
        .arg(config)
        .stdin(std::fs::File::open(events).expect("events file"))
        .output()
        .expect("tollgate runs");
    assert!(
        out.status.success(),
        "tollgate replay failed on {}: {}",
        config.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn seeds() -> Vec<u64> {
    let Ok(spec) = std::env::var("TOLLGATE_REFERENCE_SEEDS") else {
        return SEEDS.collect();
    };
    let parse = |s: &str| {
        s.trim()
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("TOLLGATE_REFERENCE_SEEDS: {s:?} is not a seed"))
    };
    match spec.split_once('-') {
        Some((from, to)) => (parse(from)..=parse(to)).collect(),
        None => spec.split(',').map(parse).collect(),
    }
}

#[test]
fn model_reproduces_the_shipped_vectors() {
    let vectors = repo().join("tests/vectors");
    let events = std::fs::read(vectors.join("events.jsonl")).expect("events");
    let out = python(
        &[
            "--config".as_ref(),
            vectors.join("policies.yaml").as_os_str(),
        ],
        Some(&events),
    );
    let expected = std::fs::read_to_string(vectors.join("expected.jsonl")).expect("expected");
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
}

#[test]
fn replay_decides_every_generated_trace_as_the_reference_model() {
    let dir = tempfile::tempdir().expect("temp dir");
    for seed in seeds() {
        let out_dir = dir.path().join(seed.to_string());
        python(
            &[
                "--seed".as_ref(),
                seed.to_string().as_ref(),
                "--events".as_ref(),
                EVENTS_PER_SEED.as_ref(),
                "--out".as_ref(),
                out_dir.as_os_str(),
            ],
            None,
        );
        let events = std::fs::read_to_string(out_dir.join("events.jsonl")).expect("events");
        let expected = std::fs::read_to_string(out_dir.join("expected.jsonl")).expect("expected");
        let got = replay(
            &out_dir.join("policies.yaml"),
            &out_dir.join("events.jsonl"),
        );
        let got = String::from_utf8(got.stdout).expect("UTF-8 decisions");
        assert_eq!(
            got.lines().count(),
            expected.lines().count(),
            "seed {seed}: decision count"
        );
        for (number, ((want, have), event)) in expected
            .lines()
            .zip(got.lines())
            .zip(events.lines())
            .enumerate()
        {
            assert_eq!(
                have,
                want,
                "seed {seed}, line {}: {event}\n(regenerate: python3 tests/reference/model.py --seed {seed} --events {EVENTS_PER_SEED} --out DIR)",
                number + 1
            );
        }
    }
}
