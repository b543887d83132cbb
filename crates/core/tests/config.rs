//! The policy config refuses every fault with a message naming the policy,
//! the field and why, and no input whatever makes it panic.

use proptest::prelude::*;
use tollgate_core::{Limits, PolicySet, Rate, Window, parse_yaml_named};

/// The error message for a config that must be refused.
fn refusal(yaml: &str) -> String {
    match PolicySet::from_yaml(yaml) {
        Ok(set) => panic!("accepted {} policies from:\n{yaml}", set.len()),
        Err(e) => e.to_string(),
    }
}

/// A document with one policy named `x` whose remaining fields are `fields`
/// (one `key: value` a line).
fn one_policy(algorithm: &str, fields: &[&str]) -> String {
    let mut yaml = format!("policies:\n  - name: x\n    algorithm: {algorithm}\n");
    for field in fields {
        yaml.push_str(&format!("    {field}\n"));
    }
    yaml
}

fn bucket(capacity: &str, refill: &str) -> String {
    one_policy(
        "token_bucket",
        &[
            &format!("capacity: {capacity}"),
            &format!("refill: {refill}"),
        ],
    )
}

fn window(algorithm: &str, limit: &str, window: &str) -> String {
    one_policy(
        algorithm,
        &[&format!("limit: {limit}"), &format!("window: {window}")],
    )
}

#[test]
fn valid_config_yields_its_policies_in_the_exact_scale() {
    let set = PolicySet::from_yaml(
        "policies:\n\
         \x20 - name: write-api\n\
         \x20   algorithm: gcra\n\
         \x20   capacity: 7\n\
         \x20   refill: { tokens: 100, per: 1m }\n\
         \x20 - name: search\n\
         \x20   algorithm: sliding_log\n\
         \x20   limit: 10000\n\
         \x20   window: 2s\n",
    )
    .expect("valid config");
    assert_eq!(set.len(), 2);
    let write = set.get("write-api").expect("declared");
    assert_eq!(
        *write.limits(),
        Limits::Gcra(Rate::new(7, 100, 60_000).expect("valid"))
    );
    let Limits::Gcra(rate) = write.limits() else {
        unreachable!("asserted above")
    };
    assert_eq!((rate.units_per_ms(), rate.units_per_token()), (1, 600));
    assert_eq!(
        *set.get("search").expect("declared").limits(),
        Limits::SlidingLog(Window::new(10_000, 2_000).expect("valid"))
    );
    assert!(set.get("x").is_none());
}

#[test]
fn unknown_algorithm_is_refused_naming_the_choices() {
    assert_eq!(
        refusal(&one_policy("leaky_bucket", &[])),
        "policy \"x\": algorithm: unknown algorithm \"leaky_bucket\" (expected one of: token_bucket, gcra, fixed_window, sliding_window, sliding_log, concurrency)"
    );
    assert_eq!(
        refusal(&one_policy("[gcra]", &[])),
        "policy \"x\": algorithm: must be a string, got a list"
    );
    assert_eq!(
        refusal("policies:\n  - name: x\n"),
        "policy \"x\": algorithm: missing"
    );
}

#[test]
fn unknown_field_is_refused_naming_the_expected_fields() {
    assert_eq!(
        refusal(&one_policy(
            "token_bucket",
            &["capacity: 1", "refill: { tokens: 1, per: 1s }", "burst: 5"]
        )),
        "policy \"x\": burst: unknown field (expected: capacity, refill)"
    );
    assert_eq!(
        refusal(&one_policy(
            "gcra",
            &[
                "capacity: 1",
                "refill: { tokens: 1, per: 1s }",
                "window: 1s"
            ]
        )),
        "policy \"x\": window: unknown field for algorithm gcra (expected: capacity, refill)"
    );
    assert_eq!(
        refusal(&one_policy(
            "sliding_window",
            &["limit: 1", "window: 1s", "capacity: 3"]
        )),
        "policy \"x\": capacity: unknown field for algorithm sliding_window (expected: limit, window)"
    );
    assert_eq!(
        refusal(&bucket("1", "{ tokens: 1, per: 1s, every: 2s }")),
        "policy \"x\": refill.every: unknown field (expected: tokens, per)"
    );
    assert_eq!(
        refusal("policies: []\nlimits: []\n"),
        "config: limits: unknown field (expected: policies)"
    );
}

