//! Why a `POST /v1/check` body was refused, in tollgate's words. The fast
//! typed parse stays on the success path; only when it fails is the body
//! read again, as a plain tree, and walked to name the first fault in
//! document order (`checks[2].cost must be a whole number ≥ 0, got -1`)
//! instead of passing serde's internals (`expected u64`) to a client. The
//! walk follows the schema's field table (`check_body.rs`), not a copy.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde_json::Number;
use tollgate_core::quote;

use crate::check_body::{BODY_FIELDS, Field, Holds, ITEM_FIELDS, Presence};
use crate::response::Problem;

/// The problem for a body the typed parse refused with `typed`.
pub fn diagnose_check_body(body: &[u8], typed: &serde_json::Error) -> Problem {
    let tree: Json = match serde_json::from_slice(body) {
        Ok(tree) => tree,
        Err(e) => return malformed(&e),
    };
    match body_fault(&tree) {
        Err(detail) => Problem::unprocessable(detail),
        // Every way the typed parse can fail is named above; should one be
        // missed, the client still gets tollgate's words, the log serde's.
        Ok(()) => {
            tracing::debug!(
                error = %tollgate_core::without_controls(&typed.to_string()),
                "a /v1/check body was refused for a reason not diagnosed"
            );
            Problem::unprocessable("the body is not a valid check")
        }
    }
}

fn malformed(e: &serde_json::Error) -> Problem {
    let (line, column) = (e.line(), e.column());
    Problem::bad_request(match e.classify() {
        serde_json::error::Category::Eof => {
            format!("malformed JSON: the body ends early, at line {line} column {column}")
        }
        _ => format!("malformed JSON at line {line} column {column}"),
    })
}

fn body_fault(tree: &Json) -> Result<(), String> {
    let Json::Object(fields) = tree else {
        return Err(format!(
            "the body must be a JSON object with policy and key, or checks, got {tree}"
        ));
    };
    check_fields(fields, "", &BODY_FIELDS)
}

/// The first fault among one object's fields against `schema` (the body's
/// or a batch check's); `at` prefixes their names.
fn check_fields(fields: &[(String, Json)], at: &str, schema: &[Field]) -> Result<(), String> {
    for (i, (name, value)) in fields.iter().enumerate() {
        let path = format!("{at}{name}");
        if fields[..i].iter().any(|(seen, _)| seen == name) {
            return Err(format!("field {} appears twice", quote(&path)));
        }
        let Some(field) = schema.iter().find(|field| field.name == name) else {
            return Err(format!(
                "unknown field {} (expected: {})",
                quote(&path),
                names(schema)
            ));
        };
        if field.presence == Presence::Optional && *value == Json::Null {
            continue;
        }
        value_fault(field.holds, value, &path)?;
    }
    match schema.iter().find(|field| {
        field.presence == Presence::Required && !fields.iter().any(|(name, _)| name == field.name)
    }) {
        Some(missing) => Err(format!("missing field `{at}{}`", missing.name)),
        None => Ok(()),
    }
}

/// Whether `value` is what the field at `path` holds.
fn value_fault(holds: Holds, value: &Json, path: &str) -> Result<(), String> {
    match holds {
        Holds::Text if !matches!(value, Json::String(_)) => {
            Err(format!("{path} must be a string, got {value}"))
        }
        Holds::Cost if !matches!(value, Json::Number(n) if n.as_u64().is_some()) => {
            Err(format!("{path} must be a whole number ≥ 0, got {value}"))
        }
        Holds::Flag if !matches!(value, Json::Bool(_)) => {
            Err(format!("{path} must be true or false, got {value}"))
        }
        Holds::Key => key_fault(value, path),
        Holds::Checks => checks_fault(value, path),
        Holds::Text | Holds::Cost | Holds::Flag => Ok(()),
    }
}

/// The schema's field names, as a refusal lists them.
fn names(schema: &[Field]) -> String {
    let names: Vec<&str> = schema.iter().map(|field| field.name).collect();
    names.join(", ")
}

fn key_fault(value: &Json, path: &str) -> Result<(), String> {
    match value {
        Json::String(_) => Ok(()),
        Json::Object(parts) => match parts.iter().find(|(_, v)| !matches!(v, Json::String(_))) {
            Some((part, v)) => Err(format!(
                "{path}.{} must be a string, got {v}",
                part_name(part)
            )),
            None => Ok(()),
        },
        other => Err(format!(
            "{path} must be a string or an object of string values, got {other}"
        )),
    }
}

/// A key part's name in a field path: bare when it is a short word
/// (`key.tenant`), else quoted like any client input (`key."a b"`).
fn part_name(part: &str) -> String {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
    if !part.is_empty() && part.len() <= tollgate_core::QUOTE_MAX_BYTES && part.bytes().all(word) {
        return part.to_owned();
    }
    quote(part)
}

fn checks_fault(value: &Json, path: &str) -> Result<(), String> {
    let Json::Array(items) = value else {
        return Err(format!("{path} must be a list of checks, got {value}"));
    };
    for (i, item) in items.iter().enumerate() {
        let Json::Object(fields) = item else {
            return Err(format!(
                "{path}[{i}] must be an object with policy and key, got {item}"
            ));
        };
        check_fields(fields, &format!("{path}[{i}]."), &ITEM_FIELDS)?;
    }
    Ok(())
}

/// A JSON document as written: unlike `serde_json::Value`, an object keeps
/// its fields in order and a field given twice twice, so the first fault
/// found is the one the typed parse met.
#[derive(Debug, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

/// How a value is named after "got": scalars as JSON, containers by kind.
impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Json::Null => f.write_str("null"),
            Json::Bool(b) => write!(f, "{b}"),
            Json::Number(n) => write!(f, "{n}"),
            // Client input: a short, escaped prefix (tollgate_core::quote).
            Json::String(s) => f.write_str(&quote(s)),
            Json::Array(_) => f.write_str("a list"),
            Json::Object(_) => f.write_str("an object"),
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        // JSON has no NaN or infinity, so every parsed float is finite.
        Ok(Number::from_f64(v).map_or(Json::Null, Json::Number))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut fields = Vec::new();
        while let Some(field) = map.next_entry()? {
            fields.push(field);
        }
        Ok(Json::Object(fields))
    }
}

#[cfg(test)]
mod tests;
