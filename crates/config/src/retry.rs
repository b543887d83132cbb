//! A policy's request ids: how long a retry is recognised (`retry_window`),
//! how many ids an identity keeps (`retry_ids`), and whether an id the
//! client chose (`server.request_id_header`) counts (`client_request_ids`).
//! See docs/request-ids.md.

use serde_json::{Map, Value};
use tollgate_core::{ConfigError, Policy, describe, format_duration_ms, parse_duration_ms};
use tollgate_limiter::{
    DEFAULT_RETRY_IDS, DEFAULT_RETRY_WINDOW_MS, RETRY_IDS_RANGE, RETRY_WINDOW_RANGE_MS,
};

use crate::fields::field_error;

pub use tollgate_limiter::RetryRule;

/// `retry_window: 60s` (or `off`) and `retry_ids: 64`. YAML 1.1 reads a
/// bare `off` as the boolean false, so `off`, `"off"` and `false` all turn
/// ids off; `on` and `true` name no window and are refused.
pub(super) fn parse_retry(
    policy: &Policy,
    fields: &Map<String, Value>,
) -> Result<Option<RetryRule>, ConfigError> {
    let window_ms = match fields.get("retry_window") {
        None | Some(Value::Null) => DEFAULT_RETRY_WINDOW_MS,
        Some(Value::Bool(true)) => {
            return Err(field_error(
                policy,
                "retry_window",
                "on (true) names no window: give a duration such as \"60s\", or off",
            ));
        }
        Some(off @ (Value::String(_) | Value::Bool(false)))
            if off.as_str().is_none_or(|text| text == "off") =>
        {
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

/// `client_request_ids: true|false` (default false): whether an id read
/// from `server.request_id_header` — one the client behind the proxy
/// chooses — may replay this policy's admissions. Off by default, so naming
/// the header never turns a login into free retries; `/v1/check`'s
/// `request_id`, sent by the service itself, is not affected.
pub(super) fn parse_client_ids(
    policy: &Policy,
    fields: &Map<String, Value>,
    retry: Option<&RetryRule>,
) -> Result<bool, ConfigError> {
    match fields.get("client_request_ids") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(false),
        Some(Value::Bool(true)) if retry.is_none() => Err(field_error(
            policy,
            "client_request_ids",
            "is true, but retry_window is off: request ids are not kept",
        )),
        Some(Value::Bool(true)) => Ok(true),
        Some(other) => Err(field_error(
            policy,
            "client_request_ids",
            format!("must be true or false, got {}", describe(other)),
        )),
    }
}
