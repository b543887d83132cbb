use proptest::prelude::*;
use serde::de::{self, Deserializer, Visitor};

use super::*;
use crate::check_body::{self, CheckBody, CheckItem};

fn detail(body: &str) -> (u16, String) {
    let typed = serde_json::from_str::<u8>("x").expect_err("not a number");
    let problem = diagnose_check_body(body.as_bytes(), &typed);
    (problem.status.as_u16(), problem.detail)
}

fn assert_named(cases: &[(&str, u16, &str)]) {
    for &(body, status, want) in cases {
        assert_eq!(detail(body), (status, want.to_owned()), "{body}");
    }
}

#[test]
fn each_fault_of_a_body_is_named_in_tollgates_words() {
    assert_named(&[
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
            r#"unknown field "costs" (expected: policy, key, cost, checks, request_id, refund)"#,
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
        // `request_id` is one of the body's fields: a fault beside it is
        // named as itself.
        (
            r#"{"request_id":"r1","policy":"p","key":"k","cost":-1}"#,
            422,
            "cost must be a whole number ≥ 0, got -1",
        ),
        (
            r#"{"policy":"slow","key":"v","request_id":7}"#,
            422,
            "request_id must be a string, got 7",
        ),
        (
            r#"{"request_id":null,"policy":"slow","key":"v","costs":1}"#,
            422,
            r#"unknown field "costs" (expected: policy, key, cost, checks, request_id, refund)"#,
        ),
        // A null does not make an unknown field known.
        (
            r#"{"policy":"slow","key":"v","costs":null}"#,
            422,
            r#"unknown field "costs" (expected: policy, key, cost, checks, request_id, refund)"#,
        ),
    ]);
}

#[test]
fn each_fault_of_a_batch_is_named_with_its_place() {
    assert_named(&[
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
        (
            r#"{"checks":[["s","v"]]}"#,
            422,
            "checks[0] must be an object with policy and key, got a list",
        ),
        (
            r#"{"request_id":"b1","checks":[{"policy":"s","key":"v","request_id":"b1"}]}"#,
            422,
            r#"unknown field "checks[0].request_id" (expected: policy, key, cost)"#,
        ),
    ]);
}

#[test]
fn only_an_object_opens_a_check() {
    let opens = |body: &[u8]| check_body::parse_check_body(body).is_ok();
    assert!(opens(b" \n\t{\"policy\":\"slow\",\"key\":\"v\"}"));
    assert!(!opens(b"[\"slow\",\"v\"]"));
    assert!(!opens(b" null"));
    assert!(!opens(b""));
    // Nor does a list stand for one of a batch's checks.
    assert!(opens(b"{\"checks\":[{\"policy\":\"slow\",\"key\":\"v\"}]}"));
    assert!(!opens(b"{\"checks\":[[\"slow\",\"v\"]]}"));
    assert!(!opens(b"{\"checks\":[[\"slow\",\"v\",1]]}"));
}

