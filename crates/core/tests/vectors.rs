//! The shipped decision vectors, decided by the core directly (no store), and
//! the worked example of docs/design.md §3 field by field.

use std::collections::HashMap;
use std::path::PathBuf;

use serde_json::Value;
use tollgate_core::{Decision, Limits, PolicySet, Rate, State};

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors")
}

fn read(name: &str) -> String {
    let path = vectors_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// A decision in the vectors' own spelling.
fn line(d: &Decision) -> String {
    d.vector_line()
}

#[test]
fn shipped_vectors_pass_line_for_line_through_the_core() {
    let policies =
        PolicySet::from_yaml(&read("policies.yaml")).expect("the shipped policies are valid");
    let events = read("events.jsonl");
    let expected = read("expected.jsonl");
    let mut states: HashMap<(String, String), Option<State>> = HashMap::new();
    let mut decided = 0;
    for (number, (event, want)) in events.lines().zip(expected.lines()).enumerate() {
        let event: Value = serde_json::from_str(event).expect("an event is JSON");
        let policy_name = event["policy"].as_str().expect("policy is a string");
        let key = event["key"].as_str().expect("key is a string");
        let t_ms = event["t_ms"].as_u64().expect("t_ms is a u64");
        let cost = event["cost"].as_u64().expect("cost is a u64");
        let policy = policies.get(policy_name).expect("the policy is declared");
        let state = states
            .entry((policy_name.to_owned(), key.to_owned()))
            .or_default();
        let got = line(&policy.limits().decide(state, t_ms, cost));
        assert_eq!(got, want, "line {}: {event}", number + 1);
        decided += 1;
    }
    assert_eq!(decided, 1500);
    assert_eq!(expected.lines().count(), 1500);
}

fn decision(allowed: bool, remaining: i64, retry: Option<u64>, reset: u64) -> Decision {
    Decision {
        allowed,
        limit: 20,
        remaining,
        retry_after_ms: retry,
        reset_after_ms: reset,
        permit: None,
    }
}

/// docs/design.md §3: C=20, N=5 per 1s, so n=1 unit per ms and a token is p=200 units.
#[test]
fn worked_example_of_the_design_decides_exactly() {
    let limits = Limits::TokenBucket(Rate::new(20, 5, 1_000).expect("valid rate"));
    let mut state = None;
    // 17 of 20 tokens: 3 left (600 units); 3400 units to refill at 1 a ms.
    assert_eq!(
        limits.decide(&mut state, 99_900, 17),
        decision(true, 3, Some(0), 3_400)
    );
    // 100 ms later: 700 units = 3.5 tokens, 4 needed, 100 units short.
    assert_eq!(
        limits.decide(&mut state, 100_000, 4),
        decision(false, 3, Some(100), 3_300)
    );
    // 300 ms later: 1000 units = 5 tokens; 4 taken, 1 left (200 units).
    assert_eq!(
        limits.decide(&mut state, 100_300, 4),
        decision(true, 1, Some(0), 3_800)
    );
    // 200 ms later: 400 units = 2 tokens, 400 units short of 4.
    assert_eq!(
        limits.decide(&mut state, 100_500, 4),
        decision(false, 2, Some(400), 3_600)
    );
}

#[test]
fn worked_example_decides_the_same_under_gcra() {
    let limits = Limits::Gcra(Rate::new(20, 5, 1_000).expect("valid rate"));
    let mut state = None;
    let got: Vec<Decision> = [(99_900, 17), (100_000, 4), (100_300, 4), (100_500, 4)]
        .into_iter()
        .map(|(t, cost)| limits.decide(&mut state, t, cost))
        .collect();
    assert_eq!(
        got,
        [
            decision(true, 3, Some(0), 3_400),
            decision(false, 3, Some(100), 3_300),
            decision(true, 1, Some(0), 3_800),
            decision(false, 2, Some(400), 3_600),
        ]
    );
}
