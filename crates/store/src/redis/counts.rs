//! What a Redis store has counted since it started: the numbers behind
//! its metrics (`tollgate_store_script_calls_total`, the rejected-until
//! cache's answers) and the benches' batch sizes.

use std::sync::atomic::Ordering;

use super::RedisStore;

impl RedisStore {
    /// Rejections held in the rejected-until cache right now.
    pub fn rejections_cached(&self) -> usize {
        self.shared.rejected.len()
    }

    /// Script calls the batching task has made for single decisions; the
    /// decisions it carried divided by this is the mean batch size.
    pub fn batched_calls(&self) -> u64 {
        self.shared.batched_calls.load(Ordering::Relaxed)
    }

    /// Every script call this store has sent (EVALSHA, and EVAL after
    /// NOSCRIPT), whatever it was for.
    pub fn script_calls(&self) -> u64 {
        self.shared.script_calls.load(Ordering::Relaxed)
    }

    /// Decisions answered from the rejected-until cache, without Redis.
    pub fn answered_locally(&self) -> u64 {
        self.shared.answered_locally.load(Ordering::Relaxed)
    }
}
