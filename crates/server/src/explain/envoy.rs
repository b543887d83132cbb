//! The envoyproxy/ratelimit rules a config serves over RLS, in words and
//! JSON, for `explain` and `/v1/policies`.

use serde_json::{Value, json};

use crate::envoy_rules::{EnvoyRules, Rule, RuleKind};

/// An envoyproxy/ratelimit rule's limit in words: what `current_limit`
/// reports, and the algorithm or policy deciding it.
pub(super) fn limit_text(rule: &Rule) -> String {
    let shadow = match (rule.shadow_mode, rule.quota_mode) {
        (true, true) => ", shadow mode, quota mode",
        (true, false) => ", shadow mode",
        (false, true) => ", quota mode",
        (false, false) => "",
    };
    match &rule.kind {
        RuleKind::Unlimited => format!("unlimited{shadow}"),
        RuleKind::Blocked { unit } => format!("0 per {}: blocked{shadow}", unit.name()),
        RuleKind::Limited { policy, bound } => format!(
            "{} per {} ({}{}){shadow}",
            rule.requests_per_unit,
            rule.unit.name(),
            policy.algorithm(),
            bound
                .as_deref()
                .map(|b| format!(", policy {b}"))
                .unwrap_or_default()
        ),
    }
}

/// The envoyproxy/ratelimit rules a config serves (RLS), for
/// `/v1/policies` and `explain --json`: domain, key path and limit.
pub fn envoy_rules_json(rules: &EnvoyRules) -> Value {
    Value::Array(
        rules
            .rules
            .iter()
            .map(|rule| {
                let mut v = json!({
                    "domain": rule.domain,
                    "key": rule.key,
                    "limit": limit_text(rule),
                    "requests_per_unit": rule.requests_per_unit,
                    "unit": rule.unit.name(),
                });
                match &rule.kind {
                    RuleKind::Unlimited => v["unlimited"] = json!(true),
                    RuleKind::Blocked { .. } => {}
                    RuleKind::Limited { policy, bound } => {
                        v["algorithm"] = json!(policy.algorithm().as_str());
                        if let Some(bound) = bound {
                            v["policy"] = json!(bound);
                        }
                    }
                }
                if rule.shadow_mode {
                    v["shadow_mode"] = json!(true);
                }
                if rule.quota_mode {
                    v["quota_mode"] = json!(true);
                }
                v
            })
            .collect(),
    )
}
