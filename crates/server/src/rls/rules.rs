//! envoyproxy/ratelimit's YAML config, read unchanged, and its descriptor
//! matching: per level, an exact `key`+`value` first, then the level's
//! wildcard values in file order, then the bare `key`; a limit applies only
//! when it sits at the request descriptor's last entry.
//!
//! A limit is a fixed window of `requests_per_unit` per `unit` (what users of
//! envoyproxy/ratelimit know); the `tollgate` key on a descriptor picks
//! another algorithm or binds one of tollgate's own policies.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use thiserror::Error;
use tollgate_core::{
    ConfigError, Limits, Policy, PolicySet, Window, describe, parse_policy, parse_yaml_named,
};
use tollgate_store::OnStoreFailure;

/// The most descriptor files one config may name (directories expanded).
pub const MAX_FILES: usize = 1_000;
/// Nesting deeper than this is refused (Envoy sends a few entries at most).
pub const MAX_DEPTH: usize = 32;

/// A fault in an envoyproxy/ratelimit file, with the file and the path in it.
#[derive(Debug, Error)]
pub enum RulesError {
    #[error("{file}: {reason}")]
    File { file: String, reason: String },
    #[error("{file}: {path}: {reason}")]
    At {
        file: String,
        path: String,
        reason: String,
    },
}

/// envoyproxy/ratelimit's units, with their length as it counts them
/// (a month is 30 days, a year 365). Windows align to the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    pub fn parse(text: &str) -> Option<Unit> {
        Self::ALL
            .into_iter()
            .find(|u| u.name().eq_ignore_ascii_case(text))
    }

    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    pub fn ms(self) -> u64 {
        const S: u64 = 1_000;
        match self {
            Unit::Second => S,
            Unit::Minute => 60 * S,
            Unit::Hour => 3_600 * S,
            Unit::Day => 86_400 * S,
            Unit::Week => 7 * 86_400 * S,
            Unit::Month => 30 * 86_400 * S,
            Unit::Year => 365 * 86_400 * S,
        }
    }

    /// The protocol's enum value (`RateLimitResponse.RateLimit.Unit`).
    pub fn proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    pub fn from_proto(value: i32) -> Option<Unit> {
        Self::ALL.into_iter().find(|u| u.proto() == value)
    }

    /// The unit a span is best stated in: exact when one matches, else the
    /// smallest that covers it.
    pub fn covering(ms: u64) -> Unit {
        Self::ALL
            .into_iter()
            .find(|u| u.ms() == ms)
            .or_else(|| Self::ALL.into_iter().find(|u| u.ms() >= ms))
            .unwrap_or(Unit::Year)
    }
}

/// What a matched descriptor does.
#[derive(Debug, Clone)]
pub enum RuleKind {
    /// `unlimited: true`: answered OK without the store.
    Unlimited,
    /// `requests_per_unit: 0`: every request with a positive cost is over.
    Blocked { unit: Unit },
    /// A limit decided by the store. `bound` names the tollgate policy it
    /// was bound to with `tollgate: {policy: NAME}`.
    Limited {
        policy: Policy,
        bound: Option<String>,
    },
}

/// One configured limit (a descriptor with `rate_limit` or `tollgate`).
#[derive(Debug, Clone)]
pub struct Rule {
    pub domain: String,
    /// envoyproxy/ratelimit's key for the rule, without the domain:
    /// `key_value.subkey` (the metrics label).
    pub key: String,
    pub kind: RuleKind,
    /// `rate_limit.name`, the name `replaces` refers to.
    pub name: Option<String>,
    pub replaces: Vec<String>,
    pub shadow_mode: bool,
    /// What `current_limit` reports: `requests_per_unit` per `unit`.
    pub requests_per_unit: u32,
    pub unit: Unit,
    /// The failure mode chosen by `tollgate: {on_store_failure: ...}`; `None`
    /// answers a store failure with an error status, as envoyproxy/ratelimit
    /// does, so Envoy's `failure_mode_deny` decides.
    pub on_store_failure: Option<OnStoreFailure>,
}

#[derive(Debug, Default)]
struct Node {
    /// Children by key, then how their value matches.
    children: HashMap<String, KeyChildren>,
    rule: Option<usize>,
    /// For a wildcard node with `share_threshold: true`: every matching value
    /// shares one bucket, keyed by this pattern.
    shared_pattern: Option<String>,
}

