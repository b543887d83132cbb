//! The policy config: YAML read into a generic tree, then validated field by
//! field so every error names the policy, the field and why.
//!
//! ```yaml
//! policies:
//!   - name: write-api
//!     algorithm: token_bucket        # or gcra
//!     capacity: 20
//!     refill: { tokens: 5, per: 1s }
//!   - name: search
//!     algorithm: sliding_window      # or fixed_window, sliding_log
//!     limit: 100
//!     window: 1m
//! ```

mod locate;
mod permits;
mod snippet;
mod unknown_field;

use std::collections::HashMap;

use serde_json::{Map, Value};
use thiserror::Error;

use crate::node_path;
pub use locate::{Locator, NodePath, Position, Step};
pub use permits::{MAX_LEASE_MS, MAX_PERMITS};
use unknown_field::{check_fields, check_known};
pub use unknown_field::{did_you_mean, unknown_field};

use crate::duration::{format_duration_ms, parse_duration_ms};
use crate::policy::{Algorithm, Limits, Policy, Rate, Window};

/// C·p and n·t must stay below 2^53 so the Lua scripts' doubles stay exact.
pub const EXACT_LIMIT: u128 = 1 << 53;
/// A bucket's time to refill from empty must stay below 2^52 ms, so the
/// Redis scripts' gcra arrival time (now + that, in ms) stays exact.
pub const MAX_REFILL_MS: u128 = 1 << 52;
/// The largest sliding_log limit. A log's length (its memory, and each
/// decision's work) is bounded by [`crate::LOG_MAX_ENTRIES`] whatever the
/// limit, so this no longer bounds memory. It stays because docs/design.md
/// §3 bounds L, and because a log past 64 entries counts in buckets of
/// W/64 anyway: for larger limits a sliding_window says nearly the same,
/// cheaper.
pub const MAX_LOG_LIMIT: u64 = 10_000;

/// Policy names appear in keys, headers and metrics: short and plain.
pub const MAX_POLICY_NAME: usize = 64;

/// Why a config was refused, naming where: the crate edge for bad config.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// The text does not parse as YAML; the parser's message says where.
    #[error("config is not valid YAML: {0}")]
    Yaml(String),
    /// The YAML parses but its shape is wrong (a missing, unknown or
    /// mistyped top-level field), before any one policy is to blame.
    #[error("config: {0}")]
    Document(String),
    /// One policy's field is wrong.
    #[error("policy {policy:?}: {field}: {reason}")]
    Field {
        /// The policy's name as written.
        policy: String,
        /// The field as written in the config, e.g. `refill.per`.
        field: String,
        /// What is wrong with it, in a user's words.
        reason: String,
    },
    /// `error`, which is about the node at `path`: [`ConfigError::locate`]
    /// shows where that is once the text and its file name are known.
    #[error("{error}")]
    At {
        /// Where the node is in the document.
        path: NodePath,
        /// What is wrong with it.
        error: Box<ConfigError>,
    },
    /// `error` with the place in the file it is about, drawn as a syntax
    /// error's is: ` --> tollgate.yaml:12:5` and the lines around it.
    #[error("{error}\n{snippet}")]
    Located {
        /// What is wrong.
        error: Box<ConfigError>,
        /// Where, with the lines around it.
        snippet: String,
    },
}

impl ConfigError {
    /// This error, about the node at `path` (the innermost path given wins:
    /// the code raising an error knows best what it is about).
    #[must_use]
    pub fn at(self, path: NodePath) -> Self {
        match self {
            ConfigError::At { .. } | ConfigError::Located { .. } | ConfigError::Yaml(_) => self,
            error => ConfigError::At {
                path,
                error: Box::new(error),
            },
        }
    }

    /// This error with where it is in `text`, the file `source`: a policy's
    /// field is found under the policy of that name, any other error at the
    /// path it was raised with. An error about no one node stays as it is.
    #[must_use]
    pub fn locate(self, text: &str, source: &str) -> Self {
        let (path, error) = match self {
            ConfigError::At { path, error } => (Some(path), *error),
            other => (None, other),
        };
        let locator = Locator::new(text);
        let path = path.or_else(|| match &error {
            ConfigError::Field { policy, field, .. } => locator
                .policy_index(policy)
                .map(|i| node_path!["policies", i].then_field(field)),
            _ => None,
        });
        let Some(at) = path.and_then(|path| locator.find(&path)) else {
            return error;
        };
        let label = match &error {
            ConfigError::Document(message) => message.clone(),
            other => other.to_string(),
        };
        ConfigError::Located {
            snippet: snippet::render(text, source, at, &label, locator.secrets()),
            error: Box::new(error),
        }
    }

