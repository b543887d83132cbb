//! `on_store_failure` and `local_share_percent`, read the same way for a
//! tollgate policy and for an envoyproxy/ratelimit descriptor's `tollgate`
//! settings: one parser, one default share, so the two cannot drift apart.
//! Each caller says where a fault is (a policy's field, a file's path).

use serde_json::{Map, Value};
use tollgate_core::describe;
use tollgate_limiter::OnStoreFailure;

/// The share of its limit a `local` policy enforces per instance by default.
pub const DEFAULT_LOCAL_SHARE_PERCENT: u8 = 10;

/// A fault in one of the two fields: which, and what is wrong with it.
#[derive(Debug, PartialEq, Eq)]
pub struct FieldFault {
    /// `on_store_failure` or `local_share_percent`.
    pub field: &'static str,
    /// What is wrong with its value.
    pub reason: String,
}

impl FieldFault {
    fn new(field: &'static str, reason: impl Into<String>) -> Self {
        Self {
            field,
            reason: reason.into(),
        }
    }
}

/// The failure mode `fields` choose; `None` when they choose none (a policy
/// then fails open, a descriptor answers with an error status).
pub fn parse_failure_mode(
    fields: &Map<String, Value>,
) -> Result<Option<OnStoreFailure>, FieldFault> {
    let mode = match fields.get("on_store_failure") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(other) => {
            return Err(FieldFault::new(
                "on_store_failure",
                format!(
                    "must be fail_open, fail_closed or local, got {}",
                    describe(other)
                ),
            ));
        }
    };
    let share = match fields.get("local_share_percent") {
        None => None,
        Some(v) => match v.as_u64().and_then(|n| u8::try_from(n).ok()) {
            Some(n @ 1..=100) => Some(n),
            _ => {
                return Err(FieldFault::new(
                    "local_share_percent",
                    format!(
                        "must be a whole percentage from 1 to 100, got {}",
                        describe(v)
                    ),
                ));
            }
        },
    };
    match (mode, share) {
        (None, None) => Ok(None),
        (Some("fail_open"), None) => Ok(Some(OnStoreFailure::FailOpen)),
        (Some("fail_closed"), None) => Ok(Some(OnStoreFailure::FailClosed)),
        (Some("local"), share) => Ok(Some(OnStoreFailure::Local {
            share_percent: share.unwrap_or(DEFAULT_LOCAL_SHARE_PERCENT),
        })),
        (None | Some("fail_open" | "fail_closed"), Some(_)) => Err(FieldFault::new(
            "local_share_percent",
            "only applies with on_store_failure: local",
        )),
        (Some(other), _) => Err(FieldFault::new(
            "on_store_failure",
            format!("unknown mode {other:?} (expected one of: fail_open, fail_closed, local)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: serde_json::Value) -> Result<Option<OnStoreFailure>, FieldFault> {
        match yaml {
            Value::Object(fields) => parse_failure_mode(&fields),
            _ => unreachable!("the tests pass mappings"),
        }
    }

    #[test]
    fn no_mode_is_none_and_local_defaults_to_its_share() {
        assert_eq!(parse(serde_json::json!({})), Ok(None));
        assert_eq!(
            parse(serde_json::json!({"on_store_failure": "local"})),
            Ok(Some(OnStoreFailure::Local {
                share_percent: DEFAULT_LOCAL_SHARE_PERCENT
            }))
        );
        assert_eq!(
            parse(serde_json::json!({"on_store_failure": "local", "local_share_percent": 40})),
            Ok(Some(OnStoreFailure::Local { share_percent: 40 }))
        );
    }

    #[test]
    fn a_share_without_local_names_the_share() {
        for fields in [
            serde_json::json!({"local_share_percent": 40}),
            serde_json::json!({"on_store_failure": "fail_open", "local_share_percent": 40}),
        ] {
            assert_eq!(
                parse(fields).map_err(|f| f.field),
                Err("local_share_percent")
            );
        }
    }

    #[test]
    fn shares_outside_1_to_100_are_refused() {
        for share in [
            serde_json::json!(0),
            serde_json::json!(101),
            serde_json::json!(356),
        ] {
            let fault = parse(
                serde_json::json!({"on_store_failure": "local", "local_share_percent": share}),
            );
            assert_eq!(fault.map_err(|f| f.field), Err("local_share_percent"));
        }
    }
}