#[derive(Debug, Default)]
struct KeyChildren {
    exact: HashMap<String, usize>,
    /// Values containing `*`, in file order, split on `*`.
    wildcards: Vec<(Vec<String>, usize)>,
    any: Option<usize>,
}

/// Every loaded domain's descriptor tree. Immutable; replaced on reload.
#[derive(Debug, Default)]
pub struct EnvoyRules {
    nodes: Vec<Node>,
    domains: HashMap<String, usize>,
    pub rules: Vec<Rule>,
    /// The files read, in order (directories expanded).
    pub files: Vec<PathBuf>,
    /// A hash of every file's content, to tell when a reload changes them.
    pub content_hash: String,
}

/// A descriptor's match: the rule, and the values its identity is made of
/// (a `share_threshold` wildcard's pattern in place of the request's value).
#[derive(Debug)]
pub struct Matched<'a> {
    pub rule: usize,
    pub shared: Vec<Option<&'a str>>,
}

impl EnvoyRules {
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(String::as_str)
    }

    /// The rule for one descriptor's entries, most specific first, as
    /// envoyproxy/ratelimit matches it.
    pub fn find<'a>(&'a self, domain: &str, entries: &[(&str, &str)]) -> Option<Matched<'a>> {
        let mut node = *self.domains.get(domain)?;
        let mut shared = Vec::with_capacity(entries.len());
        for (i, (key, value)) in entries.iter().enumerate() {
            let children = self.nodes[node].children.get(*key)?;
            let next = children
                .exact
                .get(*value)
                .copied()
                .or_else(|| {
                    children
                        .wildcards
                        .iter()
                        .find(|(parts, _)| wildcard_match(parts, value))
                        .map(|(_, n)| *n)
                })
                .or(children.any)?;
            shared.push(self.nodes[next].shared_pattern.as_deref());
            if i + 1 == entries.len() {
                return self.nodes[next].rule.map(|rule| Matched { rule, shared });
            }
            if self.nodes[next].children.is_empty() {
                return None;
            }
            node = next;
        }
        None
    }

    /// Loads every file named (a directory contributes its `*.yaml` and
    /// `*.yml` files, sorted, dotfiles skipped). `policies` are tollgate's own,
    /// for `tollgate: {policy: NAME}`.
    pub fn load(paths: &[PathBuf], policies: &PolicySet) -> Result<Self, RulesError> {
        let files = expand(paths)?;
        let mut rules = EnvoyRules::default();
        let mut hasher = blake3::Hasher::new();
        for file in &files {
            let shown = file.display().to_string();
            let text = std::fs::read_to_string(file).map_err(|e| RulesError::File {
                file: shown.clone(),
                reason: format!("cannot read: {e}"),
            })?;
            hasher.update(shown.as_bytes());
            hasher.update(&[0]);
            hasher.update(text.as_bytes());
            hasher.update(&[0]);
            rules.load_text(&shown, &text, policies)?;
        }
        rules.files = files;
        rules.content_hash = hasher.finalize().to_hex()[..16].to_owned();
        Ok(rules)
    }

    /// Loads one file's text (`file` names it in errors).
    pub fn load_text(
        &mut self,
        file: &str,
        text: &str,
        policies: &PolicySet,
    ) -> Result<(), RulesError> {
        let at = |path: &str, reason: String| RulesError::At {
            file: file.to_owned(),
            path: path.to_owned(),
            reason,
        };
        let doc = parse_yaml_named(text, file).map_err(|e| RulesError::File {
            file: file.to_owned(),
            reason: match e {
                ConfigError::Yaml(why) => format!("not valid YAML: {why}"),
                other => other.to_string(),
            },
        })?;
        let top = doc.as_object().ok_or_else(|| RulesError::File {
            file: file.to_owned(),
            reason: format!(
                "expected a mapping with `domain` and `descriptors`, got {}",
                describe(&doc)
            ),
        })?;
        for key in top.keys() {
            if !matches!(key.as_str(), "domain" | "descriptors") {
                return Err(at(
                    key,
                    "unknown key (expected: domain, descriptors)".to_owned(),
                ));
            }
        }
        let domain = match top.get("domain") {
            Some(Value::String(d)) if !d.is_empty() => d.clone(),
            Some(Value::String(_)) | None | Some(Value::Null) => {
                return Err(RulesError::File {
                    file: file.to_owned(),
                    reason: "config file cannot have an empty domain".to_owned(),
                });
            }
            Some(other) => {
                return Err(at(
                    "domain",
                    format!("must be a string, got {}", describe(other)),
                ));
            }
        };
        if self.domains.contains_key(&domain) {
            return Err(RulesError::File {
                file: file.to_owned(),
                reason: format!("duplicate domain {domain:?} (another file defines it)"),
            });
        }
        let root = self.new_node();
        self.domains.insert(domain.clone(), root);
        let mut loader = Loader {
            file,
            domain: &domain,
            policies,
            rules: self,
        };
        loader.level(root, top.get("descriptors"), "descriptors", "", 0)?;
        Ok(())
    }

    fn new_node(&mut self) -> usize {
        self.nodes.push(Node::default());
        self.nodes.len() - 1
    }
}

