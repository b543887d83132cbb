//! The `/v1/check` body as the client writes it and the decision as it
//! reads it (docs/http-api.md): one check, or an all-or-nothing batch.
//! The key goes as the server reads keys — a single value as a string,
//! a composite as an object of its named parts — so a check asked
//! remotely spends the same identity's budget as one asked in process.

use serde::{Deserialize, Serialize};
use tollgate_core::{Decision, Identity};
use tollgate_store::{Check, StoreError};

/// An identity's key as JSON: its value, or its parts by name.
pub(crate) enum Key<'a> {
    Value(&'a str),
    Parts(Vec<(&'a str, &'a str)>),
}

impl Serialize for PartsMap<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (*k, *v)))
    }
}

/// A composite's parts as a JSON object (not a list of pairs).
struct PartsMap<'a>(&'a [(&'a str, &'a str)]);

impl Key<'_> {
    fn json(&self, out: &mut serde_json::Map<String, serde_json::Value>) {
        let value = match self {
            Key::Value(v) => serde_json::Value::from(*v),
            Key::Parts(parts) => serde_json::to_value(PartsMap(parts)).unwrap_or_default(),
        };
        out.insert("key".to_owned(), value);
    }
}

/// The key of `identity`, read back from its encoding (tollgate-core's
/// `Identity`: a tag, then the value or LEB128-length-prefixed name and
/// value pairs). `None` for a shard or a value that is not UTF-8, which
/// `/v1/check` has no spelling for.
pub(crate) fn key_of(identity: &Identity) -> Option<Key<'_>> {
    let (&tag, mut rest) = identity.as_bytes().split_first()?;
    match tag {
        0 => std::str::from_utf8(rest).ok().map(Key::Value),
        1 => {
            let mut parts = Vec::new();
            while !rest.is_empty() {
                let name = std::str::from_utf8(take_length_prefixed(&mut rest)?).ok()?;
                let value = std::str::from_utf8(take_length_prefixed(&mut rest)?).ok()?;
                parts.push((name, value));
            }
            Some(Key::Parts(parts))
        }
        _ => None,
    }
}

fn take_length_prefixed<'a>(input: &mut &'a [u8]) -> Option<&'a [u8]> {
    let mut len: usize = 0;
    let mut shift = 0u32;
    loop {
        let (&byte, rest) = input.split_first()?;
        *input = rest;
        len |= usize::from(byte & 0x7f).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    let (field, rest) = input.split_at_checked(len)?;
    *input = rest;
    Some(field)
}

/// The body for `checks`: one check's fields at the top, or `checks`.
pub(crate) fn body(checks: &[Check<'_>], request_id: Option<&str>) -> Result<Vec<u8>, StoreError> {
    let item = |check: &Check<'_>| {
        let key = key_of(check.identity).ok_or_else(|| {
            StoreError::Config(format!(
                "identity {} has no /v1/check key (not UTF-8, or a shard)",
                check.identity
            ))
        })?;
        let mut object = serde_json::Map::with_capacity(4);
        object.insert("policy".to_owned(), check.policy.name().into());
        key.json(&mut object);
        object.insert("cost".to_owned(), check.cost.into());
        Ok::<_, StoreError>(object)
    };
    let mut top = match checks {
        [one] => item(one)?,
        _ => {
            let items = checks
                .iter()
                .map(|c| item(c).map(serde_json::Value::Object))
                .collect::<Result<Vec<_>, _>>()?;
            let mut top = serde_json::Map::with_capacity(2);
            top.insert("checks".to_owned(), items.into());
            top
        }
    };
    if let Some(id) = request_id {
        top.insert("request_id".to_owned(), id.into());
    }
    serde_json::to_vec(&top).map_err(|e| StoreError::Protocol(e.to_string()))
}

/// One decision as the server writes it.
#[derive(Deserialize)]
pub(crate) struct DecisionJson {
    pub(crate) allowed: bool,
    pub(crate) limit: u64,
    pub(crate) remaining: i64,
    pub(crate) retry_after_ms: Option<u64>,
    pub(crate) reset_after_ms: u64,
    #[serde(default)]
    pub(crate) replayed: bool,
}

impl DecisionJson {
    fn decision(&self) -> Decision {
        Decision {
            allowed: self.allowed,
            limit: self.limit,
            remaining: self.remaining,
            retry_after_ms: self.retry_after_ms,
            reset_after_ms: self.reset_after_ms,
        }
    }
}

#[derive(Deserialize)]
struct BatchJson {
    decisions: Vec<DecisionJson>,
}

/// The decisions of an answer to `n` checks, and whether it was replayed.
pub(crate) fn decisions(body: &[u8], n: usize) -> Result<(Vec<Decision>, bool), StoreError> {
    let protocol = |e: serde_json::Error| StoreError::Protocol(format!("/v1/check answer: {e}"));
    let parsed: Vec<DecisionJson> = if n == 1 {
        vec![serde_json::from_slice(body).map_err(protocol)?]
    } else {
        serde_json::from_slice::<BatchJson>(body)
            .map_err(protocol)?
            .decisions
    };
    if parsed.len() != n {
        return Err(StoreError::Protocol(format!(
            "/v1/check answered {} decisions for {n} checks",
            parsed.len()
        )));
    }
    let replayed = parsed.iter().any(|d| d.replayed);
    Ok((
        parsed.iter().map(DecisionJson::decision).collect(),
        replayed,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_key_is_its_string_and_a_composite_its_parts() {
        let value = Identity::value("acme");
        assert!(matches!(key_of(&value), Some(Key::Value("acme"))));
        let parts = Identity::composite([("x-tenant", "acme"), ("route", "/orders")]).unwrap();
        let Some(Key::Parts(got)) = key_of(&parts) else {
            panic!("a composite reads back as parts");
        };
        assert_eq!(got, vec![("route", "/orders"), ("x-tenant", "acme")]);
        assert!(key_of(&value.shard(1)).is_none());
    }

    #[test]
    fn a_composite_is_written_as_an_object() {
        let policy = tollgate_core::Policy::new(
            "p",
            tollgate_core::Limits::FixedWindow(tollgate_core::Window::new(5, 1_000).unwrap()),
        );
        let long = "v".repeat(300);
        let id = Identity::composite([("x-tenant", long.as_str())]).unwrap();
        let check = Check {
            policy: &policy,
            identity: &id,
            cost: 2,
        };
        let written = String::from_utf8(body(&[check], Some("r1")).unwrap()).unwrap();
        assert_eq!(
            written,
            format!(r#"{{"cost":2,"key":{{"x-tenant":"{long}"}},"policy":"p","request_id":"r1"}}"#)
        );
    }
}
