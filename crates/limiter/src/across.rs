//! A request whose checks span stores: decided store by store in the
//! config's order (local, regional, global), all or nothing within each;
//! once one store rejects, the later ones are only peeked at, and what
//! each check there would get is told from the peek (and counted as its
//! verdict).

use tollgate_core::Decision;
use tollgate_store::{DecidedBy, Decisions, Replay, RequestDigest, RequestId};

use crate::limiter::{Decided, Limiter, worse};
use crate::plan::Check;

impl Limiter {
    /// Checks on several stores, store by store in order; after a
    /// rejection the later stores only peek (cost 0, not counted). Under a
    /// request id each store keeps its own record, so a request rejected
    /// by a later store has its retry charged there only; it reads
    /// replayed when every store replayed it.
    pub(crate) async fn decide_across(
        &self,
        checks: &[Check<'_>],
        id: Option<(&RequestId, RequestDigest)>,
    ) -> Decided {
        let mut decisions: Vec<Option<Decision>> = vec![None; checks.len()];
        let mut by = DecidedBy::Shared;
        let mut error = None;
        let mut store_us: Option<u64> = None;
        let mut rejected = false;
        let mut replayed = id.is_some();
        for store in 0..self.backends.len() {
            let at: Vec<usize> = (0..checks.len())
                .filter(|&i| checks[i].plan.store() == store)
                .collect();
            if at.is_empty() {
                continue;
            }
            let group: Vec<Check<'_>> = at
                .iter()
                .map(|&i| match rejected {
                    false => checks[i],
                    true => checks[i].peek(),
                })
                .collect();
            let mut decided = self
                .decide_on(store, &group, if rejected { None } else { id })
                .await;
            if rejected {
                would_get(
                    &at.iter().map(|&i| checks[i].cost).collect::<Vec<_>>(),
                    &mut decided,
                );
                // Peeks count nothing; each check's verdict is counted as
                // a batch's checks on one store are.
                if decided.decisions.len() == at.len() {
                    let verdicts: Vec<Check<'_>> = at.iter().map(|&i| checks[i]).collect();
                    self.count_verdicts(&verdicts, &decided);
                }
            }
            if decided.replay == Replay::Mismatch {
                return decided;
            }
            replayed &= decided.replay == Replay::Replayed;
            if decided.decisions.len() != at.len() {
                decided.decisions.clear();
                return decided.timed(store_us);
            }
            rejected |= !decided.decisions.iter().all(|d| d.allowed);
            by = worse(by, decided.by);
            error = error.or(decided.error);
            if let Some(ms) = decided.store_us {
                store_us = Some(store_us.unwrap_or(0) + ms);
            }
            for (&i, decision) in at.iter().zip(decided.decisions) {
                decisions[i] = Some(decision);
            }
        }
        let replay = if replayed {
            Replay::Replayed
        } else {
            Replay::Fresh
        };
        Decided::new(by, decisions.into_iter().flatten().collect::<Decisions>())
            .with_error(error)
            .timed(store_us)
            .with_replay(replay)
    }
}

/// A later store's peeks, after an earlier store rejected the request,
/// as what each check's cost alone would get (docs/http-api.md, Batches):
/// a cost above what is left is rejected, its wait the time until the
/// quota is fully restored — never early, as the store was only peeked
/// (late by at most that) — or none when the cost is above the limit. A
/// degraded admission that claims nothing is left (`fail_open`: remaining
/// and reset 0) admits any cost: left as it is.
fn would_get(costs: &[u64], decided: &mut Decided) {
    let degraded = decided.by.is_degraded();
    for (&cost, decision) in costs.iter().zip(decided.decisions.iter_mut()) {
        let claims_nothing = degraded && decision.remaining == 0 && decision.reset_after_ms == 0;
        let left = u64::try_from(decision.remaining).unwrap_or(0);
        if decision.allowed && !claims_nothing && cost > left {
            decision.allowed = false;
            decision.retry_after_ms =
                (cost <= decision.limit).then_some(decision.reset_after_ms.max(1));
        }
    }
}