struct Loader<'a> {
    file: &'a str,
    domain: &'a str,
    policies: &'a PolicySet,
    rules: &'a mut EnvoyRules,
}

const DESCRIPTOR_KEYS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "tollgate",
];
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

impl Loader<'_> {
    fn err(&self, path: &str, reason: impl Into<String>) -> RulesError {
        RulesError::At {
            file: self.file.to_owned(),
            path: path.to_owned(),
            reason: reason.into(),
        }
    }

    /// Loads one descriptor list under `node`. `path` is where it sits in
    /// the file, `parent_key` the envoyproxy-style key of its parent.
    fn level(
        &mut self,
        node: usize,
        list: Option<&Value>,
        path: &str,
        parent_key: &str,
        depth: usize,
    ) -> Result<(), RulesError> {
        let list = match list {
            None | Some(Value::Null) => return Ok(()),
            Some(Value::Array(list)) => list,
            Some(other) => {
                return Err(self.err(path, format!("must be a list, got {}", describe(other))));
            }
        };
        if depth >= MAX_DEPTH {
            return Err(self.err(path, format!("nested deeper than {MAX_DEPTH} levels")));
        }
        let mut seen = HashSet::new();
        for (index, item) in list.iter().enumerate() {
            let here = format!("{path}[{index}]");
            let fields = item.as_object().ok_or_else(|| {
                self.err(&here, format!("must be a mapping, got {}", describe(item)))
            })?;
            if let Some(unknown) = fields
                .keys()
                .find(|k| !DESCRIPTOR_KEYS.contains(&k.as_str()))
            {
                return Err(self.err(
                    &format!("{here}.{unknown}"),
                    format!("unknown key (expected: {})", DESCRIPTOR_KEYS.join(", ")),
                ));
            }
            let key = string_field(fields, "key")
                .map_err(|r| self.err(&format!("{here}.key"), r))?
                .filter(|k| !k.is_empty())
                .ok_or_else(|| self.err(&here, "descriptor has an empty key"))?;
            let value = string_field(fields, "value")
                .map_err(|r| self.err(&format!("{here}.value"), r))?
                .unwrap_or_default();
            let own_key = if value.is_empty() {
                key.clone()
            } else {
                format!("{key}_{value}")
            };
            let full_key = if parent_key.is_empty() {
                own_key.clone()
            } else {
                format!("{parent_key}.{own_key}")
            };
            if !seen.insert((key.clone(), value.clone())) {
                return Err(self.err(
                    &here,
                    format!("duplicate descriptor composite key {:?}", full_key),
                ));
            }
            let flag = |name: &str| -> Result<bool, RulesError> {
                match fields.get(name) {
                    None | Some(Value::Null) => Ok(false),
                    Some(Value::Bool(b)) => Ok(*b),
                    Some(other) => Err(self.err(
                        &format!("{here}.{name}"),
                        format!("must be true or false, got {}", describe(other)),
                    )),
                }
            };
            let shadow_mode = flag("shadow_mode")?;
            let share_threshold = flag("share_threshold")?;
            if flag("quota_mode")? {
                return Err(self.err(
                    &format!("{here}.quota_mode"),
                    "quota_mode is not supported by tollgate",
                ));
            }
            // Accepted as in envoyproxy/ratelimit; tollgate's metric labels
            // come from the config only, never from request values.
            flag("detailed_metric")?;
            flag("value_to_metric")?;
            if share_threshold && !value.contains('*') {
                return Err(self.err(
                    &format!("{here}.share_threshold"),
                    format!(
                        "share_threshold can only be used with wildcard values (containing '*'), but found key {own_key:?}"
                    ),
                ));
            }
            let child = self.rules.new_node();
            if share_threshold {
                self.rules.nodes[child].shared_pattern = Some(value.clone());
            }
            let rule = self.rule(fields, &here, &full_key, shadow_mode)?;
            if let Some(rule) = rule {
                self.rules.rules.push(rule);
                self.rules.nodes[child].rule = Some(self.rules.rules.len() - 1);
            }
            self.level(
                child,
                fields.get("descriptors"),
                &format!("{here}.descriptors"),
                &full_key,
                depth + 1,
            )?;
            let slot = self.rules.nodes[node].children.entry(key).or_default();
            if value.is_empty() {
                slot.any = Some(child);
            } else if value.contains('*') {
                slot.wildcards
                    .push((value.split('*').map(str::to_owned).collect(), child));
            } else {
                slot.exact.insert(value, child);
            }
        }
        Ok(())
    }

    fn rule(
        &self,
        fields: &Map<String, Value>,
        here: &str,
        full_key: &str,
        shadow_mode: bool,
    ) -> Result<Option<Rule>, RulesError> {
        let rate_limit = match fields.get("rate_limit") {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(m),
            Some(other) => {
                return Err(self.err(
                    &format!("{here}.rate_limit"),
                    format!("must be a mapping, got {}", describe(other)),
                ));
            }
        };
        let extension = match fields.get("tollgate") {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(m),
            Some(other) => {
                return Err(self.err(
                    &format!("{here}.tollgate"),
                    format!("must be a mapping, got {}", describe(other)),
                ));
            }
        };
        if rate_limit.is_none() && extension.is_none() {
            return Ok(None);
        }
        let rl_path = format!("{here}.rate_limit");
        let empty = Map::new();
        let rl = rate_limit.unwrap_or(&empty);
        if let Some(unknown) = rl.keys().find(|k| !RATE_LIMIT_KEYS.contains(&k.as_str())) {
            return Err(self.err(
                &format!("{rl_path}.{unknown}"),
                format!("unknown key (expected: {})", RATE_LIMIT_KEYS.join(", ")),
            ));
        }
        let unlimited = match rl.get("unlimited") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(self.err(
                    &format!("{rl_path}.unlimited"),
                    format!("must be true or false, got {}", describe(other)),
                ));
            }
        };
        let unit_text = string_field(rl, "unit")
            .map_err(|r| self.err(&format!("{rl_path}.unit"), r))?
            .unwrap_or_default();
        let unit = Unit::parse(&unit_text);
        let requests_per_unit = match rl.get("requests_per_unit") {
            None | Some(Value::Null) => 0,
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    self.err(
                        &format!("{rl_path}.requests_per_unit"),
                        format!(
                            "must be a whole number from 0 to 4294967295, got {}",
                            describe(v)
                        ),
                    )
                })?,
        };
        let name = string_field(rl, "name")
            .map_err(|r| self.err(&format!("{rl_path}.name"), r))?
            .filter(|n| !n.is_empty());
        let replaces = match rl.get("replaces") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(list)) => {
                let mut names = Vec::with_capacity(list.len());
                for (i, item) in list.iter().enumerate() {
                    let item_path = format!("{rl_path}.replaces[{i}]");
                    let entry = item.as_object().ok_or_else(|| {
                        self.err(
                            &item_path,
                            format!("must be a mapping with `name`, got {}", describe(item)),
                        )
                    })?;
                    if let Some(unknown) = entry.keys().find(|k| k.as_str() != "name") {
                        return Err(self.err(
                            &format!("{item_path}.{unknown}"),
                            "unknown key (expected: name)",
                        ));
                    }
                    let replaced = string_field(entry, "name")
                        .map_err(|r| self.err(&format!("{item_path}.name"), r))?
                        .filter(|n| !n.is_empty())
                        .ok_or_else(|| {
                            self.err(&item_path, "should not have an empty replaces entry")
                        })?;
                    if name.as_deref() == Some(replaced.as_str()) {
                        return Err(self.err(
                            &item_path,
                            "replaces should not contain name of same descriptor",
                        ));
                    }
                    names.push(replaced);
                }
                names
            }
            Some(other) => {
                return Err(self.err(
                    &format!("{rl_path}.replaces"),
                    format!("must be a list, got {}", describe(other)),
                ));
            }
        };
        let mut rule = Rule {
            domain: self.domain.to_owned(),
            key: full_key.to_owned(),
            kind: RuleKind::Unlimited,
            name,
            replaces,
            shadow_mode,
            requests_per_unit,
            unit: unit.unwrap_or(Unit::Second),
            on_store_failure: None,
        };
        if unlimited {
            if unit.is_some() {
                return Err(self.err(
                    &rl_path,
                    "should not specify rate limit unit when unlimited",
                ));
            }
            if extension.is_some() {
                return Err(self.err(
                    &format!("{here}.tollgate"),
                    "an unlimited descriptor takes no tollgate settings",
                ));
            }
            return Ok(Some(rule));
        }
        if let Some(ext) = extension {
            self.extend(
                &mut rule,
                ext,
                rate_limit.is_some().then_some(unit).flatten(),
                here,
            )?;
            return Ok(Some(rule));
        }
        let unit = unit.ok_or_else(|| {
            self.err(
                &format!("{rl_path}.unit"),
                format!(
                    "invalid rate limit unit {unit_text:?} (expected: second, minute, hour, day, week, month, year)"
                ),
            )
        })?;
        rule.kind = match Window::new(u64::from(requests_per_unit), unit.ms()) {
            Some(window) => RuleKind::Limited {
                policy: Policy::new(
                    policy_name(self.domain, full_key),
                    Limits::FixedWindow(window),
                ),
                bound: None,
            },
            None => RuleKind::Blocked { unit },
        };
        Ok(Some(rule))
    }

    /// Applies the `tollgate` extension: another algorithm (its numbers
    /// default to `rate_limit`'s), a bound tollgate policy, a failure mode.
    fn extend(
        &self,
        rule: &mut Rule,
        ext: &Map<String, Value>,
        unit: Option<Unit>,
        here: &str,
    ) -> Result<(), RulesError> {
        let ext_path = format!("{here}.tollgate");
        if let Some(unknown) = ext.keys().find(|k| !EXTENSION_KEYS.contains(&k.as_str())) {
            return Err(self.err(
                &format!("{ext_path}.{unknown}"),
                format!("unknown key (expected: {})", EXTENSION_KEYS.join(", ")),
            ));
        }
        rule.on_store_failure = parse_failure_mode(ext)
            .map_err(|(field, reason)| self.err(&format!("{ext_path}.{field}"), reason))?;
        if let Some(bound) = ext.get("policy") {
            let name = bound.as_str().ok_or_else(|| {
                self.err(
                    &format!("{ext_path}.policy"),
                    format!("must be a policy name, got {}", describe(bound)),
                )
            })?;
            if let Some(other) = ext.keys().find(|k| !matches!(k.as_str(), "policy")) {
                return Err(self.err(
                    &format!("{ext_path}.{other}"),
                    "a bound policy brings its own algorithm and failure mode; give `policy` alone",
                ));
            }
            let policy = self.policies.get(name).ok_or_else(|| {
                self.err(
                    &format!("{ext_path}.policy"),
                    format!("no tollgate policy named {name:?} in `policies`"),
                )
            })?;
            report_as(rule, policy.limits(), unit);
            rule.kind = RuleKind::Limited {
                policy: policy.clone(),
                bound: Some(name.to_owned()),
            };
            return Ok(());
        }
        let mut fields = Map::new();
        let generated = policy_name(self.domain, &rule.key);
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
            self.err(&ext_path, text)
        })?;
        report_as(rule, policy.limits(), unit);
        rule.kind = RuleKind::Limited {
            policy,
            bound: None,
        };
        Ok(())
    }
}