#[test]
fn duplicate_policy_name_is_refused() {
    let policy = "  - name: api\n    algorithm: fixed_window\n    limit: 1\n    window: 1s\n";
    assert_eq!(
        refusal(&format!("policies:\n{policy}{policy}")),
        "policy \"api\": name: duplicate; policy names must be unique"
    );
}

#[test]
fn zero_negative_and_fractional_values_are_refused() {
    let refill = "{ tokens: 1, per: 1s }";
    assert_eq!(
        refusal(&bucket("0", refill)),
        "policy \"x\": capacity: must be positive, got 0"
    );
    assert_eq!(
        refusal(&bucket("-3", refill)),
        "policy \"x\": capacity: must be positive, got -3"
    );
    assert_eq!(
        refusal(&bucket("2.5", refill)),
        "policy \"x\": capacity: must be a whole number, got 2.5"
    );
    assert_eq!(
        refusal(&bucket("1.0", refill)),
        "policy \"x\": capacity: must be a whole number, got 1.0"
    );
    assert_eq!(
        refusal(&bucket("ten", refill)),
        "policy \"x\": capacity: must be a positive integer, got string \"ten\""
    );
    assert_eq!(
        refusal(&bucket("true", refill)),
        "policy \"x\": capacity: must be a positive integer, got boolean true"
    );
    assert_eq!(
        refusal(&bucket("~", refill)),
        "policy \"x\": capacity: must be a positive integer, got nothing"
    );
    assert_eq!(
        refusal(&bucket("5", "{ tokens: 0, per: 1s }")),
        "policy \"x\": refill.tokens: must be positive, got 0"
    );
    assert_eq!(
        refusal(&bucket("5", "{ tokens: -1, per: 1s }")),
        "policy \"x\": refill.tokens: must be positive, got -1"
    );
    assert_eq!(
        refusal(&bucket("5", "7")),
        "policy \"x\": refill: must be a mapping {tokens, per}, got number 7"
    );
    assert_eq!(
        refusal(&one_policy("gcra", &["capacity: 1"])),
        "policy \"x\": refill: missing"
    );
    assert_eq!(
        refusal(&window("fixed_window", "0", "1s")),
        "policy \"x\": limit: must be positive, got 0"
    );
    assert_eq!(
        refusal(&window("sliding_log", "-5", "1s")),
        "policy \"x\": limit: must be positive, got -5"
    );
    assert_eq!(
        refusal(&window("sliding_window", "0.5", "1s")),
        "policy \"x\": limit: must be a whole number, got 0.5"
    );
}

#[test]
fn bad_durations_are_refused() {
    let malformed = |text: &str| {
        format!(
            "policy \"x\": window: \"{text}\" is not a duration: expected <integer><unit> with unit one of ms, s, m, h, d (e.g. \"1s\", \"500ms\")"
        )
    };
    for text in ["10x", "1.5s", "-1s", "1 s", "1sec", "s", "1S"] {
        assert_eq!(
            refusal(&window("fixed_window", "1", &format!("\"{text}\""))),
            malformed(text)
        );
    }
    assert_eq!(
        refusal(&window("fixed_window", "1", "0ms")),
        "policy \"x\": window: \"0ms\" is zero; a duration must be positive"
    );
    assert_eq!(
        refusal(&window("fixed_window", "1", "99999999999999999999ms")),
        "policy \"x\": window: \"99999999999999999999ms\" is too long to count in milliseconds"
    );
    assert_eq!(
        refusal(&window("fixed_window", "1", "213503982335d")),
        "policy \"x\": window: \"213503982335d\" is too long to count in milliseconds"
    );
    assert_eq!(
        refusal(&window("fixed_window", "1", "1000")),
        "policy \"x\": window: must be a duration such as \"1s\" or \"500ms\", got number 1000"
    );
    assert_eq!(
        refusal(&one_policy("sliding_log", &["limit: 1"])),
        "policy \"x\": window: missing"
    );
    assert_eq!(
        refusal(&bucket("1", "{ tokens: 1, per: 10x }")),
        "policy \"x\": refill.per: \"10x\" is not a duration: expected <integer><unit> with unit one of ms, s, m, h, d (e.g. \"1s\", \"500ms\")"
    );
}

