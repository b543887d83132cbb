//! Request ids (`Idempotency-Key`): a retry of one unit of work is charged
//! once. The first admitted decision under an id is recorded beside the
//! first check's state, in the same atomic step (one script call, one shard
//! lock); a later call with the same id inside the retry window consumes
//! nothing and answers admitted again, with remaining and reset as they
//! stand now.
//!
//! Only admissions are recorded: a rejection consumed nothing, so its retry
//! is a new question (waiting `retry_after_ms` must admit it, design §3).

use std::fmt::Write as _;

use thiserror::Error;
use tollgate_core::Decision;

use crate::Check;

/// The longest request id, in bytes.
pub const MAX_REQUEST_ID_BYTES: usize = 255;
/// How long an id is remembered when a policy does not say.
pub const DEFAULT_RETRY_WINDOW_MS: u64 = 60_000;
/// The shortest and longest retry windows a policy may set: below a second
/// a retry outruns its window; beyond a day ids are storage, not retries.
pub const RETRY_WINDOW_RANGE_MS: std::ops::RangeInclusive<u64> = 1_000..=86_400_000;
/// Ids remembered per identity and policy when a policy does not say.
pub const DEFAULT_RETRY_IDS: u32 = 64;
/// The bounds on ids per identity and policy: each costs memory beside the
/// state, and in Redis a full record is scanned to drop its oldest.
pub const RETRY_IDS_RANGE: std::ops::RangeInclusive<u32> = 1..=1024;

/// A client's name for one unit of work: 1 to 255 printable ASCII bytes
/// (space to `~`), compared exactly. Its `Debug` shows only its length, so
/// it reaches no log by accident.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RequestId(Box<str>);

/// Why a request id was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RequestIdError {
    /// The id is empty.
    #[error("request id is empty")]
    Empty,
    /// The id is longer than [`MAX_REQUEST_ID_BYTES`].
    #[error("request id is {0} bytes long; at most {MAX_REQUEST_ID_BYTES} are allowed")]
    TooLong(usize),
    /// A byte outside printable ASCII.
    #[error("request id has a byte outside printable ASCII (space to ~) at offset {0}")]
    NotPrintable(usize),
}

impl RequestId {
    /// Checks `text` and takes it as an id.
    pub fn new(text: &str) -> Result<Self, RequestIdError> {
        if text.is_empty() {
            return Err(RequestIdError::Empty);
        }
        if text.len() > MAX_REQUEST_ID_BYTES {
            return Err(RequestIdError::TooLong(text.len()));
        }
        if let Some(at) = text.bytes().position(|b| !(b' '..=b'~').contains(&b)) {
            return Err(RequestIdError::NotPrintable(at));
        }
        Ok(Self(text.into()))
    }

    /// The id as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RequestId({} bytes)", self.0.len())
    }
}

/// What a request id asks of a store: remember `id` for `window_ms`
/// beside the first check's state, keeping at most `max_ids` per key.
#[derive(Debug, Clone, Copy)]
pub struct Retry<'a> {
    /// The client's id for this unit of work.
    pub id: &'a RequestId,
    /// How long the id is remembered after its first admission.
    pub window_ms: u64,
    /// Ids kept per key; beyond it the oldest is forgotten.
    pub max_ids: u32,
}

/// What a request id made of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replay {
    /// The id was not known (or had expired): decided as any call.
    Fresh,
    /// The id was known: nothing consumed, admitted as recorded.
    Replayed,
    /// The id was recorded with other costs (`recorded`, comma-separated
    /// in the checks' order): refused, nothing consumed.
    CostMismatch {
        /// The costs the id was first admitted with.
        recorded: String,
    },
}

/// The decisions of a call with a request id, and what the id made of it.
#[derive(Debug, Clone)]
pub struct Retried {
    /// One per check, in the order of the checks; empty on a mismatch.
    pub decisions: Vec<Decision>,
    /// Whether the call was decided, replayed or refused.
    pub replay: Replay,
}

/// The costs of a call as recorded with its id: `3`, or `1,2,1` for a
/// batch. A retry must send the same.
pub(crate) fn costs(checks: &[Check<'_>]) -> String {
    let mut out = String::with_capacity(checks.len() * 4);
    for (i, check) in checks.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{}", check.cost);
    }
    out
}

/// A replay's answer: admitted, as recorded, from peeks (cost 0) that
/// state remaining and reset as they stand now.
pub(crate) fn replayed(mut peeks: Vec<Decision>) -> Vec<Decision> {
    for d in &mut peeks {
        d.allowed = true;
        d.retry_after_ms = Some(0);
    }
    peeks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_printable_ascii_within_bounds() {
        assert!(RequestId::new("8e03978e-40d5-43e8-bc93-6894a57f9324").is_ok());
        assert!(RequestId::new("\"quoted sf-string\"").is_ok());
        assert_eq!(RequestId::new(""), Err(RequestIdError::Empty));
        assert_eq!(
            RequestId::new(&"a".repeat(256)),
            Err(RequestIdError::TooLong(256))
        );
        assert!(RequestId::new(&"a".repeat(255)).is_ok());
        assert_eq!(
            RequestId::new("ab\tc"),
            Err(RequestIdError::NotPrintable(2))
        );
        assert_eq!(RequestId::new("é"), Err(RequestIdError::NotPrintable(0)));
    }

    #[test]
    fn debug_hides_the_id() {
        let id = RequestId::new("secret-ish").expect("valid");
        assert_eq!(format!("{id:?}"), "RequestId(10 bytes)");
    }
}