/// What `current_limit` says for a limit that is not a plain fixed window:
/// `rate_limit`'s own numbers when given, else the limit per the unit that
/// best states its span.
fn report_as(rule: &mut Rule, limits: &Limits, unit: Option<Unit>) {
    if unit.is_some() {
        return;
    }
    let (count, span) = match limits {
        Limits::TokenBucket(r) | Limits::Gcra(r) => (r.tokens(), r.per_ms()),
        Limits::FixedWindow(w) | Limits::SlidingWindow(w) | Limits::SlidingLog(w) => {
            (w.limit(), w.window_ms())
        }
    };
    rule.unit = Unit::covering(span);
    rule.requests_per_unit = u32::try_from(count).unwrap_or(u32::MAX);
}

fn parse_failure_mode(
    ext: &Map<String, Value>,
) -> Result<Option<OnStoreFailure>, (&'static str, String)> {
    let share = match ext.get("local_share_percent") {
        None => None,
        Some(v) => match v.as_u64() {
            Some(n @ 1..=100) => u8::try_from(n).ok(),
            _ => {
                return Err((
                    "local_share_percent",
                    format!(
                        "must be a whole percentage from 1 to 100, got {}",
                        describe(v)
                    ),
                ));
            }
        },
    };
    let mode = match ext.get("on_store_failure") {
        None | Some(Value::Null) => {
            return match share {
                None => Ok(None),
                Some(_) => Err((
                    "local_share_percent",
                    "only applies with on_store_failure: local".into(),
                )),
            };
        }
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err((
                "on_store_failure",
                format!(
                    "must be fail_open, fail_closed or local, got {}",
                    describe(other)
                ),
            ));
        }
    };
    match (mode, share) {
        ("fail_open", None) => Ok(Some(OnStoreFailure::FailOpen)),
        ("fail_closed", None) => Ok(Some(OnStoreFailure::FailClosed)),
        ("local", share) => Ok(Some(OnStoreFailure::Local {
            share_percent: share.unwrap_or(DEFAULT_LOCAL_SHARE_PERCENT),
        })),
        ("fail_open" | "fail_closed", Some(_)) => Err((
            "local_share_percent",
            "only applies with on_store_failure: local".into(),
        )),
        (other, _) => Err((
            "on_store_failure",
            format!("unknown mode {other:?} (expected one of: fail_open, fail_closed, local)"),
        )),
    }
}