#[test]
fn capacity_in_units_must_stay_below_2_pow_53() {
    // 1 token per 1 ms: a token is one unit, so C itself is the bound.
    assert_eq!(
        refusal(&bucket("9007199254740992", "{ tokens: 1, per: 1ms }")),
        "policy \"x\": capacity: capacity × scale (9007199254740992 × 1) = 9007199254740992 must stay below 2^53 for exact arithmetic; use a coarser refill (tokens and per with a larger common divisor) or a smaller capacity"
    );
    assert_eq!(
        refusal(&bucket("9007199254740992", "{ tokens: 4, per: 1ms }")),
        "policy \"x\": capacity: capacity × scale (9007199254740992 × 1) = 9007199254740992 must stay below 2^53 for exact arithmetic; use a coarser refill (tokens and per with a larger common divisor) or a smaller capacity"
    );
    assert!(PolicySet::from_yaml(&bucket("9007199254740991", "{ tokens: 4, per: 1ms }")).is_ok());
    // 1 token a day: a token is 86,400,000 units.
    assert_eq!(
        refusal(&bucket("1000000000", "{ tokens: 1, per: 1d }")),
        "policy \"x\": capacity: capacity × scale (1000000000 × 86400000) = 86400000000000000 must stay below 2^53 for exact arithmetic; use a coarser refill (tokens and per with a larger common divisor) or a smaller capacity"
    );
    // 1000 per 1d shares a factor of 1000: a token is 86,400 units.
    assert!(PolicySet::from_yaml(&bucket("1000000000", "{ tokens: 1000, per: 1d }")).is_ok());
}

#[test]
fn refill_from_empty_must_take_less_than_2_pow_52_ms() {
    assert_eq!(
        refusal(&bucket("4503599627370496", "{ tokens: 1, per: 1ms }")),
        "policy \"x\": refill: refilling 4503599627370496 tokens at 1 per 1 ms takes 4503599627370496 ms; it must stay below 2^52 ms for exact arithmetic"
    );
    assert!(PolicySet::from_yaml(&bucket("4503599627370495", "{ tokens: 1, per: 1ms }")).is_ok());
}

#[test]
fn window_limit_must_stay_below_2_pow_53() {
    for algorithm in ["fixed_window", "sliding_window", "sliding_log"] {
        assert_eq!(
            refusal(&window(algorithm, "9007199254740992", "1ms")),
            "policy \"x\": limit: 9007199254740992 must stay below 2^53 for exact arithmetic"
        );
    }
    assert!(PolicySet::from_yaml(&window("fixed_window", "9007199254740991", "1d")).is_ok());
}

#[test]
fn sliding_window_limit_times_window_must_stay_below_2_pow_53() {
    assert_eq!(
        refusal(&window("sliding_window", "104249992", "1d")),
        "policy \"x\": limit: limit × window (104249992 × 86400000 ms) must stay below 2^53 for exact arithmetic"
    );
    assert!(PolicySet::from_yaml(&window("sliding_window", "104249991", "1d")).is_ok());
}

#[test]
fn sliding_log_limit_too_large_to_log_is_refused() {
    assert_eq!(
        refusal(&window("sliding_log", "10001", "1s")),
        "policy \"x\": limit: 10001 is too large for sliding_log, at most 10000; use sliding_window for larger limits"
    );
    assert!(PolicySet::from_yaml(&window("sliding_log", "10000", "1s")).is_ok());
}

#[test]
fn policy_names_are_plain_nonempty_and_short() {
    assert_eq!(
        refusal("policies:\n  - name: \"a b\"\n    algorithm: gcra\n"),
        "policy \"a b\": name: ' ' is not allowed; use letters, digits, '-', '_' and '.'"
    );
    assert_eq!(
        refusal("policies:\n  - name: \"\"\n    algorithm: gcra\n"),
        "policy \"\": name: must not be empty"
    );
    let long = "n".repeat(65);
    assert_eq!(
        refusal(&format!(
            "policies:\n  - name: {long}\n    algorithm: gcra\n"
        )),
        format!("policy \"{long}\": name: longer than 64 bytes")
    );
    assert_eq!(
        refusal("policies:\n  - name: 5\n    algorithm: gcra\n"),
        "config: policies[0]: name must be a string, got number 5"
    );
    assert_eq!(
        refusal("policies:\n  - algorithm: gcra\n"),
        "config: policies[0]: missing `name`"
    );
}

#[test]
fn documents_that_are_not_a_mapping_of_policies_are_refused() {
    for doc in ["", "---\n", "42", "- a\n- b\n", "just text"] {
        assert_eq!(
            refusal(doc),
            "config: expected a mapping with `policies`",
            "{doc:?}"
        );
    }
    assert_eq!(refusal("{}"), "config: missing `policies`");
    assert_eq!(refusal("policies: 5"), "config: `policies` must be a list");
    assert_eq!(
        refusal("policies: []"),
        "config: `policies` is empty: a config needs at least one policy"
    );
    assert_eq!(
        refusal(
            "policies:\n  - name: a\n    algorithm: gcra\n    capacity: 1\n    refill: { tokens: 1, per: 1s }\n  - 7\n"
        ),
        "config: policies[1] must be a mapping"
    );
}

