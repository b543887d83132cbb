//! gcra's scale registry: a small tag for each scale a policy has used, so
//! a gcra state can be one bare integer (tat, then a three-digit tag) and
//! still say which scale it was written in.
//!
//! Why: Redis keeps an integer value inside the key's object, so a gcra key
//! is the smallest state of any algorithm, well below one with its scale
//! written out (bytes per key: docs/redis.md, Figures). A limit change
//! still carries over exactly: the script meets a tag it was not told
//! about, stops before writing anything, and the call is made again with
//! that tag's scale, read from the registry (a hash per policy,
//! `<prefix>:<policy>:gcra:scales`: "C:n:p" → tag and "#tag" → "C:n:p").
//!
//! A scale's tag is a hash of its text (BLAKE3, mod 1,000), so a registry
//! lost and made again gives each scale the tag it had; a scale whose tag
//! another scale holds gets none (text states). What a lost registry can
//! still do: a state of a scale nobody registered again reads as an empty
//! bucket (never admits more); a state of an old scale whose hash equals
//! the new scale's (1 in 1,000 a pair) reads in the new scale, for at most
//! one refill. docs/redis.md says how to keep registries from eviction.
//!
//! The registry lives longer than any state that names it: its TTL is at
//! least a week and twice the longest refill among its scales, and each
//! instance registers the scales it uses again every hour. When a registry
//! is unreachable or full, states are written in the text form, which
//! names its scale: only the size changes, never a decision.
//!
//! A decision never waits on a registration: a scale not yet registered is
//! written in the text form while its registration runs in the background,
//! and each connection that opens registers every scale the store knows
//! before its first decision (prelude.rs), so a server restarted empty has
//! its registries back before a state names them.
//!
//! This file is the cache and the registry's commands and answers; the
//! calls to Redis that register and resolve are registry.rs's.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use redis::{Cmd, Value};
use tokio::time::Instant;

use super::script::{By, SCRIPTS, invocation};
use crate::StoreError;

/// How often an instance registers a scale it uses again, keeping the
/// registry alive.
const REFRESH: Duration = Duration::from_secs(3600);
/// How soon a registration that failed is tried again.
const RETRY: Duration = Duration::from_secs(1);
/// The least TTL of a registry.
const MIN_TTL_MS: u64 = 7 * 24 * 3600 * 1000;
/// Tags are three decimal digits in a state.
const TAGS: u64 = 1000;
/// Entries cached per store; past this the cache starts over.
const MAX_CACHED: usize = 4096;

/// A gcra scale: capacity C, n units a ms, p units a token.
pub type Scale = [u64; 3];

/// A policy's scales → their tags (`None`: no tag, text states), and when
/// each is due to be registered again.
type Tags = HashMap<Arc<str>, HashMap<Scale, (Option<u16>, Instant)>>;

#[derive(Default)]
pub struct Scales {
    tags: RwLock<Tags>,
    known: RwLock<HashMap<(Arc<str>, u16), Scale>>,
}

/// The registry's key for `policy`.
pub fn registry_key(prefix: &str, policy: &str) -> String {
    format!("{prefix}:{policy}:gcra:scales")
}

impl Scales {
    /// The tag to write `policy`'s `scale` with now: `Ok` the cached one;
    /// `Err` the one to use while a registration runs, when the scale is
    /// not cached or due to be registered again (marked pending: no other
    /// decision starts a registration until RETRY).
    pub fn cached_or_due(
        &self,
        policy: &Arc<str>,
        scale: Scale,
    ) -> Result<Option<u16>, Option<u16>> {
        let now = Instant::now();
        let cached = self
            .tags
            .read()
            .get(&**policy)
            .and_then(|scales| scales.get(&scale))
            .copied();
        if let Some((tag, due)) = cached
            && now < due
        {
            return Ok(tag);
        }
        let tag = cached.and_then(|(tag, _)| tag);
        self.insert(policy, scale, tag, now + RETRY);
        Err(tag)
    }

    /// Records a registration's outcome; returns the tag to use. A failed
    /// one keeps a tag already given (tags are never reused) and is tried
    /// again soon.
    pub fn settle(
        &self,
        policy: &Arc<str>,
        scale: Scale,
        registered: Result<Option<u16>, StoreError>,
    ) -> Option<u16> {
        let now = Instant::now();
        let (tag, due) = match registered {
            Ok(tag) => (tag, now + REFRESH),
            Err(e) => {
                tracing::debug!(error = %e, policy = %policy, "cannot register a gcra scale");
                let kept = self
                    .tags
                    .read()
                    .get(&**policy)
                    .and_then(|scales| scales.get(&scale))
                    .and_then(|(tag, _)| *tag);
                (kept, now + RETRY)
            }
        };
        self.insert(policy, scale, tag, due);
        if let Some(tag) = tag {
            self.remember(policy, tag, scale);
        }
        tag
    }

    fn insert(&self, policy: &Arc<str>, scale: Scale, tag: Option<u16>, due: Instant) {
        let mut tags = self.tags.write();
        if tags.len() >= MAX_CACHED {
            tags.clear();
        }
        let scales = tags.entry(Arc::clone(policy)).or_default();
        if scales.len() >= MAX_CACHED {
            scales.clear();
        }
        scales.insert(scale, (tag, due));
    }