/// The local share when `local_share_percent` is not given.
const DEFAULT_LOCAL_SHARE_PERCENT: u8 = 10;

fn string_field(fields: &Map<String, Value>, name: &str) -> Result<Option<String>, String> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        // YAML reads `value: 50` or `value: true` as scalars; envoyproxy's
        // loader takes them as their text, so does tollgate.
        Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(Some(v.to_string())),
        Some(other) => Err(format!("must be a string, got {}", describe(other))),
    }
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

/// `*` matches any run of characters (zero or more); the other parts must
/// appear in order, the first as a prefix and the last as a suffix.
fn wildcard_match(parts: &[String], value: &str) -> bool {
    let [first, middle @ .., last] = parts else {
        return parts.first().is_some_and(|p| p == value);
    };
    if value.len() < parts.iter().map(String::len).sum::<usize>() {
        return false;
    }
    let Some(rest) = value.strip_prefix(first.as_str()) else {
        return false;
    };
    let Some(mut rest) = rest.strip_suffix(last.as_str()) else {
        return false;
    };
    for part in middle {
        match rest.find(part.as_str()) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// Files named by `envoy_ratelimit_configs`, directories expanded.
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, RulesError> {
    let mut files = Vec::new();
    for path in paths {
        let shown = path.display().to_string();
        let meta = std::fs::metadata(path).map_err(|e| RulesError::File {
            file: shown.clone(),
            reason: format!("cannot read: {e}"),
        })?;
        if meta.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| RulesError::File {
                    file: shown.clone(),
                    reason: format!("cannot list: {e}"),
                })?
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|p| is_config_file(p))
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(path.clone());
        }
        if files.len() > MAX_FILES {
            return Err(RulesError::File {
                file: shown,
                reason: format!("more than {MAX_FILES} config files"),
            });
        }
    }
    Ok(files)
}