#[test]
fn garbage_yaml_is_refused_as_yaml() {
    assert_eq!(
        refusal("policies: ["),
        "config is not valid YAML: unclosed bracket '[' at line 1, column 11"
    );
    assert_eq!(
        refusal("\"unterminated"),
        "config is not valid YAML: unclosed quote at line 1, column 1"
    );
    assert_eq!(
        refusal("policies:\n  - name: a\n    algorithm: gcra\n   capacity: 1\n"),
        "config is not valid YAML: while parsing a block collection, did not find expected '-' indicator at line 4, column 4"
    );
    // Nesting is bounded: deep documents are refused, not a stack overflow.
    assert!(
        refusal(&"[".repeat(100_000))
            .starts_with("config is not valid YAML: recursion limit exceeded")
    );
}

#[test]
fn yaml_errors_of_a_named_file_show_its_lines_under_its_name() {
    let refused = |text: &str| match parse_yaml_named(text, "tollgate.yaml") {
        Ok(doc) => panic!("accepted {doc}"),
        Err(e) => e.to_string(),
    };
    assert_eq!(
        refused("policies: ["),
        "config is not valid YAML: error: line 1 column 11: unclosed bracket '['\n --> tollgate.yaml:1:11\n  |\n1 | policies: [\n  |           ^ unclosed bracket '['"
    );
    assert_eq!(
        refused("policies:\n  - name: a\n    algorithm: gcra\n   capacity: 1\n"),
        "config is not valid YAML: error: line 4 column 4: while parsing a block collection, did not find expected '-' indicator\n --> tollgate.yaml:4:4\n  |\n2 |   - name: a\n3 |     algorithm: gcra\n4 |    capacity: 1\n  |    ^ while parsing a block collection, did not find expected '-' indicator"
    );
}

/// A key given twice is refused, never silently last-wins: which of two
/// `capacity` lines did the author mean?
#[test]
fn a_key_given_twice_is_refused_with_its_line() {
    let twice = "policies:\n  - name: a\n    algorithm: gcra\n    capacity: 1\n    capacity: 2\n    refill: { tokens: 1, per: 1s }\n";
    assert_eq!(
        refusal(twice),
        "config is not valid YAML: duplicate key \"capacity\" at line 5 column 5"
    );
    assert_eq!(
        parse_yaml_named(twice, "tollgate.yaml").map_err(|e| e.to_string()),
        Err("config is not valid YAML: duplicate key \"capacity\" at line 5 column 5".to_owned())
    );
    assert_eq!(
        refusal("policies: []\npolicies: []\n"),
        "config is not valid YAML: duplicate key \"policies\" at line 2 column 1"
    );
    assert_eq!(
        refusal("policies:\n  - { name: a, name: b }\n"),
        "config is not valid YAML: duplicate key \"name\" at line 2 column 16"
    );
}

/// Fragments of YAML and of our schema, to assemble near-miss documents.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "policies:",
            "\n",
            "  - ",
            "    ",
            "name: ",
            "x",
            "algorithm: ",
            "token_bucket",
            "gcra",
            "fixed_window",
            "sliding_window",
            "sliding_log",
            "capacity: ",
            "limit: ",
            "window: ",
            "refill: ",
            "{ tokens: 5, per: 1s }",
            "{",
            "}",
            "[",
            "]",
            ":",
            ",",
            "1s",
            "0ms",
            "-1",
            "0",
            "18446744073709551616",
            "1e400",
            "2.5",
            "&a ",
            "*a",
            "!!int ",
            "!!binary ",
            "---",
            "...",
            "'",
            "\"",
            "#",
            "~",
            "<<: *a",
            "? ",
            "|",
            ">",
            "\t",
            "\u{feff}",
            "%YAML 1.2",
            "9007199254740992",
            "10001",
        ])
        .prop_map(str::to_owned),
        "\\PC{0,8}",
    ]
}

