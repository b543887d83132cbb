//! What the limiter does besides deciding: an operator's reset, lease
//! renewals, the periodic sweep, the store gauges and readiness.

use tollgate_core::Identity;
use tollgate_store::{LeaseWant, MAX_IDENTITIES_A_CALL, StoreError};

use crate::lease::Lease;
use crate::limiter::Limiter;
use crate::plan::Plan;
use crate::stores::StoreHealth;

impl Limiter {
    /// Forgets `plan`'s state for `identity` — an operator's reset: the
    /// identity starts afresh, on every shard when the plan is sharded, and
    /// on the shard layouts a reload left it reading (crate::carry).
    /// Whether there was a state.
    pub async fn forget(&self, plan: &Plan, identity: &Identity) -> Result<bool, StoreError> {
        let store = plan.store();
        let Some(backend) = self.backends.get(store) else {
            return Err(StoreError::Config(format!("no store {store}")));
        };
        if let Some(hot) = plan.hot_lease() {
            // A block refused before the reset says nothing about after;
            // a block held was taken from the state now forgotten, and
            // spent on would add to the fresh quota: its units are lost.
            hot.forget_refusal(identity);
            if let Some(unspent) = hot.end(identity) {
                hot.given_back(unspent.units, 0);
            }
        }
        let mut existed = false;
        for (policy, old) in plan.carried_keys_of(identity) {
            existed |= backend.forget(policy, &old).await?;
        }
        if plan.shards().is_empty() {
            return Ok(backend.forget(plan.policy(), identity).await? || existed);
        }
        for (index, shard) in plan.shards().iter().enumerate() {
            let id = u16::try_from(index).unwrap_or(u16::MAX);
            existed |= backend.forget(shard, &identity.shard(id)).await?;
        }
        Ok(existed)
    }

    /// Renews `lease`'s identities that want more than their floor with
    /// their ledger on store `ledger` (the global one): one bounded script
    /// call per [`MAX_IDENTITIES_A_CALL`] of them, none when every identity
    /// is within its floor. A grant is spent from when its call was sent
    /// until a term later, on the monotonic clock: a wall clock stepped
    /// back or forward changes nothing about when it ends.
    pub async fn renew(&self, lease: &Lease, ledger: usize) {
        let wanting = lease.begin(self.clock.monotonic_ms());
        for part in wanting.chunks(MAX_IDENTITIES_A_CALL) {
            let wants: Vec<LeaseWant<'_>> = part
                .iter()
                .map(|w| LeaseWant {
                    identity: &w.identity,
                    demand: w.demand,
                })
                .collect();
            let ask = lease.ask(&wants);
            let sent_ms = self.clock.monotonic_ms();
            let answer = match self.backends.get(ledger) {
                Some(backend) => backend.lease(&ask).await,
                None => Err(StoreError::Config(format!("no store {ledger}"))),
            };
            if let Err(e) = &answer {
                tracing::debug!(policy = ask.policy, error = %e, "a lease renewal failed");
            }
            lease.settle(part, sent_ms, self.clock.monotonic_ms(), &answer);
        }
    }

    /// Periodic upkeep: expire idle keys (Redis expires its own by TTL).
    pub fn sweep(&self) {
        for backend in &self.backends {
            backend.sweep();
        }
    }

    /// Reads each store's gauges and since-start counts into its series
    /// (at scrape time).
    pub fn maintain_gauges(&self) {
        for (index, backend) in self.backends.iter().enumerate() {
            self.metrics.stores.read(index, backend.stats());
        }
    }

    /// Each store's answer to a bounded ping, in the config's order,
    /// recorded in its `tollgate_store_up` series. A store answering again
    /// after failures is logged once.
    pub async fn store_answers(&self) -> Vec<StoreHealth> {
        let mut health = Vec::with_capacity(self.backends.len());
        for (index, (backend, watch)) in self.backends.iter().zip(&self.stores).enumerate() {
            let answer = backend.ping().await;
            self.metrics.stores.set_up(index, answer.is_ok());
            match &answer {
                Ok(()) => watch.answered(&*self.clock),
                Err(_) => watch.failed(self.clock.monotonic_ms()),
            }
            health.push(StoreHealth {
                name: watch.name.clone(),
                shared: backend.is_shared(),
                answer,
            });
        }
        health
    }
}