fn is_config_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    !name.starts_with('.') && path.is_file() && (name.ends_with(".yaml") || name.ends_with(".yml"))
}

/// A hash of the files `paths` name now, to notice edits (a file watcher).
pub fn stamp_into(hasher: &mut blake3::Hasher, paths: &[PathBuf]) {
    let Ok(files) = expand(paths) else {
        hasher.update(b"unreadable");
        return;
    };
    for file in files {
        hasher.update(file.as_os_str().as_encoded_bytes());
        if let Ok(bytes) = std::fs::read(&file) {
            hasher.update(&bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(p: &str) -> Vec<String> {
        p.split('*').map(str::to_owned).collect()
    }

    #[test]
    fn wildcards_match_as_envoyproxy_ratelimit_documents() {
        assert!(wildcard_match(&parts("value*"), "value1"));
        assert!(wildcard_match(&parts("value*"), "value"));
        assert!(!wildcard_match(&parts("value*"), "valu"));
        assert!(wildcard_match(&parts("/api/*/action"), "/api/123/action"));
        assert!(!wildcard_match(&parts("/api/*/action"), "/api/123/other"));
        assert!(wildcard_match(
            &parts("/api/*/resource/*/action"),
            "/api/v1/resource/123/action"
        ));
        assert!(!wildcard_match(&parts("ab*ba"), "aba"));
        assert!(wildcard_match(&parts("plain"), "plain"));
    }

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
