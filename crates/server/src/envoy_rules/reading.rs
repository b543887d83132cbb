//! Reading one file: where a fault is (the file and the path in it, as
//! `RulesError` says), what the file's descriptors may refer to (its
//! domain, tollgate's policies), and YAML scalars taken as text.

use serde_json::{Map, Value};
use thiserror::Error;
use tollgate_core::{PolicySet, describe};

/// A fault in an envoyproxy/ratelimit file, with the file and the path in it.
#[derive(Debug, Error)]
pub enum RulesError {
    /// A fault in the file as a whole (unreadable, not YAML, ...).
    #[error("{file}: {reason}")]
    File {
        /// The file at fault.
        file: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A fault at one place in the file.
    #[error("{file}: {path}: {reason}")]
    At {
        /// The file at fault.
        file: String,
        /// Where in it, as a dotted path.
        path: String,
        /// What is wrong there.
        reason: String,
    },
    /// `error` with the lines of its file around the place it names.
    #[error("{error}\n{snippet}")]
    Located {
        /// What is wrong, and where as a path.
        error: Box<RulesError>,
        /// ` --> file:line:column` and the lines around it.
        snippet: String,
    },
}

impl RulesError {
    /// This error with the lines of `text` around the place it names, when
    /// it names one the text has.
    #[must_use]
    pub fn located(self, text: &str) -> Self {
        let RulesError::At { file, path, reason } = &self else {
            return self;
        };
        let node = tollgate_core::NodePath::default().then_field(path);
        let label = format!("{path}: {reason}");
        match tollgate_core::snippet_at(text, file, &node, &label) {
            Some(snippet) => RulesError::Located {
                error: Box::new(self),
                snippet,
            },
            None => self,
        }
    }
}

/// One file being read: its name (for errors), its domain (for generated
/// policy names) and tollgate's policies (for `tollgate: {policy: NAME}`).
pub(super) struct Reading<'a> {
    pub file: &'a str,
    pub domain: &'a str,
    pub policies: &'a PolicySet,
}

impl Reading<'_> {
    /// A fault at `path` in this file.
    pub fn err(&self, path: &str, reason: impl Into<String>) -> RulesError {
        RulesError::At {
            file: self.file.to_owned(),
            path: path.to_owned(),
            reason: reason.into(),
        }
    }
}

/// A field read as text: envoyproxy's loader takes numbers and booleans as
/// their text, so does tollgate.
pub(super) fn string_field(
    fields: &Map<String, Value>,
    name: &str,
) -> Result<Option<String>, String> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        // YAML reads `value: 50` or `value: true` as scalars; envoyproxy's
        // loader takes them as their text, so does tollgate.
        Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(Some(v.to_string())),
        Some(other) => Err(format!("must be a string, got {}", describe(other))),
    }
}
