//! What the limiter does besides deciding: an operator's reset, lease
//! renewals, the periodic sweep, the store gauges and readiness.

use tollgate_core::Identity;
use tollgate_store::{LeaseWant, MAX_IDENTITIES_A_CALL, StoreError, StoreStats};

use crate::lease::Lease;
use crate::limiter::Limiter;
use crate::plan::Plan;

impl Limiter {
    /// Forgets `plan`'s state for `identity` — an operator's reset: the
    /// identity starts afresh, on every shard when the plan is sharded.
    /// Whether there was a state.
    pub async fn forget(&self, plan: &Plan, identity: &Identity) -> Result<bool, StoreError> {
        let store = plan.store();
        let Some(backend) = self.backends.get(store) else {
            return Err(StoreError::Config(format!("no store {store}")));
        };
        if let Some(hot) = plan.hot_lease() {
            // A block refused before the reset says nothing about after.
            hot.forget_refusal(identity);
        }
        if plan.shards().is_empty() {
            return backend.forget(plan.policy(), identity).await;
        }
        let mut existed = false;
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

    /// Refreshes the store gauges (at scrape time): keys, evictions and
    /// the cache's shield summed over the stores, the worst circuit.
    pub fn maintain_gauges(&self) {
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let mut all = StoreStats::default();
        for backend in &self.backends {
            let s = backend.stats();
            all.keys += s.keys;
            all.evictions += s.evictions;
            all.circuit = all.circuit.max(s.circuit);
            all.answered_locally += s.answered_locally;
            all.script_calls += s.script_calls;
        }
        self.metrics.store_keys.set(gauge(all.keys));
        self.metrics.store_evictions.set(gauge(all.evictions));
        self.metrics.circuit_state.set(all.circuit);
        self.metrics
            .rejected_cache_answers
            .set(gauge(all.answered_locally));
        self.metrics.store_script_calls.set(gauge(all.script_calls));
    }

    /// Whether every store answers right now (a bounded ping each),
    /// recorded in `tollgate_store_up`.
    pub async fn store_answers(&self) -> Result<(), StoreError> {
        let mut answered = Ok(());
        for backend in &self.backends {
            answered = answered.and(backend.ping().await);
        }
        self.metrics.store_up.set(i64::from(answered.is_ok()));
        answered
    }
}