    fn field(policy: &str, field: &str, reason: impl Into<String>) -> Self {
        ConfigError::Field {
            policy: policy.to_owned(),
            field: field.to_owned(),
            reason: reason.into(),
        }
    }
}

/// The lines of `text` (the file `source`) around the node at `path`, with
/// `label` under a caret at it, drawn as a config fault's are; `None` when
/// the text has no such node. For YAML files read beside the config.
pub fn snippet_at(text: &str, source: &str, path: &NodePath, label: &str) -> Option<String> {
    let locator = Locator::new(text);
    let at = locator.find(path)?;
    Some(snippet::render(text, source, at, label, locator.secrets()))
}

/// Validated policies, looked up by name.
#[derive(Debug, Clone, Default)]
pub struct PolicySet {
    policies: Vec<Policy>,
    by_name: HashMap<String, usize>,
}

impl PolicySet {
    /// Parses a document whose only top-level key is `policies`.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        let doc = parse_yaml(text)?;
        let top = doc
            .as_object()
            .ok_or_else(|| ConfigError::Document("expected a mapping with `policies`".into()))?;
        if let Some(key) = top.keys().find(|k| k.as_str() != "policies") {
            return Err(ConfigError::Document(format!(
                "{key}: {}",
                unknown_field(key, &["policies"])
            ))
            .at(node_path![key]));
        }
        let policies = top
            .get("policies")
            .ok_or_else(|| ConfigError::Document("missing `policies`".into()))?;
        let list = policies.as_array().ok_or_else(|| {
            ConfigError::Document("`policies` must be a list".into()).at(node_path!["policies"])
        })?;
        if list.is_empty() {
            return Err(ConfigError::Document(
                "`policies` is empty: a config needs at least one policy".into(),
            )
            .at(node_path!["policies"]));
        }
        let mut set = PolicySet::default();
        for (index, entry) in list.iter().enumerate() {
            let fields = entry.as_object().ok_or_else(|| {
                ConfigError::Document(format!("policies[{index}] must be a mapping"))
                    .at(node_path!["policies", index])
            })?;
            let policy = parse_policy(index, fields, &[])?;
            set.push(policy)
                .map_err(|e| e.at(node_path!["policies", index, "name"]))?;
        }
        Ok(set)
    }

    /// Adds a policy; names must be unique.
    pub fn push(&mut self, policy: Policy) -> Result<(), ConfigError> {
        if self.by_name.contains_key(policy.name()) {
            return Err(ConfigError::field(
                policy.name(),
                "name",
                "duplicate; policy names must be unique",
            ));
        }
        self.by_name
            .insert(policy.name().to_owned(), self.policies.len());
        self.policies.push(policy);
        Ok(())
    }

    /// The policy a request names, or `None` for an unknown name.
    pub fn get(&self, name: &str) -> Option<&Policy> {
        self.by_name.get(name).map(|&i| &self.policies[i])
    }

    /// Policies in config order, so output lists them as the user wrote them.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Policy> {
        self.policies.iter()
    }

    /// How many policies the set holds.
    pub fn len(&self) -> usize {
        self.policies.len()
    }

    /// True before the first [`push`](Self::push); a parsed config is never empty.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }
}

/// YAML text to a generic tree. Nothing in it can panic on any input.
/// Errors carry no source snippet: there is no file name to show it under
/// ([`parse_yaml_named`] has one).
pub fn parse_yaml(text: &str) -> Result<Value, ConfigError> {
    read_yaml(text, None)
}

/// [`parse_yaml`] for the text of file `source`: a syntax error shows the
/// offending lines under that name (`--> tollgate.yaml:4:4`).
pub fn parse_yaml_named(text: &str, source: &str) -> Result<Value, ConfigError> {
    read_yaml(text, Some(source))
}

fn read_yaml(text: &str, source: Option<&str>) -> Result<Value, ConfigError> {
    serde_saphyr::from_str::<Value>(text).map_err(|e| {
        ConfigError::Yaml(
            tab_fault(&e, text, source).unwrap_or_else(|| yaml_fault(&e, text, source)),
        )
    })
}

