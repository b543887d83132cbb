//! The one way every section of a config refuses a field it does not know:
//! `KEY: unknown field, did you mean NEAR? (expected: a, b)`, the nearest
//! known field suggested when it is a likely misspelling, so a typo reads
//! as a typo instead of as the field it meant being missing.

use serde_json::{Map, Value};

use super::ConfigError;
use crate::policy::Algorithm;

/// `unknown field, did you mean NEAR? (expected: KNOWN…)`, the
/// suggestion left out when no known field is near `key`.
pub fn unknown_field(key: &str, known: &[&str]) -> String {
    format!(
        "unknown field{} (expected: {})",
        did_you_mean(key, known),
        known.join(", ")
    )
}

/// `, did you mean NEAR?` for the known field nearest `key`, or nothing.
pub fn did_you_mean(key: &str, known: &[&str]) -> String {
    nearest(key, known).map_or_else(String::new, |near| format!(", did you mean {near}?"))
}

/// The known field nearest `key` by edit distance (case aside), if it is
/// near enough to be a misspelling: at most a third of `key`'s letters
/// apart (at least 1, at most 3). Ties go to the first listed.
pub fn nearest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    let key = key.to_lowercase();
    let allowed = (key.chars().count() / 3).clamp(1, 3);
    known
        .iter()
        .map(|k| (edit_distance(&key, &k.to_lowercase()), *k))
        .filter(|(d, _)| *d <= allowed)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance: insertions, deletions and substitutions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Refuses a field neither the algorithm nor the caller knows, listing the
/// algorithm's own fields, then what else a policy may hold.
pub(super) fn check_fields(
    name: &str,
    algorithm: Algorithm,
    own: &[&str],
    extra_fields: &[&str],
    fields: &Map<String, Value>,
) -> Result<(), ConfigError> {
    let hint = format!(" for algorithm {algorithm}");
    check_known(name, own, extra_fields, fields, &hint)
}

/// Refuses the first field of `fields` that is neither in `own` (a
/// policy's `name` and `algorithm`, then its algorithm's fields) nor in
/// `extra_fields`, suggesting the nearest known one; `hint` follows
/// `unknown field` when the field belongs to another algorithm.
pub(super) fn check_known(
    name: &str,
    own: &[&str],
    extra_fields: &[&str],
    fields: &Map<String, Value>,
    hint: &str,
) -> Result<(), ConfigError> {
    let Some(key) = fields
        .keys()
        .find(|k| !own.contains(&k.as_str()) && !extra_fields.contains(&k.as_str()))
    else {
        return Ok(());
    };
    let hint = match key.as_str() {
        "capacity" | "refill" | "limit" | "window" | "lease" => hint,
        _ => "",
    };
    let also = if extra_fields.is_empty() {
        String::new()
    } else {
        format!("; any policy: {}", extra_fields.join(", "))
    };
    let known: Vec<&str> = own.iter().chain(extra_fields).copied().collect();
    // `name` and `algorithm` are listed only when missing.
    let listed: Vec<&str> = own
        .iter()
        .filter(|k| !matches!(**k, "name" | "algorithm") || !fields.contains_key(**k))
        .copied()
        .collect();
    Err(ConfigError::field(
        name,
        key,
        format!(
            "unknown field{hint}{} (expected: {}{also})",
            did_you_mean(key, &known),
            listed.join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelling_suggests_the_field_it_meant_and_a_stranger_nothing() {
        let known = ["name", "algorithm", "capacity", "refill", "limit", "window"];
        assert_eq!(nearest("algoritm", &known), Some("algorithm"));
        assert_eq!(nearest("Algorithm", &known), Some("algorithm"));
        assert_eq!(nearest("refil", &known), Some("refill"));
        assert_eq!(nearest("capcaity", &known), Some("capacity"));
        assert_eq!(nearest("burst", &known), None);
        assert_eq!(nearest("x", &known), None);
        assert_eq!(
            unknown_field("windw", &["limit", "window"]),
            "unknown field, did you mean window? (expected: limit, window)"
        );
        assert_eq!(
            unknown_field("burst", &["limit", "window"]),
            "unknown field (expected: limit, window)"
        );
    }

    #[test]
    fn edit_distance_counts_each_change_once() {
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("matc", "match"), 1);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
