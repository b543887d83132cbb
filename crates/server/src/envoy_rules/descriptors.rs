//! The YAML of one file into the descriptor tree: `domain` and its
//! `descriptors`, level by level, each checked as envoyproxy/ratelimit
//! checks it (empty keys, duplicates, `share_threshold` only on wildcards),
//! with tollgate's own refusals (nesting past `MAX_DEPTH`).

use std::collections::HashSet;

use serde_json::Value;
use tollgate_core::{ConfigError, PolicySet, describe, parse_yaml_named};

use super::reading::{Reading, string_field};
use super::rule::{Rule, RuleKind, read_rule};
use super::{EnvoyRules, MAX_DEPTH, RulesError};

impl EnvoyRules {
    /// Loads one file's text (`file` names it in errors, with the lines
    /// around the place a fault is about).
    pub fn load_text(
        &mut self,
        file: &str,
        text: &str,
        policies: &PolicySet,
    ) -> Result<(), RulesError> {
        self.read_text(file, text, policies)
            .map_err(|e| e.located(text))
    }

    fn read_text(
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
            reading: Reading {
                file,
                domain: &domain,
                policies,
            },
            rules: self,
            keys: Vec::new(),
        };
        loader.level(root, top.get("descriptors"), "descriptors", "", 0)?;
        Ok(())
    }
}

/// The file being read and the tree it grows.
struct Loader<'a> {
    reading: Reading<'a>,
    rules: &'a mut EnvoyRules,
    /// The keys of the descriptors above the level being read.
    keys: Vec<String>,
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

impl Loader<'_> {
    /// A bound rule's identity is the composite of its entries, one value
    /// a key: a rule bound under a descriptor of its own key could never
    /// be decided, so it is refused here.
    fn check_bound_keys(
        &self,
        rule: Option<&Rule>,
        key: &str,
        here: &str,
    ) -> Result<(), RulesError> {
        if let Some(RuleKind::Limited {
            bound: Some(policy),
            ..
        }) = rule.map(|r| &r.kind)
            && self.keys.iter().any(|k| k == key)
        {
            return Err(self.reading.err(
                &format!("{here}.tollgate.policy"),
                format!(
                    "a rule bound to policy {policy:?} cannot repeat the key {key:?} of a descriptor above it: its identity holds one value a key"
                ),
            ));
        }
        Ok(())
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
                return Err(self
                    .reading
                    .err(path, format!("must be a list, got {}", describe(other))));
            }
        };
        if depth >= MAX_DEPTH {
            return Err(self
                .reading
                .err(path, format!("nested deeper than {MAX_DEPTH} levels")));
        }
        let mut seen = HashSet::new();
        for (index, item) in list.iter().enumerate() {
            let here = format!("{path}[{index}]");
            let fields = item.as_object().ok_or_else(|| {
                self.reading
                    .err(&here, format!("must be a mapping, got {}", describe(item)))
            })?;
            if let Some(unknown) = fields
                .keys()
                .find(|k| !DESCRIPTOR_KEYS.contains(&k.as_str()))
            {
                return Err(self.reading.err(
                    &format!("{here}.{unknown}"),
                    format!("unknown key (expected: {})", DESCRIPTOR_KEYS.join(", ")),
                ));
            }
            let key = string_field(fields, "key")
                .map_err(|r| self.reading.err(&format!("{here}.key"), r))?
                .filter(|k| !k.is_empty())
                .ok_or_else(|| self.reading.err(&here, "descriptor has an empty key"))?;
            let value = string_field(fields, "value")
                .map_err(|r| self.reading.err(&format!("{here}.value"), r))?
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
                return Err(self.reading.err(
                    &here,
                    format!("duplicate descriptor composite key {:?}", full_key),
                ));
            }
            let flag = |name: &str| -> Result<bool, RulesError> {
                match fields.get(name) {
                    None | Some(Value::Null) => Ok(false),
                    Some(Value::Bool(b)) => Ok(*b),
                    Some(other) => Err(self.reading.err(
                        &format!("{here}.{name}"),
                        format!("must be true or false, got {}", describe(other)),
                    )),
                }
            };
            let shadow_mode = flag("shadow_mode")?;
            let share_threshold = flag("share_threshold")?;
            let quota_mode = flag("quota_mode")?;
            // Accepted as in envoyproxy/ratelimit; tollgate's metric labels
            // come from the config only, never from request values.
            flag("detailed_metric")?;
            flag("value_to_metric")?;
            if share_threshold && !value.contains('*') {
                return Err(self.reading.err(
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
            let rule = read_rule(&self.reading, fields, &here, &full_key, shadow_mode)?;
            self.check_bound_keys(rule.as_ref(), &key, &here)?;
            if let Some(mut rule) = rule {
                rule.quota_mode = quota_mode;
                self.rules.rules.push(rule);
                self.rules.nodes[child].rule = Some(self.rules.rules.len() - 1);
            }
            self.keys.push(key.clone());
            let below = self.level(
                child,
                fields.get("descriptors"),
                &format!("{here}.descriptors"),
                &full_key,
                depth + 1,
            );
            self.keys.pop();
            below?;
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
}
