//! The rule model — what a matched descriptor does (`RuleKind`) and what
//! `current_limit` reports for it (`Rule`) — and how a descriptor's
//! `rate_limit` (envoyproxy/ratelimit's fixed window) and `tollgate`
//! settings (another algorithm, a bound tollgate policy, a failure mode)
//! become one. Failure modes are read by the config's own parser.

use std::fmt::Write as _;

use crate::limiter::OnStoreFailure;
use serde_json::{Map, Value};
use tollgate_core::{Limits, Policy, Window, describe, parse_policy};

use super::reading::{Reading, string_field};
use super::{RulesError, Unit};
use tollgate_config::parse_failure_mode;

/// What a matched descriptor does.
#[derive(Debug, Clone)]
pub enum RuleKind {
    /// `unlimited: true`: answered OK without the store.
    Unlimited,
    /// `requests_per_unit: 0`: every request with a positive cost is over.
    Blocked {
        /// The rule's `unit`.
        unit: Unit,
    },
    /// A limit decided by the store. `bound` names the tollgate policy it
    /// was bound to with `tollgate: {policy: NAME}`.
    Limited {
        /// The policy the store decides by.
        policy: Policy,
        /// The bound tollgate policy's name, if any.
        bound: Option<String>,
    },
}

/// One configured limit (a descriptor with `rate_limit` or `tollgate`).
#[derive(Debug, Clone)]
pub struct Rule {
    /// The domain of the file the rule is in.
    pub domain: String,
    /// envoyproxy/ratelimit's key for the rule, without the domain:
    /// `key_value.subkey` (the metrics label).
    pub key: String,
    /// What a match does.
    pub kind: RuleKind,
    /// `rate_limit.name`, the name `replaces` refers to.
    pub name: Option<String>,
    /// `rate_limit.replaces`: names of rules this one drops when both match.
    pub replaces: Vec<String>,
    /// `shadow_mode: true`: an over-limit request is counted but allowed.
    pub shadow_mode: bool,
    /// `quota_mode: true`, as envoyproxy/ratelimit defines it: one of a
    /// request's quota limits being over does not make it over; all of
    /// them being over does.
    pub quota_mode: bool,
    /// What `current_limit` reports: `requests_per_unit` per `unit`.
    pub requests_per_unit: u32,
    /// The unit `requests_per_unit` counts per.
    pub unit: Unit,
    /// The failure mode chosen by `tollgate: {on_store_failure: ...}`; `None`
    /// answers a store failure with an error status, as envoyproxy/ratelimit
    /// does, so Envoy's `failure_mode_deny` decides.
    pub on_store_failure: Option<OnStoreFailure>,
}

const RATE_LIMIT_KEYS: &[&str] = &["unit", "requests_per_unit", "unlimited", "name", "replaces"];
const EXTENSION_KEYS: &[&str] = &[
    "policy",
    "algorithm",
    "capacity",
    "refill",
    "limit",
    "window",
    "on_store_failure",
    "local_share_percent",
];

/// The rule a descriptor's `rate_limit` and `tollgate` settings make, if
/// it has either.
pub(super) fn read_rule(
    src: &Reading<'_>,
    fields: &Map<String, Value>,
    here: &str,
    full_key: &str,
    shadow_mode: bool,
) -> Result<Option<Rule>, RulesError> {
    let rate_limit = mapping(src, fields, here, "rate_limit")?;
    let extension = mapping(src, fields, here, "tollgate")?;
    if rate_limit.is_none() && extension.is_none() {
        return Ok(None);
    }
    let rl_path = format!("{here}.rate_limit");
    let empty = Map::new();
    let rl = read_rate_limit(src, rate_limit.unwrap_or(&empty), &rl_path)?;
    let unit = rl.unit;
    let mut rule = Rule {
        domain: src.domain.to_owned(),
        key: full_key.to_owned(),
        kind: RuleKind::Unlimited,
        name: rl.name,
        replaces: rl.replaces,
        shadow_mode,
        quota_mode: false,
        requests_per_unit: rl.requests_per_unit,
        unit: unit.unwrap_or(Unit::Second),
        on_store_failure: None,
    };
    if rl.unlimited {
        if unit.is_some() {
            return Err(src.err(
                &rl_path,
                "should not specify rate limit unit when unlimited",
            ));
        }
        if extension.is_some() {
            return Err(src.err(
                &format!("{here}.tollgate"),
                "an unlimited descriptor takes no tollgate settings",
            ));
        }
        return Ok(Some(rule));
    }
    if let Some(ext) = extension {
        extend(
            src,
            &mut rule,
            ext,
            rate_limit.is_some().then_some(unit).flatten(),
            here,
        )?;
        return Ok(Some(rule));
    }
    let unit = unit.ok_or_else(|| {
        src.err(
            &format!("{rl_path}.unit"),
            format!(
                "invalid rate limit unit {:?} (expected: second, minute, hour, day, week, month, year)",
                rl.unit_text
            ),
        )
    })?;
    rule.kind = match Window::new(u64::from(rule.requests_per_unit), unit.ms()) {
        Some(window) => RuleKind::Limited {
            policy: Policy::new(
                policy_name(src.domain, full_key),
                Limits::FixedWindow(window),
            ),
            bound: None,
        },
        None => RuleKind::Blocked { unit },
    };
    Ok(Some(rule))
}

