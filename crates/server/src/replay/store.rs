//! Where a replay decides on Redis: a prefix of its own, never a serving
//! tollgate's keys unless the operator says so.

use tollgate_limiter::{RedisConfig, RedisStore, StoreError};
use tollgate_store::PrefixHolds;

use super::{REPLAY_PREFIX, ReplayError, ReplayStore, SERVE_PREFIX};

/// A Redis store under the replay's prefix, once it is known to hold no
/// live keys (or the operator said to write there anyway), marked as a
/// replay's.
pub(crate) async fn open_redis(url: &str, target: &ReplayStore) -> Result<RedisStore, ReplayError> {
    let mut config = RedisConfig::standalone(url);
    config.prefix = target
        .prefix
        .clone()
        .unwrap_or_else(|| REPLAY_PREFIX.to_owned());
    // A replay waits for its store rather than fail an event.
    config.timeout_ms = 10_000;
    config.validate().map_err(ReplayError::Store)?;
    let refuse = |why: String| {
        Err(ReplayError::Store(StoreError::Config(format!(
            "{why}: a replay would spend or reset live limits there; choose another --prefix, or pass --write-live-keys to write there anyway"
        ))))
    };
    let prefix = config.prefix.clone();
    if prefix == SERVE_PREFIX && !target.write_live_keys {
        return refuse(format!(
            "--prefix {prefix:?} is where `serve` keeps its keys by default"
        ));
    }
    let store = RedisStore::connect(&config)
        .await
        .map_err(ReplayError::Store)?;
    match store.prefix_holds().await.map_err(ReplayError::Store)? {
        PrefixHolds::Live if !target.write_live_keys => {
            return refuse(format!(
                "a serving tollgate marks {prefix:?} as its own ({prefix}:live, refreshed while it serves), whatever a replay left there"
            ));
        }
        PrefixHolds::Other { key } if !target.write_live_keys => {
            return refuse(format!(
                "keys under {prefix:?} were not written by a replay (one is {key:?})"
            ));
        }
        _ => {}
    }
    store
        .mark_replay_prefix()
        .await
        .map_err(ReplayError::Store)?;
    Ok(store)
}
