//! The `/v1/check` body's one schema: the serde types the server reads
//! (borrowing from the body where it can) and a client writes, and the
//! table of their fields that `check_fault.rs` names a refused body's
//! faults by (tests hold the two equal).

use std::borrow::Cow;
use std::ops::Deref;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use tollgate_core::Identity;

use crate::key::{parts_identity, value_identity};
use crate::response::Problem;

/// The body's fields as [`CheckBody`] declares them, in its order.
pub(crate) const BODY_FIELDS: [Field; 6] = [
    Field::new("policy", Holds::Text, Presence::Optional),
    Field::new("key", Holds::Key, Presence::Optional),
    Field::new("cost", Holds::Cost, Presence::Optional),
    Field::new("checks", Holds::Checks, Presence::Optional),
    Field::new("request_id", Holds::Text, Presence::Optional),
    Field::new("refund", Holds::Flag, Presence::Optional),
];

/// A batch check's fields as [`CheckItem`] declares them, in its order.
pub(crate) const ITEM_FIELDS: [Field; 3] = [
    Field::new("policy", Holds::Text, Presence::Required),
    Field::new("key", Holds::Key, Presence::Required),
    Field::new("cost", Holds::Cost, Presence::Defaulted),
];

/// One field of the schema: its name, what it holds, whether it may be left out.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Field {
    pub(crate) name: &'static str,
    pub(crate) holds: Holds,
    pub(crate) presence: Presence,
}

impl Field {
    const fn new(name: &'static str, holds: Holds, presence: Presence) -> Self {
        Self {
            name,
            holds,
            presence,
        }
    }
}

/// What a field's value must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Holds {
    /// A string ([`Text`]).
    Text,
    /// A string or an object of string parts ([`CheckKey`]).
    Key,
    /// A whole number ≥ 0 (`u64`).
    Cost,
    /// A list of checks, each an object of [`ITEM_FIELDS`].
    Checks,
    /// `true` or `false`.
    Flag,
}

/// Whether a field may be left out, as its serde type says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Presence {
    /// An `Option`: absent or `null` (which one the handler needs is its to say).
    Optional,
    /// Absent takes its default; `null` is refused.
    Defaulted,
    /// Must be there, and not `null`.
    Required,
}

/// The body, read by the one schema: only a JSON object is a check, at the
/// top and in `checks` alike (serde's derive alone also reads a struct from
/// a list, `["p","k"]`, which is not the documented body).
pub fn parse_check_body(body: &[u8]) -> Result<CheckBody<'_>, serde_json::Error> {
    serde_json::from_slice::<Object<CheckBody<'_>>>(body).map(|Object(parsed)| parsed)
}

/// A body: one check (`policy`, `key`, `cost`) or a batch (`checks`).
/// Written with only the fields that are set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckBody<'a> {
    /// One check's policy.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Text<'a>>,
    /// One check's key.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub key: Option<CheckKey<'a>>,
    /// One check's cost; 1 when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<u64>,
    /// A batch, decided all or nothing.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<Vec<Object<CheckItem<'a>>>>,
    /// The client's id for this unit of work: a retry under it inside its
    /// policy's `retry_window` is answered again, not charged again.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<Text<'a>>,
    /// `true`: give `cost` units back (an operation that was charged
    /// did not happen) instead of spending them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund: Option<bool>,
}

impl<'a> CheckBody<'a> {
    /// One check: `cost` units of `policy` for `key`.
    pub fn one(policy: impl Into<Text<'a>>, key: CheckKey<'a>, cost: u64) -> Self {
        Self {
            policy: Some(policy.into()),
            key: Some(key),
            cost: Some(cost),
            ..Self::empty()
        }
    }

    /// A batch: every check admitted, or none charged.
    pub fn batch(checks: impl IntoIterator<Item = CheckItem<'a>>) -> Self {
        Self {
            checks: Some(checks.into_iter().map(Object).collect()),
            ..Self::empty()
        }
    }

    /// The same body under the request id `id`.
    #[must_use]
    pub fn with_request_id(mut self, id: impl Into<Text<'a>>) -> Self {
        self.request_id = Some(id.into());
        self
    }

