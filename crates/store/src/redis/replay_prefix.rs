//! A replay's keys stay out of a serving tollgate's. Before it writes, a
//! replay asks what its prefix already holds; it writes only into a prefix
//! that is empty or that a replay marked as its own, and marks it (with a
//! TTL, like every key) so the next replay may continue there.

use redis::Value;

use super::RedisStore;
use super::connection;
use crate::StoreError;

/// The key that says a prefix is a replay's: `<prefix>:replay`. No state
/// key can be it (every state key has a `{…}` hash tag).
const MARKER: &str = "replay";

/// How long a replay's mark outlives its last replay.
const MARKER_TTL_MS: u64 = 24 * 3_600_000;

/// Keys a SCAN step asks for: the search stops at the first key found.
const SCAN_COUNT: u64 = 1_000;

/// What a prefix holds before a replay writes there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrefixHolds {
    /// No key at all.
    Nothing,
    /// Keys, and the mark of a replay.
    Replay,
    /// Keys no replay marked: a serving tollgate's, say. One of them.
    Other {
        /// One key found under the prefix.
        key: String,
    },
}

impl RedisStore {
    /// The store's key prefix (`store.redis.prefix`).
    pub fn prefix(&self) -> &str {
        &self.shared.prefix
    }

    /// What the prefix holds: it stops at the marker or the first key found
    /// (every SCAN step bounded by the store's timeout).
    pub async fn prefix_holds(&self) -> Result<PrefixHolds, StoreError> {
        let prefix = &self.shared.prefix;
        let marker = format!("{prefix}:{MARKER}");
        let exists = self
            .timed(async {
                self.shared
                    .connection
                    .query(redis::cmd("EXISTS").arg(&marker))
                    .await
                    .map_err(connection::from_redis)
            })
            .await?;
        if matches!(exists, Value::Int(1)) {
            return Ok(PrefixHolds::Replay);
        }
        let pattern = format!("{}:*", escape_glob(prefix));
        let mut cursor = 0u64;
        loop {
            let reply = self
                .timed(async {
                    self.shared
                        .connection
                        .query(
                            redis::cmd("SCAN")
                                .arg(cursor)
                                .arg("MATCH")
                                .arg(&pattern)
                                .arg("COUNT")
                                .arg(SCAN_COUNT),
                        )
                        .await
                        .map_err(connection::from_redis)
                })
                .await?;
            let (next, keys): (u64, Vec<String>) = redis::from_redis_value(reply)
                .map_err(|e| StoreError::Protocol(format!("SCAN: {e}")))?;
            if let Some(key) = keys.into_iter().next() {
                return Ok(PrefixHolds::Other { key });
            }
            if next == 0 {
                return Ok(PrefixHolds::Nothing);
            }
            cursor = next;
        }
    }

    /// Marks the prefix as a replay's, for a day after this replay.
    pub async fn mark_replay_prefix(&self) -> Result<(), StoreError> {
        let marker = format!("{}:{MARKER}", self.shared.prefix);
        self.timed(async {
            self.shared
                .connection
                .query(
                    redis::cmd("SET")
                        .arg(&marker)
                        .arg("written by tollgate replay")
                        .arg("PX")
                        .arg(MARKER_TTL_MS),
                )
                .await
                .map(drop)
                .map_err(connection::from_redis)
        })
        .await
    }
}

/// `text` matched literally by a SCAN pattern.
fn escape_glob(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::escape_glob;

    #[test]
    fn glob_characters_in_a_prefix_match_only_themselves() {
        assert_eq!(escape_glob("tollgate"), "tollgate");
        assert_eq!(escape_glob("a*b?c[d]e\\f"), "a\\*b\\?c\\[d\\]e\\\\f");
    }
}
