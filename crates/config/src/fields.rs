//! How every section reads a field: one fault shape for a policy's field,
//! one for the document's, and serde's refusals placed at the field it was
//! reading, so a message names where the fault is whichever section has it.

use serde::de::DeserializeOwned;
use serde_json::Value;
use tollgate_core::{ConfigError, NodePath, Policy, describe, unknown_field};

/// A fault in the document outside any policy.
pub(crate) fn doc(message: String) -> ConfigError {
    ConfigError::Document(message)
}

/// `value` as serde reads it into a `T`; a refusal says `name: why` and is
/// about the field serde was reading, below `at`.
pub fn deserialize_at<T: DeserializeOwned>(
    value: &Value,
    at: NodePath,
    name: &str,
) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(value.clone()).map_err(|e| {
        let mut path = at;
        let mut dotted = name.to_owned();
        let segments: Vec<_> = e.path().iter().collect();
        for (i, segment) in segments.iter().enumerate() {
            path = match segment {
                serde_path_to_error::Segment::Seq { index } => {
                    dotted.push_str(&format!("[{index}]"));
                    path.then(*index)
                }
                serde_path_to_error::Segment::Map { key } => {
                    // The unknown field itself is named after the colon.
                    if i + 1 < segments.len() {
                        dotted.push_str(&format!(".{key}"));
                    }
                    path.then(key)
                }
                _ => break,
            };
        }
        let inner = e.inner().to_string();
        let message = match unknown_of_serde(&inner) {
            Some((key, known)) => format!("{dotted}: {key}: {}", unknown_field(&key, &known)),
            None => format!("{name}: {inner}"),
        };
        ConfigError::Document(message).at(path)
    })
}

/// serde's `unknown field `k`, expected one of `a`, `b`` (or `expected `a``,
/// or `there are no fields`) as the field and the known ones, so it is
/// told in the style every other section uses.
fn unknown_of_serde(message: &str) -> Option<(String, Vec<&str>)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (key, rest) = rest.split_once('`')?;
    // Between backticks, every other piece is a field name.
    let known = rest.split('`').skip(1).step_by(2).collect();
    Some((key.to_owned(), known))
}

/// A fault in `field` of `policy`: `policy "x": field: reason`.
pub(crate) fn field_error(policy: &Policy, field: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Field {
        policy: policy.name().to_owned(),
        field: field.to_owned(),
        reason: reason.into(),
    }
}

/// `value` as a whole number ≥ 0, or a fault naming the policy's field.
pub(crate) fn whole_number(
    policy: &Policy,
    field: &str,
    value: &Value,
) -> Result<u64, ConfigError> {
    value.as_u64().ok_or_else(|| {
        field_error(
            policy,
            field,
            format!("must be a whole number ≥ 0, got {}", describe(value)),
        )
    })
}
