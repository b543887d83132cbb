//! One line of a trace, as `serve`'s capture writes it and `/v1/check`
//! spells a request: one check (`policy`, `key`, `cost`), a request of
//! several checks decided together (`checks`), or a refund (`"refund":
//! true`).

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use tollgate_core::Identity;

/// The most checks one line may carry: a request is bounded, so is its line.
pub const MAX_CHECKS: usize = 64;

/// A line's request: its checks at `t_ms`, decided together (all or
/// nothing, as `serve` decided them), or one check given back.
pub struct Event {
    pub t_ms: u64,
    items: Items,
    pub refund: bool,
}

/// One check, the common line, kept without a list of its own.
enum Items {
    One(Item),
    Many(Vec<Item>),
}

impl Event {
    /// The event's checks, in the line's order.
    pub fn items(&self) -> &[Item] {
        match &self.items {
            Items::One(item) => std::slice::from_ref(item),
            Items::Many(items) => items,
        }
    }
}

/// One check of an event.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Item {
    pub policy: String,
    pub key: EventKey,
    #[serde(default = "default_cost")]
    pub cost: u64,
}

/// An event's cost when the line leaves it out.
fn default_cost() -> u64 {
    1
}

/// The line as written: either the one check's fields, or `checks`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    t_ms: u64,
    policy: Option<String>,
    key: Option<EventKey>,
    cost: Option<u64>,
    #[serde(default)]
    refund: bool,
    checks: Option<Vec<Item>>,
}

/// The common line, one check, read without the other shapes' optional
/// fields: a line this does not take is read again as a [`Line`], whose
/// error is the one reported.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Single {
    t_ms: u64,
    policy: String,
    key: EventKey,
    #[serde(default = "default_cost")]
    cost: u64,
}

/// A trace line's event, or what is wrong with it.
pub fn parse_event(trimmed: &[u8]) -> Result<Event, String> {
    if trimmed.first() == Some(&b'{')
        && let Ok(one) = serde_json::from_slice::<Single>(trimmed)
    {
        return Ok(Event {
            t_ms: one.t_ms,
            items: Items::One(Item {
                policy: one.policy,
                key: one.key,
                cost: one.cost,
            }),
            refund: false,
        });
    }
    // serde reads a struct from an array too; a trace line is an object.
    if trimmed.first() != Some(&b'{') {
        let _: Line =
            serde_json::from_slice(trimmed).map_err(|e| format!("not a trace event: {e}"))?;
        return Err("not a trace event: expected a JSON object".into());
    }
    let line: Line =
        serde_json::from_slice(trimmed).map_err(|e| format!("not a trace event: {e}"))?;
    let Some(checks) = line.checks else {
        let policy = line
            .policy
            .ok_or("not a trace event: missing field `policy`")?;
        let key = line.key.ok_or("not a trace event: missing field `key`")?;
        return Ok(Event {
            t_ms: line.t_ms,
            items: Items::One(Item {
                policy,
                key,
                cost: line.cost.unwrap_or_else(default_cost),
            }),
            refund: line.refund,
        });
    };
    if line.policy.is_some() || line.key.is_some() || line.cost.is_some() {
        return Err(
            "not a trace event: a line with `checks` has no `policy`, `key` or `cost` of its own"
                .into(),
        );
    }
    if line.refund {
        return Err("not a trace event: a refund gives back one check, not `checks`".into());
    }
    match checks.len() {
        0 => Err("not a trace event: `checks` is empty".into()),
        n if n > MAX_CHECKS => Err(format!(
            "not a trace event: {n} checks, more than {MAX_CHECKS} a line"
        )),
        _ => Ok(Event {
            t_ms: line.t_ms,
            items: Items::Many(checks),
            refund: false,
        }),
    }
}

/// An event's key, spelled as `/v1/check` spells it: one value, or named
/// parts in any order (`{"tenant": "acme", "route": "/search"}`), the same
/// composite identity forward auth and RLS build.
pub enum EventKey {
    Value(String),
    Parts(Vec<(String, String)>),
}

impl EventKey {
    pub fn identity(&self) -> Result<Identity, String> {
        match self {
            EventKey::Value(value) => Ok(Identity::value(value)),
            EventKey::Parts(parts) => {
                Identity::composite(parts.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                    .map_err(|e| format!("key: {e}"))
            }
        }
    }

    /// The key as the line gave it, for `--format full`.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            EventKey::Value(value) => serde_json::Value::from(value.as_str()),
            EventKey::Parts(parts) => parts
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::from(v.as_str())))
                .collect::<serde_json::Map<_, _>>()
                .into(),
        }
    }
}

impl<'de> Deserialize<'de> for EventKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = EventKey;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an object of strings")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<EventKey, E> {
                Ok(EventKey::Value(value.to_owned()))
            }

            // Every part is kept, a repeated one too: the identity refuses
            // it by name rather than keep whichever came last.
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EventKey, A::Error> {
                let mut parts = Vec::new();
                while let Some(part) = map.next_entry::<String, String>()? {
                    parts.push(part);
                }
                Ok(EventKey::Parts(parts))
            }
        }
        deserializer.deserialize_any(KeyVisitor)
    }
}
