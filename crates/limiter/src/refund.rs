//! Refunds: units a client gives back after the operation it was charged
//! for did not happen (Envoy's `is_negative_hits`, `/v1/check`'s
//! `refund`). Unlike a hot-lease return, the take is not known, so the
//! state alone bounds what goes back (`Taken::REFUND` in the core): a
//! bucket up to full, a window's current count down to empty, a log's
//! newest entries. A refund never lets an identity spend more at once than
//! its policy's limit: under `hot_lease`, this instance's live block of
//! the identity ends and goes back before the refund.

use tollgate_core::{Clock, Taken};
use tollgate_store::{Check as StoreCheck, RequestId, StoreError};

use crate::backend::Backend;
use crate::limiter::Limiter;
use crate::plan::Check;

impl Limiter {
    /// Gives back up to `check.cost` units of `check.identity` under its
    /// plan's policy, on its store; a sharded plan's shards in turn until
    /// all went back. Returns the units given back (fewer when the state
    /// was fuller than that: a refund of what was never taken gives
    /// nothing). Not counted as a decision.
    pub async fn refund(&self, check: &Check<'_>) -> Result<u64, StoreError> {
        self.refund_request(check, None).await
    }

    /// [`Limiter::refund`] of the work admitted under request id `id`:
    /// the id's record kept with this check's policy and identity (a single
    /// check's, or a batch's first) is forgotten first, so a retry of the
    /// work under it is charged again rather than replayed for nothing.
    pub async fn refund_request(
        &self,
        check: &Check<'_>,
        id: Option<&RequestId>,
    ) -> Result<u64, StoreError> {
        let store = check.plan.store();
        let backend = self
            .backends
            .get(store)
            .ok_or_else(|| StoreError::Config(format!("no store {store}")))?;
        if let Some(id) = id {
            // Where the record is kept: a sharded plan's on the id's shard.
            match check.shard(check.pick_for(id), 0) {
                Some((policy, identity)) => {
                    backend.forget_request_id(policy, &identity, id).await?;
                }
                None => {
                    let policy = check.plan.policy();
                    backend
                        .forget_request_id(policy, check.identity, id)
                        .await?;
                }
            }
        }
        if check.cost == 0 {
            return Ok(0);
        }
        let started_ms = self.clock.now_ms();
        if let Some(hot) = check.plan.hot_lease()
            && let Some(unspent) = hot.end(check.identity)
        {
            // The block's unspent units first, exactly (their take is
            // known): the state then counts only what was spent, so the
            // refund cannot hand back units the block still holds.
            let block = StoreCheck {
                policy: check.plan.policy(),
                identity: check.identity,
                cost: unspent.units,
            };
            self.metrics.store_requests.inc();
            let returned = backend.give_back(block, unspent.taken).await;
            hot.given_back(unspent.units, *returned.as_ref().unwrap_or(&0));
            returned?;
        }
        let given = self.give_back_refund(backend, check).await?;
        if let Some(trace) = self.trace() {
            let policy = check.plan.policy().name();
            trace.record_refund(started_ms, policy, check.identity, check.cost);
        }
        if given > 0
            && let Some(hot) = check.plan.hot_lease()
        {
            // Room came back: a block refused before says nothing of now.
            hot.forget_refusal(check.identity);
        }
        Ok(given)
    }

    async fn give_back_refund(
        &self,
        backend: &Backend,
        check: &Check<'_>,
    ) -> Result<u64, StoreError> {
        let shards = check.plan.shards();
        if shards.is_empty() {
            // A leased plan's state is written under its identity's share.
            let share = check.current_share(self.clock.as_ref());
            let whole = StoreCheck {
                policy: share.as_deref().unwrap_or(check.plan.policy()),
                identity: check.identity,
                cost: check.cost,
            };
            return backend.give_back(whole, Taken::REFUND).await;
        }
        let mut given = 0;
        for (i, policy) in shards.iter().enumerate() {
            let (Ok(index), true) = (u16::try_from(i), given < check.cost) else {
                break;
            };
            let identity = check.identity.shard(index);
            let shard = StoreCheck {
                policy,
                identity: &identity,
                cost: check.cost - given,
            };
            given += backend.give_back(shard, Taken::REFUND).await?;
        }
        Ok(given)
    }
}
