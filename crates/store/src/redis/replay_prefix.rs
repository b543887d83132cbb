//! A replay's keys stay out of a serving tollgate's. A serving tollgate
//! marks its prefix as live (`<prefix>:live`, a short TTL it refreshes
//! while it serves) and clears any replay's mark there. Before it writes, a
//! replay asks what its prefix already holds; it refuses a live prefix
//! whatever else is there, writes only into a prefix that is empty or that
//! a replay marked as its own, and marks it (with a TTL, like every key)
//! so the next replay may continue there.

use redis::Value;

use super::RedisStore;
use super::errors;
use crate::StoreError;

/// The key that says a prefix is a replay's: `<prefix>:replay`. No state
/// key can be it (every state key has a `{…}` hash tag).
const MARKER: &str = "replay";

/// How long a replay's mark outlives its last replay.
const MARKER_TTL_MS: u64 = 24 * 3_600_000;

/// The key that says a serving tollgate uses the prefix: `<prefix>:live`.
const LIVE: &str = "live";

/// How long a serving tollgate's mark outlives its last refresh.
const LIVE_TTL_MS: u64 = 60_000;

/// How often a serving tollgate refreshes its mark: three times a TTL, so
/// one slow or failed refresh does not let it lapse.
pub const LIVE_REFRESH_MS: u64 = LIVE_TTL_MS / 3;

/// Keys a SCAN step asks for: the search stops at the first key found.
const SCAN_COUNT: u64 = 1_000;

/// What a prefix holds before a replay writes there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrefixHolds {
    /// The mark of a serving tollgate, refreshed while it serves.
    Live,
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

    /// What the prefix holds: a serving tollgate's mark first (whatever
    /// else is there), then a replay's, then the first key found (every
    /// SCAN step bounded by the store's timeout).
    pub async fn prefix_holds(&self) -> Result<PrefixHolds, StoreError> {
        let prefix = &self.shared.prefix;
        if self.exists(&format!("{prefix}:{LIVE}")).await? {
            return Ok(PrefixHolds::Live);
        }
        if self.exists(&format!("{prefix}:{MARKER}")).await? {
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
                        .map_err(errors::from_redis)
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

    /// Marks the prefix as a serving tollgate's for `LIVE_TTL_MS`, and
    /// takes a replay's mark off it: a serve calls this at start and every
    /// [`LIVE_REFRESH_MS`] while it serves, so no replay writes there while
    /// it does, nor after it stops (its keys are no replay's).
    pub async fn mark_live_prefix(&self) -> Result<(), StoreError> {
        let prefix = &self.shared.prefix;
        self.query_unit(
            redis::cmd("SET")
                .arg(format!("{prefix}:{LIVE}"))
                .arg("served by tollgate serve")
                .arg("PX")
                .arg(LIVE_TTL_MS),
        )
        .await?;
        self.query_unit(redis::cmd("DEL").arg(format!("{prefix}:{MARKER}")))
            .await
    }

    /// Whether `key` exists, within the store's timeout.
    async fn exists(&self, key: &str) -> Result<bool, StoreError> {
        let exists = self
            .timed(async {
                self.shared
                    .connection
                    .query(redis::cmd("EXISTS").arg(key))
                    .await
                    .map_err(errors::from_redis)
            })
            .await?;
        Ok(matches!(exists, Value::Int(1)))
    }

    /// `cmd`, its answer dropped, within the store's timeout.
    async fn query_unit(&self, cmd: &redis::Cmd) -> Result<(), StoreError> {
        self.timed(async {
            self.shared
                .connection
                .query(cmd)
                .await
                .map(drop)
                .map_err(errors::from_redis)
        })
        .await
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
                .map_err(errors::from_redis)
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