fn shipped_policies() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/vectors/policies.yaml"
    );
    std::fs::read_to_string(path).expect("the shipped policies are readable")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        let _ = PolicySet::from_yaml(&text).map_err(|e| e.locate(&text, "p.yaml"));
        let _ = parse_yaml_named(&text, "p.yaml");
    }

    #[test]
    fn assembled_fragments_never_panic(parts in prop::collection::vec(fragment(), 0..40)) {
        let text = parts.concat();
        // Located, as a named file's faults are, and with tabs in it.
        let _ = PolicySet::from_yaml(&text).map_err(|e| e.locate(&text, "p.yaml"));
        let _ = parse_yaml_named(&text.replace("  ", "\t"), "p.yaml");
    }

    #[test]
    fn mutated_valid_config_never_panics(
        cuts in prop::collection::vec((any::<prop::sample::Index>(), 0usize..6, fragment()), 1..4)
    ) {
        let mut text = shipped_policies();
        for (at, remove, insert) in cuts {
            let mut start = at.index(text.len() + 1);
            while !text.is_char_boundary(start) {
                start -= 1;
            }
            let mut end = (start + remove).min(text.len());
            while !text.is_char_boundary(end) {
                end += 1;
            }
            text.replace_range(start..end, &insert);
        }
        if let Err(e) = PolicySet::from_yaml(&text) {
            prop_assert!(!e.locate(&text, "p.yaml").to_string().is_empty());
        }
    }
}

/// serde-saphyr reports some tabs where the token before them began (a
/// line or more early) and others a column late: both are placed at the
/// tab itself, named or not.
#[test]
fn a_tab_used_for_indentation_is_reported_at_the_tab() {
    let after_blank = "policies:\n  - name: a\n    algorithm: gcra\n\n\tcapacity: 1\n";
    assert_eq!(
        refusal(after_blank),
        "config is not valid YAML: while scanning a plain scalar, found a tab at line 5, column 1"
    );
    let after_comment = "policies:\n  - name: a\n    # the rate\n  \tcapacity: 1\n";
    assert_eq!(
        parse_yaml_named(after_comment, "tollgate.yaml").map_err(|e| e.to_string()),
        Err("config is not valid YAML: error: line 4 column 3: tabs disallowed within this context (block indentation)\n --> tollgate.yaml:4:3\n  |\n2 |   - name: a\n3 |     # the rate\n4 |       capacity: 1\n  |   ^ tabs disallowed within this context (block indentation)".to_owned())
    );
}

/// A policy's fault is shown at its field, found under the policy of its
/// name; lines past 9 widen the gutter, and a password is never shown.
#[test]
fn a_located_fault_shows_its_line_under_a_caret() {
    let mut text = String::from("policies:\n");
    for name in ["a", "b"] {
        text.push_str(&format!(
            "  - name: {name}\n    algorithm: gcra\n    capacity: 1\n    refill: {{tokens: 1, per: 1s}}\n"
        ));
    }
    text.push_str(
        "  - name: c\n    capacity: 0\n    algorithm: gcra\n    refill: {tokens: 1, per: 1s}\n",
    );
    let err = PolicySet::from_yaml(&text).expect_err("refused");
    assert_eq!(
        err.clone().locate(&text, "tollgate.yaml").to_string(),
        "policy \"c\": capacity: must be positive, got 0\n  --> tollgate.yaml:11:5\n   |\n 9 |     refill: {tokens: 1, per: 1s}\n10 |   - name: c\n11 |     capacity: 0\n   |     ^ policy \"c\": capacity: must be positive, got 0\n12 |     algorithm: gcra\n13 |     refill: {tokens: 1, per: 1s}\n   |"
    );
    // Unlocated, it reads as it always has.
    assert_eq!(
        err.to_string(),
        "policy \"c\": capacity: must be positive, got 0"
    );
    let duplicate = "policies:\n  - {name: a, algorithm: gcra, capacity: 1, refill: {tokens: 1, per: 1s}}\n  - {name: a, algorithm: gcra, capacity: 1, refill: {tokens: 1, per: 1s}}\n";
    let err = PolicySet::from_yaml(duplicate).expect_err("refused");
    assert_eq!(
        err.locate(duplicate, "p.yaml").to_string(),
        "policy \"a\": name: duplicate; policy names must be unique\n --> p.yaml:3:6\n  |\n1 | policies:\n2 |   - {name: a, algorithm: gcra, capacity: 1, refill: {tokens: 1, per: 1s}}\n3 |   - {name: a, algorithm: gcra, capacity: 1, refill: {tokens: 1, per: 1s}}\n  |      ^ policy \"a\": name: duplicate; policy names must be unique"
    );
}
