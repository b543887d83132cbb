//! A memory store with no room for a new key (its shard holds only
//! limiting states, memory/eviction.rs) does not store it; the request is
//! answered by its policies' failure modes, as when a shared store cannot
//! decide: `fail_closed` rejects, `fail_open` admits, and `local` spends a
//! budget of the policy's local share that every identity without room
//! shares — one key a policy, in a small overflow store of its own.

use tollgate_core::{Decision, Identity};

use super::{MemoryStore, MemoryStoreConfig};
use crate::{Check, Replay, Retry};

/// The overflow store's bound: one key a `local` policy, so far more than
/// any config names; full (of limiting budgets), it rejects.
pub(super) const OVERFLOW: MemoryStoreConfig = MemoryStoreConfig {
    max_keys: 4_096,
    shards: 1,
};

impl MemoryStore {
    /// Decides a failure mode's local budgets (`checks` under their local
    /// policies): each identity its own, here, while there is room and
    /// `per_identity` (a guarded store's fallback); else one budget a
    /// policy shared by every identity without room, without request ids.
    /// `None` when neither has room.
    pub(crate) fn decide_local(
        &self,
        checks: &[Check<'_>],
        retry: Option<Retry<'_>>,
        per_identity: bool,
    ) -> Option<(Vec<Decision>, Replay)> {
        if per_identity {
            let decided = match retry {
                None => self.decide_all_now(checks).map(|d| (d, Replay::Fresh)),
                Some(retry) => self
                    .decide_once_now(checks, retry)
                    .map(|r| (r.decisions, r.replay)),
            };
            if let Ok(decided) = decided {
                return Some(decided);
            }
        }
        let overflow = self.overflow.as_deref()?;
        let without_room = Identity::value("");
        let pooled: Vec<Check<'_>> = checks
            .iter()
            .map(|c| Check {
                identity: &without_room,
                ..*c
            })
            .collect();
        let decisions = overflow.decide_all_now(&pooled).ok()?;
        Some((decisions, Replay::Fresh))
    }
}
