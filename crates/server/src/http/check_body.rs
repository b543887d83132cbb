//! The `/v1/check` body's one schema: the serde types the handler reads
//! (borrowing from the body where it can), and the table of their fields
//! that `check_fault.rs` names a refused body's faults by (tests hold the two equal).

use std::borrow::Cow;
use std::ops::Deref;

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};
use tollgate_core::Identity;

use tollgate_http::Problem;
use tollgate_http::{parts_identity, value_identity};

/// The body's fields as [`CheckBody`] declares them, in its order.
pub(super) const BODY_FIELDS: [Field; 6] = [
    Field::new("policy", Holds::Text, Presence::Optional),
    Field::new("key", Holds::Key, Presence::Optional),
    Field::new("cost", Holds::Cost, Presence::Optional),
    Field::new("checks", Holds::Checks, Presence::Optional),
    Field::new("request_id", Holds::Text, Presence::Optional),
    Field::new("refund", Holds::Flag, Presence::Optional),
];

/// A batch check's fields as [`CheckItem`] declares them, in its order.
pub(super) const ITEM_FIELDS: [Field; 3] = [
    Field::new("policy", Holds::Text, Presence::Required),
    Field::new("key", Holds::Key, Presence::Required),
    Field::new("cost", Holds::Cost, Presence::Defaulted),
];

/// One field of the schema: its name, what it holds, whether it may be left out.
#[derive(Clone, Copy, Debug)]
pub(super) struct Field {
    pub(super) name: &'static str,
    pub(super) holds: Holds,
    pub(super) presence: Presence,
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
pub(super) enum Holds {
    /// A string ([`Text`]).
    Text,
    /// A string or an object of string parts ([`KeyJson`]).
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
pub(super) enum Presence {
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
pub(super) fn parse(body: &[u8]) -> Result<CheckBody<'_>, serde_json::Error> {
    serde_json::from_slice::<Object<CheckBody<'_>>>(body).map(|Object(parsed)| parsed)
}

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
    pub(super) checks: Option<Vec<Object<CheckItem<'a>>>>,
    /// The client's id for this unit of work: a retry under it inside its
    /// policy's `retry_window` is answered again, not charged again.
    #[serde(borrow, default)]
    pub(super) request_id: Option<Text<'a>>,
    /// `true`: give `cost` units back (an operation that was charged
    /// did not happen) instead of spending them.
    #[serde(default)]
    pub(super) refund: Option<bool>,
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

/// `T` read from a JSON object only, never from a list.
pub(super) struct Object<T>(T);

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
        match self {
            KeyJson::Value(v) => value_identity(v, max_key_bytes),
            KeyJson::Parts(parts) => {
                parts_identity(parts.iter().map(|(k, v)| (&**k, &**v)), max_key_bytes)
            }
        }
    }
}
