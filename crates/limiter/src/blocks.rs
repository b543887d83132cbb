//! Hot leases from the limiter's side (docs/config.md, `hot_lease`): a hot
//! identity spends a block of its budget taken in one store decision, and
//! what ended blocks left unspent goes back to the store; one the store
//! refused a block is rejected here until the store's wait for it.

use std::future::Future;
use std::pin::Pin;

use tollgate_store::Replay;

use crate::backend::Backend;
use crate::hot_lease::HotLeases;
use crate::limiter::{Decided, Limiter};
use crate::plan::{Check, Plan};

/// How often the upkeep gives back what ended hot-lease blocks left
/// unspent ([`Limiter::give_back_unspent`]): their units reach the store
/// within this of a block's end.
pub const GIVE_BACK_INTERVAL_MS: u64 = 50;

impl Limiter {
    /// A hot identity's decision from its local block (docs/config.md,
    /// `hot_lease`): spent from a live block, or from a block taken now in
    /// one store decision when the identity decides above the threshold
    /// here, or rejected here while a block the store refused cannot be
    /// had. `None`: decide on the store as usual (no block, not hot, the
    /// store's circuit not closed, or a refusal that could not be kept).
    ///
    /// Blocks live on the monotonic clock: a wall clock stepped back must
    /// not keep a block's units spendable past its term.
    pub(crate) async fn decide_by_block(
        &self,
        backend: &Backend,
        check: &Check<'_>,
        hot: &HotLeases,
    ) -> Option<Decided> {
        if check.cost == 0 {
            return None;
        }
        // Spent from a block the shared store gave: the store's decision.
        let local = |decision| Decided::shared(vec![decision], Replay::Fresh);
        let now_ms = self.clock.monotonic_ms();
        // Every request counts toward the rate, so a block is sized by what
        // the identity really decides here.
        let rate = hot.observe(check.identity, now_ms);
        if let Some(decision) = hot.spend(check.identity, check.cost, now_ms) {
            self.metrics.hot_lease_local.inc();
            return Some(local(decision));
        }
        if rate < hot.rule.above {
            return None;
        }
        // Still hot, and the store refused its last block: no block can be
        // had before the store's wait has passed, so it is not asked.
        let started_us = self.clock.monotonic_us();
        if let Some(decision) = hot.refused(check.identity, check.cost, started_us) {
            self.metrics.hot_lease_refused_local.inc();
            return Some(local(decision));
        }
        if !backend.trusted() || !hot.begin_taking(check.identity, now_ms) {
            return None;
        }
        let block = hot.rule.block(rate).max(check.cost);
        let whole = tollgate_store::Check {
            policy: check.plan.policy(),
            identity: check.identity,
            cost: block,
        };
        self.metrics.store_requests.inc();
        let taken = backend.take(whole).await;
        let answered_us = self.clock.monotonic_us();
        let store_us = Some(answered_us.saturating_sub(started_us));
        let (decision, receipt) = match taken {
            Ok((decision, receipt)) if decision.allowed => (decision, receipt),
            Ok((refused, _)) => {
                // Remembered until a block's worth is back: this request
                // and the identity's next ones are rejected here till then.
                hot.abandon(check.identity);
                let answer = hot
                    .refuse(check.identity, block, &refused, answered_us)
                    .or((block == check.cost).then_some(refused))?;
                return Some(local(answer).timed(store_us));
            }
            Err(error) => {
                // The request decides as usual, under its failure mode.
                hot.abandon(check.identity);
                let fault = Decided::unanswered(error).timed(store_us);
                self.observe_store(check.plan.store(), &fault);
                return None;
            }
        };
        self.metrics.hot_lease_blocks.inc();
        let decision = hot.keep(
            check.identity,
            block,
            check.cost,
            (&decision, receipt),
            now_ms,
        );
        Some(local(decision).timed(store_us))
    }

    /// Gives back what ended hot-lease blocks left unspent (docs/config.md,
    /// `hot_lease`), for every plan of `plans`: one store call a block,
    /// each bounded by the store's timeout. `stopping`: every block ends
    /// now. Counted as returned, or lost where the store did not take them.
    ///
    /// Type-erased: the store calls' futures are deep, and the server's
    /// future, which awaits this one, would otherwise nest them all.
    pub fn give_back_unspent<'a>(
        &'a self,
        plans: &'a [&'a Plan],
        stopping: bool,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(self.give_back_all(plans, stopping))
    }

    async fn give_back_all(&self, plans: &[&Plan], stopping: bool) {
        let now_ms = self.clock.monotonic_ms();
        for plan in plans {
            let Some(hot) = plan.hot_lease() else {
                continue;
            };
            let unspent = if stopping {
                hot.take_all_unspent()
            } else {
                hot.take_unspent(now_ms)
            };
            let Some(backend) = self.backends.get(plan.store()) else {
                unspent.iter().for_each(|u| hot.given_back(u.units, 0));
                continue;
            };
            for u in unspent {
                let check = tollgate_store::Check {
                    policy: plan.policy(),
                    identity: &u.identity,
                    cost: u.units,
                };
                self.metrics.store_requests.inc();
                let given = match backend.give_back(check, u.taken).await {
                    Ok(given) => given,
                    Err(error) => {
                        tracing::debug!(policy = plan.policy().name(), %error, "a hot-lease give-back failed: its units are lost");
                        0
                    }
                };
                hot.given_back(u.units, given);
            }
        }
    }
}
