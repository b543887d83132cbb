//! What a policy limits and per what, in words and JSON: its `match`, its
//! `identity`, and its limits as declared beside this region's share, so a
//! reviewer never mistakes one for the other.

use serde_json::Value;
use tollgate_core::limits_fields;

use crate::config::{IdentityPart, ServePolicy};
use tollgate_config::{FormatSuffix, Matcher, TrailingSlash};

/// `match:` in words, each condition as the config writes it; a policy with
/// none limits every request.
pub(super) fn match_text(m: &Matcher) -> String {
    let mut parts = Vec::new();
    if let Some(methods) = &m.methods {
        parts.push(format!("methods {}", methods.join(", ")));
    }
    if let Some(prefix) = &m.path_prefix {
        parts.push(format!("path_prefix {prefix}"));
    }
    if let Some(path) = &m.path {
        parts.push(format!("path {}", path.as_str()));
    }
    if let Some(host) = &m.host {
        parts.push(format!("host {host}"));
    }
    if parts.is_empty() {
        return "every request".to_owned();
    }
    if m.case_insensitive {
        parts.push("case_insensitive".to_owned());
    }
    if m.trailing_slash == TrailingSlash::Ignore {
        parts.push("trailing_slash ignore".to_owned());
    }
    if m.format_suffix == FormatSuffix::Ignore {
        parts.push("format_suffix ignore".to_owned());
    }
    parts.join("; ")
}

/// `identity:` in words: the parts whose values together name one budget.
pub(super) fn identity_text(parts: &[IdentityPart]) -> String {
    let named: Vec<String> = parts.iter().map(IdentityPart::describe).collect();
    format!("one budget per {}", named.join(" + "))
}

/// The declared limits at the top of `v`, and under `region_share` what
/// this instance enforces when a `split` scope gave its region a share.
pub(super) fn add_limits_json(v: &mut Value, serve: &ServePolicy) {
    if let (Value::Object(out), Value::Object(declared)) =
        (&mut *v, limits_fields(serve.declared.limits()))
    {
        out.extend(declared);
    }
    if serve.policy.limits() != serve.declared.limits() {
        v["region_share"] = limits_fields(serve.policy.limits());
    }
}
