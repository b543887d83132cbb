//! What the limiter does besides deciding: an operator's reset, lease
//! renewals, the periodic sweep, the store gauges and readiness, and the
//! one call that keeps sweeps, give-backs and renewals running
//! ([`Limiter::upkeep`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;
use tollgate_core::Identity;
use tollgate_store::{LeaseWant, MAX_IDENTITIES_A_CALL, StoreError};

use crate::blocks::GIVE_BACK_INTERVAL_MS;
use crate::lease::Lease;
use crate::limiter::Limiter;
use crate::plan::Plan;
use crate::stores::StoreHealth;

/// How often idle keys are swept from the memory stores and the local
/// fallbacks ([`Limiter::sweep`]).
pub const SWEEP_INTERVAL_MS: u64 = 1_000;
/// How often the lease keeper looks for due renewals when none is due
/// sooner (a reload may add one).
const IDLE_LOOK_MS: u64 = 1_000;
/// The lease keeper never spins faster than this.
const LEAST_SLEEP_MS: u64 = 5;

/// The plans an upkeep keeps, read afresh at every turn: a server that
/// reloads its config hands out the current ones.
pub trait KeptPlans: Send + Sync + 'static {
    /// Every plan whose hot-lease blocks are given back and whose lease
    /// is renewed (a plan with neither costs the upkeep nothing).
    fn plans(&self) -> Vec<&Plan>;

    /// The store leases are renewed on (their ledger: the global store);
    /// `None`: no lease is renewed.
    fn ledger(&self) -> Option<usize>;
}

/// Reads the current plans.
type Current = Arc<dyn Fn() -> Arc<dyn KeptPlans> + Send + Sync>;

/// The running upkeep of [`Limiter::upkeep`]. Dropped, every loop stops
/// (a renewal or give-back in flight is abandoned); [`UpkeepHandle::stop`]
/// also gives back what the blocks hold.
pub struct UpkeepHandle {
    tasks: JoinSet<()>,
    limiter: Arc<Limiter>,
    current: Current,
}

impl UpkeepHandle {
    /// Stops every loop, then gives back every hot-lease block's unspent
    /// units now: what a process stopping holds ends with it.
    pub async fn stop(mut self) {
        self.tasks.abort_all();
        let plans = (self.current)();
        self.limiter.give_back_unspent(&plans.plans(), true).await;
    }
}

impl Limiter {
    /// Starts the upkeep of the plans `current` reads at each turn, on
    /// this tokio runtime: idle keys swept every [`SWEEP_INTERVAL_MS`],
    /// unspent hot-lease blocks given back every
    /// [`GIVE_BACK_INTERVAL_MS`], each lease renewed when due. Runs until
    /// its handle is dropped or stopped. What is due is read on the
    /// limiter's clock (lease terms on its monotonic time); the waits
    /// between turns are tokio's timers.
    pub fn upkeep<P: KeptPlans>(
        self: &Arc<Self>,
        current: impl Fn() -> Arc<P> + Send + Sync + 'static,
    ) -> UpkeepHandle {
        let current: Current = Arc::new(move || current() as Arc<dyn KeptPlans>);
        let mut tasks = JoinSet::new();
        tasks.spawn(sweep_loop(Arc::clone(self)));
        tasks.spawn(give_back_loop(Arc::clone(self), Arc::clone(&current)));
        tasks.spawn(lease_loop(Arc::clone(self), Arc::clone(&current)));
        UpkeepHandle {
            tasks,
            limiter: Arc::clone(self),
            current,
        }
    }

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

/// Sweeps idle keys on every tick.
async fn sweep_loop(limiter: Arc<Limiter>) {
    let mut tick = tokio::time::interval(Duration::from_millis(SWEEP_INTERVAL_MS));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        limiter.sweep();
    }
}

/// Gives back what ended blocks left unspent, on every tick.
async fn give_back_loop(limiter: Arc<Limiter>, current: Current) {
    let mut tick = tokio::time::interval(Duration::from_millis(GIVE_BACK_INTERVAL_MS));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let plans = current();
        limiter.give_back_unspent(&plans.plans(), false).await;
    }
}

/// Renews every lease on its period (a reload's new leases are picked up
/// at the next turn). Each renewal is its own task, so one slow ledger
/// call delays no other; they end with this loop.
async fn lease_loop(limiter: Arc<Limiter>, current: Current) {
    let mut renewals = JoinSet::new();
    loop {
        while renewals.try_join_next().is_some() {}
        let now_ms = limiter.clock().monotonic_ms();
        let mut next_ms = now_ms.saturating_add(IDLE_LOOK_MS);
        let plans = current();
        if let Some(ledger) = plans.ledger() {
            for lease in plans.plans().into_iter().filter_map(Plan::lease) {
                if lease.due(now_ms) {
                    // Scheduled before the call, so the next turn skips it.
                    lease.schedule(now_ms);
                    let (limiter, lease) = (Arc::clone(&limiter), Arc::clone(lease));
                    renewals.spawn(async move { limiter.renew(&lease, ledger).await });
                }
                next_ms = next_ms.min(lease.next_due_ms());
            }
        }
        drop(plans);
        let sleep_ms = next_ms.saturating_sub(now_ms).max(LEAST_SLEEP_MS);
        tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
    }
}
