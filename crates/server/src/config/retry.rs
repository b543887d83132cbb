//! A policy's request ids: how long a retry is recognised (`retry_window`)
//! and how many ids an identity keeps (`retry_ids`). See docs/config.md.

use serde_json::{Map, Value};
use tollgate_core::{ConfigError, Policy, describe, format_duration_ms, parse_duration_ms};
use tollgate_store::{
    DEFAULT_RETRY_IDS, DEFAULT_RETRY_WINDOW_MS, RETRY_IDS_RANGE, RETRY_WINDOW_RANGE_MS,
};

use super::field_error;

pub use tollgate_limiter::RetryRule;

/// `retry_window: 60s` (or `off`) and `retry_ids: 64`.
pub(super) fn parse_retry(
    policy: &Policy,
    fields: &Map<String, Value>,
) -> Result<Option<RetryRule>, ConfigError> {
    let window_ms = match fields.get("retry_window") {
        None | Some(Value::Null) => DEFAULT_RETRY_WINDOW_MS,
        Some(Value::String(off)) if off == "off" => {
            if fields.contains_key("retry_ids") {
                return Err(field_error(
                    policy,
                    "retry_ids",
                    "is set, but retry_window is off: request ids are not kept",
                ));
            }
            return Ok(None);
        }
        Some(Value::String(text)) => {
            let ms = parse_duration_ms(text)
                .map_err(|e| field_error(policy, "retry_window", e.to_string()))?;
            if !RETRY_WINDOW_RANGE_MS.contains(&ms) {
                return Err(field_error(
                    policy,
                    "retry_window",
                    format!(
                        "{text} is outside {}..={} (or `off`): shorter, a retry outruns it; longer, ids become storage",
                        format_duration_ms(*RETRY_WINDOW_RANGE_MS.start()),
                        format_duration_ms(*RETRY_WINDOW_RANGE_MS.end())
                    ),
                ));
            }
            ms
        }
        Some(other) => {
            return Err(field_error(
                policy,
                "retry_window",
                format!(
                    "must be a duration such as \"60s\", or `off`, got {}",
                    describe(other)
                ),
            ));
        }
    };
    let max_ids = match fields.get("retry_ids") {
        None | Some(Value::Null) => DEFAULT_RETRY_IDS,
        Some(value) => value
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| RETRY_IDS_RANGE.contains(n))
            .ok_or_else(|| {
                field_error(
                    policy,
                    "retry_ids",
                    format!(
                        "must be a whole number in {}..={}, got {}",
                        RETRY_IDS_RANGE.start(),
                        RETRY_IDS_RANGE.end(),
                        describe(value)
                    ),
                )
            })?,
    };
    Ok(Some(RetryRule { window_ms, max_ids }))
}