    /// The same check as a refund: its cost given back, not spent.
    #[must_use]
    pub fn refund(mut self) -> Self {
        self.refund = Some(true);
        self
    }

    fn empty() -> Self {
        Self {
            policy: None,
            key: None,
            cost: None,
            checks: None,
            request_id: None,
            refund: None,
        }
    }
}

/// One of a batch's `checks`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckItem<'a> {
    /// The policy to check.
    #[serde(borrow)]
    pub policy: Text<'a>,
    /// The identity, by key.
    #[serde(borrow)]
    pub key: CheckKey<'a>,
    /// The units this check spends; 1 when left out.
    #[serde(default = "default_cost")]
    pub cost: u64,
}

impl<'a> CheckItem<'a> {
    /// `cost` units of `policy` for `key`.
    pub fn new(policy: impl Into<Text<'a>>, key: CheckKey<'a>, cost: u64) -> Self {
        Self {
            policy: policy.into(),
            key,
            cost,
        }
    }
}

/// `T` read from a JSON object only, never from a list; written as `T`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object<T>(pub T);

impl<T: Serialize> Serialize for Object<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<T> Deref for Object<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(StructFromMap(d)).map(Object)
    }
}

/// Hands a struct's visitor to the object reader (`deserialize_map`), so
/// a list is refused as the wrong type; every other request passes through.
struct StructFromMap<D>(D);

impl<'de, D: de::Deserializer<'de>> de::Deserializer<'de> for StructFromMap<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// A check's cost when the body leaves it out.
fn default_cost() -> u64 {
    1
}

/// A JSON string, borrowed from the body unless it has escapes. (serde's
/// own `Cow<str>` borrows only as a bare field, not inside an `Option`.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Text<'a>(pub Cow<'a, str>);

impl<'a> From<&'a str> for Text<'a> {
    fn from(text: &'a str) -> Self {
        Text(Cow::Borrowed(text))
    }
}

impl From<String> for Text<'_> {
    fn from(text: String) -> Self {
        Text(Cow::Owned(text))
    }
}

impl Serialize for Text<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

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
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckKey<'a> {
    /// One value.
    Value(Text<'a>),
    /// Named parts, in the order written (the identity does not depend on it).
    Parts(Vec<(Text<'a>, Text<'a>)>),
}

impl<'a> CheckKey<'a> {
    /// A key of one value.
    pub fn value(value: impl Into<Text<'a>>) -> Self {
        CheckKey::Value(value.into())
    }

    /// A key of named parts.
    pub fn parts<N: Into<Text<'a>>, V: Into<Text<'a>>>(
        parts: impl IntoIterator<Item = (N, V)>,
    ) -> Self {
        CheckKey::Parts(
            parts
                .into_iter()
                .map(|(n, v)| (n.into(), v.into()))
                .collect(),
        )
    }
}

impl Serialize for CheckKey<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            CheckKey::Value(value) => value.serialize(s),
            CheckKey::Parts(parts) => {
                let mut map = s.serialize_map(Some(parts.len()))?;
                for (name, value) in parts {
                    map.serialize_entry(name, value)?;
                }
                map.end()
            }
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for CheckKey<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = CheckKey<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or an object of string parts")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                TextVisitor.visit_borrowed_str(v).map(CheckKey::Value)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                TextVisitor.visit_str(v).map(CheckKey::Value)
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut parts = Vec::new();
                while let Some(part) = map.next_entry::<Text<'de>, Text<'de>>()? {
                    parts.push(part);
                }
                Ok(CheckKey::Parts(parts))
            }
        }
        d.deserialize_any(KeyVisitor)
    }
}

impl CheckKey<'_> {
    /// The identity the key names, refused when empty, repeated or longer
    /// than `max_key_bytes`.
    pub fn identity(&self, max_key_bytes: usize) -> Result<Identity, Problem> {
        match self {
            CheckKey::Value(v) => value_identity(v, max_key_bytes),
            CheckKey::Parts(parts) => {
                parts_identity(parts.iter().map(|(k, v)| (&**k, &**v)), max_key_bytes)
            }
        }
    }
}