/// The descriptor's `key` section (`rate_limit` or `tollgate`): a mapping,
/// or absent.
fn mapping<'f>(
    src: &Reading<'_>,
    fields: &'f Map<String, Value>,
    here: &str,
    key: &str,
) -> Result<Option<&'f Map<String, Value>>, RulesError> {
    match fields.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(other) => Err(src.err(
            &format!("{here}.{key}"),
            format!("must be a mapping, got {}", describe(other)),
        )),
    }
}

/// A descriptor's `rate_limit` as written, each field checked alone.
struct RateLimit {
    unlimited: bool,
    /// `unit` as written, for the message when it is no unit.
    unit_text: String,
    unit: Option<Unit>,
    requests_per_unit: u32,
    name: Option<String>,
    replaces: Vec<String>,
}

/// Reads `rate_limit` (at `rl_path`): its keys, then each field in turn.
fn read_rate_limit(
    src: &Reading<'_>,
    rl: &Map<String, Value>,
    rl_path: &str,
) -> Result<RateLimit, RulesError> {
    if let Some(unknown) = rl.keys().find(|k| !RATE_LIMIT_KEYS.contains(&k.as_str())) {
        return Err(src.err(
            &format!("{rl_path}.{unknown}"),
            format!("unknown key (expected: {})", RATE_LIMIT_KEYS.join(", ")),
        ));
    }
    let unlimited = match rl.get("unlimited") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(src.err(
                &format!("{rl_path}.unlimited"),
                format!("must be true or false, got {}", describe(other)),
            ));
        }
    };
    let unit_text = string_field(rl, "unit")
        .map_err(|r| src.err(&format!("{rl_path}.unit"), r))?
        .unwrap_or_default();
    let unit = Unit::parse(&unit_text);
    let requests_per_unit = match rl.get("requests_per_unit") {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                src.err(
                    &format!("{rl_path}.requests_per_unit"),
                    format!(
                        "must be a whole number from 0 to 4294967295, got {}",
                        describe(v)
                    ),
                )
            })?,
    };
    let name = string_field(rl, "name")
        .map_err(|r| src.err(&format!("{rl_path}.name"), r))?
        .filter(|n| !n.is_empty());
    let replaces = read_replaces(src, rl.get("replaces"), rl_path, name.as_deref())?;
    Ok(RateLimit {
        unlimited,
        unit_text,
        unit,
        requests_per_unit,
        name,
        replaces,
    })
}

/// `rate_limit.replaces`: the names of the rules this one replaces, none
/// of them empty or its own `name`.
fn read_replaces(
    src: &Reading<'_>,
    value: Option<&Value>,
    rl_path: &str,
    name: Option<&str>,
) -> Result<Vec<String>, RulesError> {
    let list = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(other) => {
            return Err(src.err(
                &format!("{rl_path}.replaces"),
                format!("must be a list, got {}", describe(other)),
            ));
        }
    };
    let mut names = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let item_path = format!("{rl_path}.replaces[{i}]");
        let entry = item.as_object().ok_or_else(|| {
            src.err(
                &item_path,
                format!("must be a mapping with `name`, got {}", describe(item)),
            )
        })?;
        if let Some(unknown) = entry.keys().find(|k| k.as_str() != "name") {
            return Err(src.err(
                &format!("{item_path}.{unknown}"),
                "unknown key (expected: name)",
            ));
        }
        let replaced = string_field(entry, "name")
            .map_err(|r| src.err(&format!("{item_path}.name"), r))?
            .filter(|n| !n.is_empty())
            .ok_or_else(|| src.err(&item_path, "should not have an empty replaces entry"))?;
        if name == Some(replaced.as_str()) {
            return Err(src.err(
                &item_path,
                "replaces should not contain name of same descriptor",
            ));
        }
        names.push(replaced);
    }
    Ok(names)
}