/// A tab where YAML allows none, placed at the tab itself. The parser
/// reports some such tabs where the token it was scanning began (a plain
/// scalar, which may run on over the next lines: `limit: 5` with a
/// tab-indented line below is reported at `5`), and others one column past
/// the tab. The fault is in serde-saphyr's scanner; it is corrected here,
/// where the text is at hand: the tab meant is the one just before that
/// place, or else the one indenting a line below it past blank and comment
/// lines, or else the next one on its line. Without one, the report stands.
fn tab_fault(e: &serde_saphyr::Error, text: &str, source: Option<&str>) -> Option<String> {
    let (serde_saphyr::Error::Message { msg, location }
    | serde_saphyr::Error::ExternalMessage { msg, location, .. }) = e.without_snippet()
    else {
        return None;
    };
    if !msg.contains("tab") {
        return None;
    }
    let reported = Position {
        line: usize::try_from(location.line()).ok()?,
        column: usize::try_from(location.column()).ok()?,
    };
    let at = tab_near(text, reported)?;
    Some(match source {
        Some(name) => format!(
            "error: line {} column {}: {msg}\n{}",
            at.line,
            at.column,
            snippet::render(text, name, at, msg, &snippet::line_secrets(text))
        ),
        None => format!("{msg} at line {}, column {}", at.line, at.column),
    })
}

/// The tab [`tab_fault`] means, if the text has one near `from`: only
/// blank and comment lines may stand between it and `from`.
fn tab_near(text: &str, from: Position) -> Option<Position> {
    let lines: Vec<Vec<char>> = text.lines().map(|l| l.chars().collect()).collect();
    let first = from.line.checked_sub(1)?;
    let line = lines.get(first)?;
    let reported = from.column.saturating_sub(1).min(line.len());
    let at = |line: usize, index: usize| Position {
        line: line + 1,
        column: index + 1,
    };
    if reported > 0 && line[reported - 1] == '\t' {
        return Some(at(first, reported - 1));
    }
    for (number, chars) in lines.iter().enumerate().skip(first + 1) {
        let indent = chars.iter().take_while(|c| matches!(c, ' ' | '\t'));
        if let Some(index) = indent.clone().position(|&c| c == '\t') {
            return Some(at(number, index));
        }
        match chars.get(indent.count()) {
            None | Some('#' | '\r') => {}
            Some(_) => break,
        }
    }
    let index = line.iter().skip(reported).position(|&c| c == '\t')?;
    Some(at(first, reported + index))
}

/// serde-saphyr's error in our words where its own would mislead: a key
/// given twice is an error (which of two `capacity` lines was meant?), and
/// its message advises a parser option that a config author cannot set.
fn yaml_fault(e: &serde_saphyr::Error, text: &str, source: Option<&str>) -> String {
    if let serde_saphyr::Error::DuplicateMappingKey { key, location } = e.without_snippet() {
        let at = format!("line {} column {}", location.line(), location.column());
        return match key {
            Some(key) => format!("duplicate key {key:?} at {at}"),
            None => format!("duplicate key at {at}"),
        };
    }
    // Drawn here rather than by serde-saphyr, whose snippet would show a
    // password on the lines around the fault.
    if let (
        Some(name),
        serde_saphyr::Error::Message { msg, location }
        | serde_saphyr::Error::ExternalMessage { msg, location, .. },
    ) = (source, e.without_snippet())
        && let (Ok(line), Ok(column)) = (
            usize::try_from(location.line()),
            usize::try_from(location.column()),
        )
        && line > 0
    {
        let at = Position { line, column };
        let secrets = snippet::line_secrets(text);
        return format!(
            "error: line {line} column {column}: {msg}\n{}",
            snippet::render(text, name, at, msg, &secrets)
        );
    }
    let options = match source {
        Some(name) => serde_saphyr::render_options! { source_name: Some(name) },
        None => serde_saphyr::render_options! { snippets: serde_saphyr::SnippetMode::Off },
    };
    e.render_with_options(options)
}

