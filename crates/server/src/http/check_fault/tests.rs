use proptest::prelude::*;

use super::*;

fn detail(body: &str) -> (u16, String) {
    let typed = serde_json::from_str::<u8>("x").expect_err("not a number");
    let problem = diagnose(body.as_bytes(), Some(&typed));
    (problem.status.as_u16(), problem.detail)
}

#[test]
fn each_fault_is_named_in_tollgates_words() {
    let cases = [
        (
            r#"{"policy":"slow","key":"v""#,
            400,
            "malformed JSON: the body ends early, at line 1 column 26",
        ),
        ("not json", 400, "malformed JSON at line 1 column 2"),
        (r#"{"a":1} x"#, 400, "malformed JSON at line 1 column 9"),
        (
            "[1]",
            422,
            "the body must be a JSON object with policy and key, or checks, got a list",
        ),
        (
            "null",
            422,
            "the body must be a JSON object with policy and key, or checks, got null",
        ),
        (
            r#""text""#,
            422,
            r#"the body must be a JSON object with policy and key, or checks, got "text""#,
        ),
        (
            r#"{"policy":"slow","key":"v","costs":1}"#,
            422,
            r#"unknown field "costs" (expected: policy, key, cost, checks)"#,
        ),
        (
            r#"{"policy":"slow","key":"v","cost":-1}"#,
            422,
            "cost must be a whole number ≥ 0, got -1",
        ),
        (
            r#"{"policy":"slow","key":"v","cost":1.5}"#,
            422,
            "cost must be a whole number ≥ 0, got 1.5",
        ),
        (
            r#"{"policy":"slow","key":"v","cost":"2"}"#,
            422,
            r#"cost must be a whole number ≥ 0, got "2""#,
        ),
        (
            r#"{"policy":"slow","key":"v","cost":18446744073709551616}"#,
            422,
            "cost must be a whole number ≥ 0, got 1.8446744073709552e+19",
        ),
        (
            r#"{"policy":7,"key":"v"}"#,
            422,
            "policy must be a string, got 7",
        ),
        (
            r#"{"policy":"slow","key":1}"#,
            422,
            "key must be a string or an object of string values, got 1",
        ),
        (
            r#"{"policy":"slow","key":["a"]}"#,
            422,
            "key must be a string or an object of string values, got a list",
        ),
        (
            r#"{"policy":"slow","key":{"a":1}}"#,
            422,
            "key.a must be a string, got 1",
        ),
        (
            r#"{"policy":"slow","key":{"a":"x","b":{}}}"#,
            422,
            "key.b must be a string, got an object",
        ),
        (
            r#"{"policy":"a","policy":"b","key":"v"}"#,
            422,
            r#"field "policy" appears twice"#,
        ),
        (
            r#"{"checks":{}}"#,
            422,
            "checks must be a list of checks, got an object",
        ),
        (
            r#"{"checks":[{"policy":"slow","key":"v"},7]}"#,
            422,
            "checks[1] must be an object with policy and key, got 7",
        ),
        (
            r#"{"checks":[{"policy":"slow","key":"v"},{"policy":"slow","key":"v","cost":-1}]}"#,
            422,
            "checks[1].cost must be a whole number ≥ 0, got -1",
        ),
        (
            r#"{"checks":[{"policy":"s","key":"v"},{"policy":"s","key":"v"},{"policy":"s","key":{"a":true}}]}"#,
            422,
            "checks[2].key.a must be a string, got true",
        ),
        (
            r#"{"checks":[{"policy":"s","key":"v","costs":2}]}"#,
            422,
            r#"unknown field "checks[0].costs" (expected: policy, key, cost)"#,
        ),
        (
            r#"{"checks":[{"policy":"s","key":"v","checks":[]}]}"#,
            422,
            r#"unknown field "checks[0].checks" (expected: policy, key, cost)"#,
        ),
        (
            r#"{"checks":[{"key":"v"}]}"#,
            422,
            "missing field `checks[0].policy`",
        ),
        (
            r#"{"checks":[{"policy":"s","key":"v","cost":null}]}"#,
            422,
            "checks[0].cost must be a whole number ≥ 0, got null",
        ),
        (
            r#"{"checks":[{"policy":null,"key":"v"}]}"#,
            422,
            "checks[0].policy must be a string, got null",
        ),
    ];
    for (body, status, want) in cases {
        assert_eq!(detail(body), (status, want.to_owned()), "{body}");
    }
}

#[test]
fn only_an_object_opens_a_check() {
    assert!(opens_an_object(b" \n\t{\"policy\":1}"));
    assert!(!opens_an_object(b"[\"slow\",\"v\"]"));
    assert!(!opens_an_object(b" null"));
    assert!(!opens_an_object(b""));
}

#[test]
fn long_client_text_is_cut_when_quoted_back() {
    let body = format!(r#"{{"policy":"s","key":"v","{}":1}}"#, "x".repeat(500));
    let (_, got) = detail(&body);
    assert_eq!(
        got,
        format!(
            r#"unknown field "{}…" (expected: policy, key, cost, checks)"#,
            "x".repeat(40)
        )
    );
}

#[test]
fn a_body_with_nothing_to_name_gets_a_plain_refusal() {
    assert_eq!(
        detail(r#"{"policy":"slow","key":"v"}"#),
        (422, "the body is not a valid check".to_owned())
    );
}

proptest! {
    /// Whatever the body, the answer is tollgate's: no serde phrases.
    #[test]
    fn never_panics_nor_speaks_serde(body in r#"[\[\]{}",:a-z0-9.\- ]{0,40}"#) {
        let (status, got) = detail(&body);
        prop_assert!(status == 400 || status == 422);
        for phrase in ["invalid type", "expected u64", "expected one of", "EOF while", "expected value", "expected ident"] {
            prop_assert!(!got.contains(phrase), "{body:?} → {got:?}");
        }
    }
}