#[test]
fn long_client_text_is_cut_when_quoted_back() {
    let body = format!(r#"{{"policy":"s","key":"v","{}":1}}"#, "x".repeat(500));
    let (_, got) = detail(&body);
    assert_eq!(
        got,
        format!(
            r#"unknown field "{}"... (500 bytes) (expected: policy, key, cost, checks, request_id, refund)"#,
            "x".repeat(32)
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

/// The field names a serde-derived struct declares, as it hands them to
/// `deserialize_struct`: what the typed parse reads, taken from the type.
fn declared_fields<T: serde::Deserialize<'static>>() -> &'static [&'static str] {
    struct Recorder<'a>(&'a mut &'static [&'static str]);
    impl<'de> Deserializer<'de> for Recorder<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("only a struct's fields are recorded"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("recorded"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Recorder(&mut fields));
    fields
}

fn table(schema: &[Field]) -> Vec<&'static str> {
    schema.iter().map(|field| field.name).collect()
}

#[test]
fn every_field_the_serde_types_read_is_one_the_diagnoser_knows() {
    assert_eq!(
        declared_fields::<CheckBody<'static>>().to_vec(),
        table(&BODY_FIELDS),
        "CheckBody's fields and BODY_FIELDS"
    );
    assert_eq!(
        declared_fields::<CheckItem<'static>>().to_vec(),
        table(&ITEM_FIELDS),
        "CheckItem's fields and ITEM_FIELDS"
    );
    assert!(table(&BODY_FIELDS).contains(&"request_id"));
}

/// Values of every kind a client might send in a field.
const SAMPLES: [&str; 14] = [
    r#""s""#,
    r#""""#,
    "0",
    "7",
    "-1",
    "1.5",
    "null",
    "true",
    r#"{"a":"b"}"#,
    r#"{"a":1}"#,
    "[]",
    r#"["s"]"#,
    r#"[{"policy":"p","key":"k"}]"#,
    r#"[["p","k"]]"#,
];

/// The typed parse and the diagnoser agree on `body`: one refuses it
/// exactly when the other finds a fault in it.
fn agree(body: &str) -> Result<(), String> {
    let typed = check_body::parse_check_body(body.as_bytes()).map(|_| ());
    let named = match serde_json::from_str::<Json>(body) {
        Ok(tree) => body_fault(&tree),
        Err(e) => Err(format!("malformed: {e}")),
    };
    if typed.is_ok() == named.is_ok() {
        Ok(())
    } else {
        Err(format!(
            "{body}: typed parse {typed:?}, diagnoser {named:?}"
        ))
    }
}

#[test]
fn the_diagnoser_refuses_a_value_exactly_when_the_typed_parse_does() {
    for field in BODY_FIELDS {
        for value in SAMPLES {
            agree(&format!(r#"{{"{}":{value}}}"#, field.name)).unwrap_or_else(|e| panic!("{e}"));
        }
    }
    // A batch check: each field set to each sample beside the required
    // others, then each field left out.
    let item_with = |name: &str, value: Option<&str>| {
        let mut parts = Vec::new();
        for field in ITEM_FIELDS {
            if field.name == name {
                parts.extend(value.map(|v| format!(r#""{name}":{v}"#)));
            } else if field.presence == Presence::Required {
                parts.push(format!(r#""{}":"x""#, field.name));
            }
        }
        format!(r#"{{"checks":[{{{}}}]}}"#, parts.join(","))
    };
    for field in ITEM_FIELDS {
        for value in SAMPLES {
            agree(&item_with(field.name, Some(value))).unwrap_or_else(|e| panic!("{e}"));
        }
        agree(&item_with(field.name, None)).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// A field of a generated body: a known name or a near miss, any sample.
fn field(names: &'static [&'static str]) -> impl Strategy<Value = String> {
    (
        prop::sample::select(names),
        prop::sample::select(&SAMPLES[..]),
    )
        .prop_map(|(name, value)| format!(r#""{name}":{value}"#))
}

fn object(fields: Vec<String>) -> String {
    format!("{{{}}}", fields.join(","))
}

proptest! {
    /// Whatever the body, the diagnoser finds a fault exactly when the
    /// typed parse refuses: one schema, whichever reads it.
    #[test]
    fn the_diagnoser_and_the_typed_parse_never_disagree(
        top in prop::collection::vec(
            field(&["policy", "key", "cost", "request_id", "checks", "costs"]),
            0..5,
        ),
        items in prop::collection::vec(
            prop::collection::vec(field(&["policy", "key", "cost", "checks"]), 0..4),
            0..3,
        ),
        batch in any::<bool>(),
    ) {
        let mut fields = top;
        if batch {
            let items: Vec<String> = items.into_iter().map(object).collect();
            fields.push(format!(r#""checks":[{}]"#, items.join(",")));
        }
        let body = object(fields);
        prop_assert_eq!(agree(&body), Ok(()));
    }
}