/// Applies the `tollgate` extension: another algorithm (its numbers
/// default to `rate_limit`'s), a bound tollgate policy, a failure mode.
fn extend(
    src: &Reading<'_>,
    rule: &mut Rule,
    ext: &Map<String, Value>,
    unit: Option<Unit>,
    here: &str,
) -> Result<(), RulesError> {
    let ext_path = format!("{here}.tollgate");
    if let Some(unknown) = ext.keys().find(|k| !EXTENSION_KEYS.contains(&k.as_str())) {
        return Err(src.err(
            &format!("{ext_path}.{unknown}"),
            format!("unknown key (expected: {})", EXTENSION_KEYS.join(", ")),
        ));
    }
    rule.on_store_failure = parse_failure_mode(ext)
        .map_err(|fault| src.err(&format!("{ext_path}.{}", fault.field), fault.reason))?;
    if let Some(bound) = ext.get("policy") {
        let name = bound.as_str().ok_or_else(|| {
            src.err(
                &format!("{ext_path}.policy"),
                format!("must be a policy name, got {}", describe(bound)),
            )
        })?;
        if let Some(other) = ext.keys().find(|k| !matches!(k.as_str(), "policy")) {
            return Err(src.err(
                &format!("{ext_path}.{other}"),
                "a bound policy brings its own algorithm and failure mode; give `policy` alone",
            ));
        }
        let policy = src.policies.get(name).ok_or_else(|| {
            src.err(
                &format!("{ext_path}.policy"),
                format!("no tollgate policy named {name:?} in `policies`"),
            )
        })?;
        if policy.limits().holds_permits() {
            return Err(src.err(
                &format!("{ext_path}.policy"),
                format!("policy {name:?} is a concurrency policy, which Envoy's rate limit service (RLS) cannot apply: RLS never says when a request ends, so its permit would be held until its lease ends; bind this rule to a rate policy"),
            ));
        }
        report_as(rule, policy.limits(), unit);
        rule.kind = RuleKind::Limited {
            policy: policy.clone(),
            bound: Some(name.to_owned()),
        };
        return Ok(());
    }
    if ext.get("algorithm").and_then(Value::as_str) == Some("concurrency") {
        return Err(src.err(
            &format!("{ext_path}.algorithm"),
            "concurrency cannot be applied by Envoy's rate limit service (RLS): RLS never says when a request ends, so a permit would be held until its lease ends; use a rate algorithm",
        ));
    }
    let mut fields = Map::new();
    let generated = policy_name(src.domain, &rule.key);
    fields.insert("name".into(), Value::String(generated.clone()));
    for (k, v) in ext {
        if !matches!(k.as_str(), "on_store_failure" | "local_share_percent") {
            fields.insert(k.clone(), v.clone());
        }
    }
    // Without an algorithm the limit stays envoyproxy/ratelimit's fixed
    // window (the extension then only adds a failure mode).
    fields
        .entry("algorithm")
        .or_insert_with(|| Value::String("fixed_window".into()));
    let algorithm = fields
        .get("algorithm")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if let Some(unit) = unit {
        let rpu = Value::from(rule.requests_per_unit);
        let per = Value::String(format!("{}ms", unit.ms()));
        if matches!(algorithm.as_str(), "token_bucket" | "gcra") {
            fields.entry("capacity").or_insert(rpu.clone());
            fields
                .entry("refill")
                .or_insert_with(|| serde_json::json!({"tokens": rpu, "per": per}));
        } else {
            fields.entry("limit").or_insert(rpu);
            fields.entry("window").or_insert(per);
        }
    }
    let policy = parse_policy(0, &fields, &[]).map_err(|e| {
        let text = e
            .to_string()
            .replace(&format!("policy \"{generated}\": "), "");
        src.err(&ext_path, text)
    })?;
    report_as(rule, policy.limits(), unit);
    rule.kind = RuleKind::Limited {
        policy,
        bound: None,
    };
    Ok(())
}

/// What `current_limit` says for a limit that is not a plain fixed window:
/// `rate_limit`'s own numbers when given, else the limit per the unit that
/// best states its span.
fn report_as(rule: &mut Rule, limits: &Limits, unit: Option<Unit>) {
    if unit.is_some() {
        return;
    }
    let (count, span) = limits.count_per_span();
    rule.unit = Unit::covering(span);
    rule.requests_per_unit = u32::try_from(count).unwrap_or(u32::MAX);
}

/// A policy name for a rule: `domain.key_value.subkey` when it is a valid
/// policy name (it shows in the RateLimit fields and store keys), else its
/// readable part and a hash that keeps it unique.
fn policy_name(domain: &str, key: &str) -> String {
    let full = format!("{domain}.{key}");
    let clean: String = full
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean == full && full.len() <= tollgate_core::MAX_POLICY_NAME {
        return full;
    }
    let hash = blake3::hash(full.as_bytes()).to_hex();
    let mut name: String = clean
        .chars()
        .take(tollgate_core::MAX_POLICY_NAME - 9)
        .collect();
    let _ = write!(name, "-{}", &hash[..8]);
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_are_valid_and_unique() {
        assert_eq!(policy_name("d", "k_v.s"), "d.k_v.s");
        let a = policy_name("d", "path_/api/*");
        let b = policy_name("d", "path_/api/?");
        assert_ne!(a, b);
        assert!(a.len() <= tollgate_core::MAX_POLICY_NAME);
        assert!(a.starts_with("d.path__api__-"));
    }
}
