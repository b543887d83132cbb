//! How every section reads a field: one fault shape for a policy's field,
//! one for the document's, and serde's refusals placed at the field it was
//! reading, so a message names where the fault is whichever section has it.

use serde::de::DeserializeOwned;
use serde_json::Value;
use tollgate_core::{ConfigError, NodePath, Policy, describe};

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
        for segment in e.path() {
            path = match segment {
                serde_path_to_error::Segment::Seq { index } => path.then(*index),
                serde_path_to_error::Segment::Map { key } => path.then(key),
                _ => break,
            };
        }
        ConfigError::Document(format!("{name}: {}", e.inner())).at(path)
    })
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