    /// Up to `limit` scales this store has used, to register again on a
    /// connection that opens (a server restarted empty lost its registries).
    pub fn known(&self, limit: usize) -> Vec<(Arc<str>, Scale)> {
        self.tags
            .read()
            .iter()
            .flat_map(|(policy, scales)| scales.keys().map(|scale| (Arc::clone(policy), *scale)))
            .take(limit)
            .collect()
    }

    /// The scale `policy` tagged `tag`, when cached.
    pub fn known_scale(&self, policy: &Arc<str>, tag: u16) -> Option<Scale> {
        self.known.read().get(&(Arc::clone(policy), tag)).copied()
    }

    pub fn remember(&self, policy: &Arc<str>, tag: u16, scale: Scale) {
        let mut known = self.known.write();
        if known.len() >= MAX_CACHED {
            known.clear();
        }
        known.insert((Arc::clone(policy), tag), scale);
    }
}

/// `EVALSHA register_scale ...` for `policy`'s `scale`.
pub fn registration(prefix: &str, policy: &str, scale: Scale, margin_ms: u64) -> Cmd {
    registration_by(prefix, policy, scale, margin_ms, By::Sha)
}

pub fn registration_by(prefix: &str, policy: &str, scale: Scale, margin_ms: u64, by: By) -> Cmd {
    let [capacity, n, p] = scale;
    // The longest a state of this scale lives: a full refill, C·p/n ms.
    let refill_ms = u64::try_from(u128::from(capacity) * u128::from(p) / u128::from(n.max(1)))
        .unwrap_or(u64::MAX / 4);
    let ttl_ms = MIN_TTL_MS.max(
        refill_ms
            .saturating_add(margin_ms)
            .saturating_mul(2)
            .min(1 << 52),
    );
    let text = format!("{capacity}:{n}:{p}");
    let preferred = preferred_tag(&text);
    let mut cmd = invocation(&SCRIPTS.register_scale, by);
    cmd.arg(1)
        .arg(registry_key(prefix, policy))
        .arg(&text)
        .arg(preferred)
        .arg(ttl_ms);
    cmd
}

/// A registration's answer: the tag, or none (-1: another scale holds it).
pub fn tag_of(reply: Value) -> Result<Option<u16>, StoreError> {
    match reply {
        Value::Int(tag) if tag >= 0 => u16::try_from(tag)
            .map(Some)
            .map_err(|_| StoreError::Protocol(format!("a scale registry answered tag {tag}"))),
        Value::Int(_) => Ok(None),
        other => Err(StoreError::Protocol(format!(
            "a scale registry answered {other:?}"
        ))),
    }
}

/// The tag a scale's text hashes to.
pub fn preferred_tag(text: &str) -> u16 {
    let digest = blake3::hash(text.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest.as_bytes()[..8]);
    // Below 1,000, so it fits.
    u16::try_from(u64::from_le_bytes(first) % TAGS).unwrap_or(0)
}

/// `HGETALL`'s "C:n:p" → tag pairs (the "#tag" fields are skipped).
pub fn parse_registry(value: &Value) -> Result<Vec<(Scale, u16)>, StoreError> {
    let bad = || StoreError::Protocol(format!("unreadable gcra scale registry: {value:?}"));
    let text = |v: &Value| match v {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok().map(str::to_owned),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let pairs: Vec<(String, String)> = match value {
        Value::Array(items) => items
            .chunks_exact(2)
            .map(|pair| Some((text(&pair[0])?, text(&pair[1])?)))
            .collect::<Option<_>>()
            .ok_or_else(bad)?,
        Value::Map(items) => items
            .iter()
            .map(|(k, v)| Some((text(k)?, text(v)?)))
            .collect::<Option<_>>()
            .ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    pairs
        .into_iter()
        .filter(|(field, _)| !field.starts_with('#'))
        .map(|(scale, tag)| {
            let mut parts = scale.split(':').map(str::parse::<u64>);
            let parsed = match (parts.next(), parts.next(), parts.next(), parts.next()) {
                (Some(Ok(c)), Some(Ok(n)), Some(Ok(p)), None) => [c, n, p],
                _ => return Err(bad()),
            };
            Ok((parsed, tag.parse().map_err(|_| bad())?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registry_reads_back_its_pairs() {
        let value = Value::Array(vec![
            Value::BulkString(b"20:1:200".to_vec()),
            Value::BulkString(b"0".to_vec()),
            Value::BulkString(b"#0".to_vec()),
            Value::BulkString(b"20:1:200".to_vec()),
            Value::BulkString(b"5:3:1000".to_vec()),
            Value::BulkString(b"1".to_vec()),
        ]);
        assert_eq!(
            parse_registry(&value).expect("readable"),
            vec![([20, 1, 200], 0), ([5, 3, 1000], 1)]
        );
        let broken = Value::Array(vec![
            Value::BulkString(b"20:1".to_vec()),
            Value::BulkString(b"0".to_vec()),
        ]);
        assert!(parse_registry(&broken).is_err());
    }
}