/// Validates one policy mapping. `extra_fields` names fields a caller (the
/// server's config) handles itself; any other unknown field is an error.
pub fn parse_policy(
    index: usize,
    fields: &Map<String, Value>,
    extra_fields: &[&str],
) -> Result<Policy, ConfigError> {
    let name = match fields.get("name") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(ConfigError::Document(format!(
                "policies[{index}]: name must be a string, got {}",
                describe(other)
            ))
            .at(node_path!["policies", index, "name"]));
        }
        None => {
            return Err(
                ConfigError::Document(format!("policies[{index}]: missing `name`"))
                    .at(node_path!["policies", index]),
            );
        }
    };
    validate_name(&name).map_err(|reason| ConfigError::field(&name, "name", reason))?;
    let algorithm_name = match fields.get("algorithm") {
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(ConfigError::field(
                &name,
                "algorithm",
                format!("must be a string, got {}", describe(other)),
            ));
        }
        None => {
            // A misspelt `algorithm:` is the likelier fault than a missing
            // one: name the stranger, at its own line.
            let every = ["name", "algorithm", "capacity", "refill", "limit", "window"];
            check_known(&name, &every, extra_fields, fields, "")?;
            return Err(ConfigError::field(&name, "algorithm", "missing"));
        }
    };
    let algorithm = Algorithm::from_name(algorithm_name).ok_or_else(|| {
        ConfigError::field(
            &name,
            "algorithm",
            format!(
                "unknown algorithm {algorithm_name:?} (expected one of: token_bucket, gcra, fixed_window, sliding_window, sliding_log, concurrency)"
            ),
        )
    })?;
    let own: &[&str] = match algorithm {
        Algorithm::TokenBucket | Algorithm::Gcra => &["name", "algorithm", "capacity", "refill"],
        Algorithm::Concurrency => &["name", "algorithm", "limit", "lease"],
        _ => &["name", "algorithm", "limit", "window"],
    };
    check_fields(&name, algorithm, own, extra_fields, fields)?;
    let limits = match algorithm {
        Algorithm::TokenBucket | Algorithm::Gcra => {
            let rate = parse_rate(&name, fields)?;
            if algorithm == Algorithm::Gcra {
                Limits::Gcra(rate)
            } else {
                Limits::TokenBucket(rate)
            }
        }
        Algorithm::Concurrency => {
            let limit = positive_integer(&name, "limit", fields.get("limit"))?;
            let lease_ms = duration(&name, "lease", fields.get("lease"))?;
            permits::permits(limit, lease_ms)
                .map_err(|(field, why)| ConfigError::field(&name, field, why))?
        }
        Algorithm::FixedWindow | Algorithm::SlidingWindow | Algorithm::SlidingLog => {
            let limit = positive_integer(&name, "limit", fields.get("limit"))?;
            let window_ms = duration(&name, "window", fields.get("window"))?;
            // Both parts are positive, so the window exists.
            let window = Window::new(limit, window_ms)
                .ok_or_else(|| ConfigError::field(&name, "limit", "must be positive"))?;
            if u128::from(limit) >= EXACT_LIMIT {
                return Err(ConfigError::field(
                    &name,
                    "limit",
                    format!("{limit} must stay below 2^53 for exact arithmetic"),
                ));
            }
            match algorithm {
                Algorithm::FixedWindow => Limits::FixedWindow(window),
                Algorithm::SlidingWindow => {
                    if u128::from(limit) * u128::from(window_ms) >= EXACT_LIMIT {
                        return Err(ConfigError::field(
                            &name,
                            "limit",
                            format!(
                                "limit × window ({limit} × {window_ms} ms) must stay below 2^53 for exact arithmetic"
                            ),
                        ));
                    }
                    Limits::SlidingWindow(window)
                }
                _ => {
                    if limit > MAX_LOG_LIMIT {
                        return Err(ConfigError::field(
                            &name,
                            "limit",
                            format!(
                                "{limit} is too large for sliding_log, at most {MAX_LOG_LIMIT}; use sliding_window for larger limits"
                            ),
                        ));
                    }
                    Limits::SlidingLog(window)
                }
            }
        }
    };
    Ok(Policy::new(name, limits))
}

fn parse_rate(name: &str, fields: &Map<String, Value>) -> Result<Rate, ConfigError> {
    let capacity = positive_integer(name, "capacity", fields.get("capacity"))?;
    let refill = match fields.get("refill") {
        Some(Value::Object(m)) => m,
        Some(other) => {
            return Err(ConfigError::field(
                name,
                "refill",
                format!("must be a mapping {{tokens, per}}, got {}", describe(other)),
            ));
        }
        None => return Err(ConfigError::field(name, "refill", "missing")),
    };
    if let Some(key) = refill
        .keys()
        .find(|k| !matches!(k.as_str(), "tokens" | "per"))
    {
        return Err(ConfigError::field(
            name,
            &format!("refill.{key}"),
            unknown_field(key, &["tokens", "per"]),
        ));
    }
    let tokens = positive_integer(name, "refill.tokens", refill.get("tokens"))?;
    let per_ms = duration(name, "refill.per", refill.get("per"))?;
    let rate = Rate::new(capacity, tokens, per_ms)
        .ok_or_else(|| ConfigError::field(name, "capacity", "must be positive"))?;
    let units = rate.capacity_units();
    if units >= EXACT_LIMIT {
        return Err(ConfigError::field(
            name,
            "capacity",
            format!(
                "capacity × scale ({capacity} × {}) = {units} must stay below 2^53 for exact arithmetic; use a coarser refill (tokens and per with a larger common divisor) or a smaller capacity",
                rate.units_per_token()
            ),
        ));
    }
    // The Redis scripts keep gcra's arrival time as whole ms plus a
    // remainder; the ms must stay exact too, now plus a full refill.
    let refill_ms = units.div_ceil(u128::from(rate.units_per_ms()));
    if refill_ms >= MAX_REFILL_MS {
        return Err(ConfigError::field(
            name,
            "refill",
            format!(
                "refilling {capacity} tokens at {tokens} per {} ms takes {refill_ms} ms; it must stay below 2^52 ms for exact arithmetic",
                rate.per_ms()
            ),
        ));
    }
    Ok(rate)
}

fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > MAX_POLICY_NAME {
        return Err(format!("longer than {MAX_POLICY_NAME} bytes"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "{c:?} is not allowed; use letters, digits, '-', '_' and '.'"
        ));
    }
    Ok(())
}

fn positive_integer(policy: &str, field: &str, value: Option<&Value>) -> Result<u64, ConfigError> {
    let value = value.ok_or_else(|| ConfigError::field(policy, field, "missing"))?;
    match value {
        Value::Number(n) => {
            if let Some(v) = n.as_u64() {
                if v == 0 {
                    Err(ConfigError::field(policy, field, "must be positive, got 0"))
                } else {
                    Ok(v)
                }
            } else if n.is_i64() {
                Err(ConfigError::field(
                    policy,
                    field,
                    format!("must be positive, got {n}"),
                ))
            } else {
                Err(ConfigError::field(
                    policy,
                    field,
                    format!("must be a whole number, got {n}"),
                ))
            }
        }
        other => Err(ConfigError::field(
            policy,
            field,
            format!("must be a positive integer, got {}", describe(other)),
        )),
    }
}

fn duration(policy: &str, field: &str, value: Option<&Value>) -> Result<u64, ConfigError> {
    match value {
        Some(Value::String(s)) => {
            parse_duration_ms(s).map_err(|e| ConfigError::field(policy, field, e.to_string()))
        }
        Some(other) => Err(ConfigError::field(
            policy,
            field,
            format!(
                "must be a duration such as \"1s\" or \"500ms\", got {}",
                describe(other)
            ),
        )),
        None => Err(ConfigError::field(policy, field, "missing")),
    }
}

/// `limits` as a config writes them, the fields [`parse_policy`] reads
/// back, beside `limit` (C or L): for `explain --json` and `/v1/policies`.
pub fn limits_fields(limits: &Limits) -> Value {
    match limits {
        Limits::TokenBucket(r) | Limits::Gcra(r) => serde_json::json!({
            "limit": limits.limit(),
            "capacity": r.capacity(),
            "refill": {"tokens": r.tokens(), "per": format_duration_ms(r.per_ms())},
        }),
        Limits::FixedWindow(w) | Limits::SlidingWindow(w) | Limits::SlidingLog(w) => {
            serde_json::json!({
                "limit": limits.limit(),
                "window": format_duration_ms(w.window_ms()),
            })
        }
        Limits::Concurrency(p) => serde_json::json!({
            "limit": limits.limit(),
            "lease": format_duration_ms(p.lease_ms()),
        }),
    }
}

/// A short description of a YAML value for error messages.
pub fn describe(value: &Value) -> String {
    match value {
        Value::Null => "nothing".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "a mapping".into(),
    }
}

#[cfg(test)]
mod range_tests {
    use super::*;

    fn one_policy(yaml: &str) -> Result<PolicySet, ConfigError> {
        PolicySet::from_yaml(&format!("policies:\n  - {yaml}"))
    }

    #[test]
    fn a_refill_longer_than_2_pow_52_ms_is_refused_with_the_reason() {
        // 2^22 tokens at 1 per 2^30 ms: 2^52 ms to refill, C·p = 2^52 < 2^53.
        let err = one_policy(
            "{name: slow, algorithm: gcra, capacity: 4194304, refill: {tokens: 1, per: 1073741824ms}}",
        )
        .expect_err("refused");
        assert!(err.to_string().contains("below 2^52 ms"), "{err}");
        one_policy("{name: ok, algorithm: gcra, capacity: 3, refill: {tokens: 1, per: 1h}}")
            .expect("valid");
    }

    #[test]
    fn a_fixed_window_limit_beyond_2_pow_53_is_refused() {
        let err =
            one_policy("{name: big, algorithm: fixed_window, limit: 9007199254740992, window: 1s}")
                .expect_err("refused");
        assert!(err.to_string().contains("below 2^53"), "{err}");
    }
}
