//! The `/v1/check` body's one schema: the serde types the handler reads
//! (borrowing from the body where it can), and the table of their fields
//! that `check_fault.rs` names a refused body's faults by.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};
use tollgate_core::Identity;

use super::response::Problem;

/// A body: one check (`policy`, `key`, `cost`) or a batch (`checks`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CheckBody<'a> {
    #[serde(borrow, default)]
    pub(super) policy: Option<Text<'a>>,
    #[serde(borrow, default)]
    pub(super) key: Option<KeyJson<'a>>,
    #[serde(default)]
    pub(super) cost: Option<u64>,
    #[serde(borrow, default)]
    pub(super) checks: Option<Vec<CheckItem<'a>>>,
    /// The client's id for this unit of work: a retry under it inside its
    /// policy's `retry_window` is answered again, not charged again.
    #[serde(borrow, default)]
    pub(super) request_id: Option<Text<'a>>,
}

/// One of a batch's `checks`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CheckItem<'a> {
    #[serde(borrow)]
    pub(super) policy: Text<'a>,
    #[serde(borrow)]
    pub(super) key: KeyJson<'a>,
    #[serde(default = "default_cost")]
    pub(super) cost: u64,
}

/// A check's cost when the body leaves it out.
fn default_cost() -> u64 {
    1
}

/// A JSON string, borrowed from the body unless it has escapes. (serde's
/// own `Cow<str>` borrows only as a bare field, not inside an `Option`.)
pub(super) struct Text<'a>(Cow<'a, str>);

impl std::ops::Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text<'de>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Text(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Text(Cow::Owned(v.to_owned())))
    }
}

/// `"acme"` or `{"tenant": "acme", "route": "/orders"}`.
pub(super) enum KeyJson<'a> {
    Value(Text<'a>),
    Parts(Vec<(Text<'a>, Text<'a>)>),
}

impl<'de: 'a, 'a> Deserialize<'de> for KeyJson<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = KeyJson<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or an object of string parts")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                TextVisitor.visit_borrowed_str(v).map(KeyJson::Value)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                TextVisitor.visit_str(v).map(KeyJson::Value)
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut parts = Vec::new();
                while let Some(part) = map.next_entry::<Text<'de>, Text<'de>>()? {
                    parts.push(part);
                }
                Ok(KeyJson::Parts(parts))
            }
        }
        d.deserialize_any(KeyVisitor)
    }
}

impl KeyJson<'_> {
    pub(super) fn identity(&self, max_key_bytes: usize) -> Result<Identity, Problem> {
        let identity = match self {
            KeyJson::Value(v) if v.is_empty() => {
                return Err(Problem::unprocessable("key must not be empty"));
            }
            KeyJson::Value(v) => Identity::value(v),
            KeyJson::Parts(parts) => Identity::composite(parts.iter().map(|(k, v)| (&**k, &**v)))
                .map_err(|e| Problem::unprocessable(format!("key: {e}")))?,
        };
        if identity.as_bytes().len() > max_key_bytes {
            return Err(Problem::too_large(format!(
                "key is longer than {max_key_bytes} bytes"
            )));
        }
        Ok(identity)
    }
}
