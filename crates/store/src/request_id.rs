//! Request ids (`Idempotency-Key`): a retry of one unit of work is charged
//! once. The first admitted decision under an id is recorded beside the
//! first check's state, in the same atomic step (one script call, one shard
//! lock); a later call with the same id inside the retry window consumes
//! nothing and answers admitted again, with remaining and reset as they
//! stand now.
//!
//! Only admissions are recorded: a rejection consumed nothing, so its retry
//! is a new question (waiting `retry_after_ms` must admit it, design §3).
//!
//! A record holds the [`RequestDigest`] of the whole request it admitted
//! (every check's policy, identity and cost, and the door's shape of the
//! request), so an id is found only by the request it was made for: the
//! same id on any other request is refused ([`Replay::Mismatch`]).

use thiserror::Error;
use tollgate_core::Decision;

use crate::Check;

/// The longest request id, in bytes.
pub const MAX_REQUEST_ID_BYTES: usize = 255;
/// The most replays one record answers: after them the id is charged as a
/// new request (and recorded afresh when admitted), so a storm of retries
/// under one id buys at most this many free attempts a charge. Three
/// covers a client's and a proxy's retries of one attempt. The Lua twin is
/// `MAX_REPLAYS` in `lua/record.lua`.
pub const MAX_REPLAYS: u32 = 3;
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

/// A digest of the whole request an id was sent with: what its record
/// holds, and what a retry must match. Made by [`RequestDigest::of`], or
/// check by check with [`RequestHasher`] when the request spans stores.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RequestDigest(blake3::Hash);

/// Builds a [`RequestDigest`] from an unambiguous encoding: a version tag,
/// the shape (absent, or its length and bytes), then each check's policy
/// name and identity (each length-prefixed) and its cost, in order.
pub struct RequestHasher(blake3::Hasher);

impl RequestHasher {
    /// A request of `shape`: what the door knows of the request beyond its
    /// checks (forward auth: the method and normalized path; `/v1/check`:
    /// none, its checks are the request).
    pub fn new(shape: Option<&str>) -> Self {
        let mut hasher = blake3::Hasher::new();
        hasher.update(b"tollgate request v1\0");
        match shape {
            None => {
                hasher.update(&[0]);
            }
            Some(shape) => {
                hasher.update(&[1]);
                field(&mut hasher, shape.as_bytes());
            }
        }
        Self(hasher)
    }

    /// Adds one check, in the request's order.
    pub fn check(&mut self, policy: &str, identity: &[u8], cost: u64) -> &mut Self {
        field(&mut self.0, policy.as_bytes());
        field(&mut self.0, identity);
        self.0.update(&cost.to_le_bytes());
        self
    }

    /// The digest of the request so far.
    pub fn finish(&self) -> RequestDigest {
        RequestDigest(self.0.finalize())
    }
}

/// `bytes`, prefixed by their length, so no two fields run together.
fn field(hasher: &mut blake3::Hasher, bytes: &[u8]) {
    hasher.update(&(bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
}

impl RequestDigest {
    /// The digest of `checks` (every one of the request's, in order) under
    /// `shape` (see [`RequestHasher::new`]).
    pub fn of(checks: &[Check<'_>], shape: Option<&str>) -> Self {
        let mut hasher = RequestHasher::new(shape);
        for check in checks {
            hasher.check(check.policy.name(), check.identity.as_bytes(), check.cost);
        }
        hasher.finish()
    }

    /// The digest's bytes, for what is named after a request (its permits).
    pub(crate) fn as_bytes(&self) -> &[u8; 32] {
        self.0.as_bytes()
    }

    /// As Redis stores it: the first 128 bits in 32 lowercase hex digits,
    /// so a record's values stay small (Redis keeps a hash of short values
    /// compact, in insertion order). A record an older version wrote
    /// (joined costs such as `1,1`) never equals one.
    #[cfg(feature = "redis")]
    pub(crate) fn to_hex(self) -> String {
        self.0.to_hex()[..32].to_owned()
    }
}

impl std::fmt::Debug for RequestDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RequestDigest({})", &self.0.to_hex()[..16])
    }
}

/// What a request id asks of a store: remember `id` for `window_ms`
/// beside the first check's state, keeping at most `max_ids` per key, as
/// the id of the request `request` digests.
#[derive(Debug, Clone, Copy)]
pub struct Retry<'a> {
    /// The client's id for this unit of work.
    pub id: &'a RequestId,
    /// The whole request the id is sent with: a record answers only it.
    pub request: RequestDigest,
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
    /// The id was recorded for a different request (other policies,
    /// identities, costs or shape): refused, nothing consumed.
    Mismatch,
}

/// The decisions of a call with a request id, and what the id made of it.
#[derive(Debug, Clone)]
pub struct Retried {
    /// One per check, in the order of the checks; empty on a mismatch.
    pub decisions: Vec<Decision>,
    /// Whether the call was decided, replayed or refused.
    pub replay: Replay,
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
    fn a_digest_tells_every_part_of_a_request_apart() {
        let of = |shape: Option<&str>, checks: &[(&str, &[u8], u64)]| {
            let mut hasher = RequestHasher::new(shape);
            for (policy, identity, cost) in checks {
                hasher.check(policy, identity, *cost);
            }
            hasher.finish()
        };
        let base = of(None, &[("ab", b"c", 1)]);
        assert_eq!(base, of(None, &[("ab", b"c", 1)]));
        // Lengths keep fields from running together.
        assert_ne!(base, of(None, &[("a", b"bc", 1)]));
        assert_ne!(base, of(None, &[("ab", b"c", 2)]));
        assert_ne!(base, of(Some(""), &[("ab", b"c", 1)]));
        assert_ne!(
            of(Some("GET /a"), &[("ab", b"c", 1)]),
            of(Some("POST /a"), &[("ab", b"c", 1)])
        );
        assert_ne!(base, of(None, &[("ab", b"c", 1), ("ab", b"d", 1)]));
        #[cfg(feature = "redis")]
        assert_eq!(base.to_hex().len(), 32);
    }

    #[test]
    fn the_lua_twin_bounds_replays_alike() {
        let lua = include_str!("../lua/record.lua");
        assert!(lua.contains(&format!("\nlocal MAX_REPLAYS = {MAX_REPLAYS}\n")));
    }

    #[test]
    fn debug_hides_the_id() {
        let id = RequestId::new("secret-ish").expect("valid");
        assert_eq!(format!("{id:?}"), "RequestId(10 bytes)");
    }
}
