//! Permits in the memory store: a concurrency policy's state is its held
//! permits, decided like any state (crate::permit names them); a release
//! frees one under the key's shard lock.

use tollgate_core::{Identity, Intent, PermitId, Policy, Released};

use super::MemoryStore;
use super::eviction::Marks;
use crate::check::Check;

impl MemoryStore {
    /// Frees `permit` of `policy`'s state for `identity`, if it is held
    /// now: what the release found.
    pub fn release(&self, policy: &Policy, identity: &Identity, permit: PermitId) -> Released {
        let check = Check {
            policy,
            identity,
            cost: 0,
        };
        let now = self.now();
        let hash = self.hash(&check);
        let mut table = self.shard(hash).0.lock();
        let limits = policy.limits();
        let Ok(mut entry) = table.slots.find_entry(hash, |s| s.is(hash, &check)) else {
            return Released::Unknown;
        };
        let slot = entry.get_mut();
        let found = limits.release(&mut slot.state, now.wall, permit);
        match &slot.state {
            None => {
                entry.remove();
            }
            Some(state) => {
                // A freed permit may end a limiting state: its marks as a
                // look now reads it, its expiry kept (no earlier than needed).
                let peek = limits.decide_with(&mut Some(state.clone()), now.wall, 0, Intent::Probe);
                let expires_at_ms = slot.expires_at_ms;
                slot.mark(Marks::of(limits, state, now, &peek, None).expiring_at(expires_at_ms));
                table.full_until_ms = 0;
            }
        }
        found
    }
}
