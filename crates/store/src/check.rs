//! The store seam: checks in, decisions out.

use std::future::Future;

use tollgate_core::{Decision, Identity, Policy};

use crate::{Retried, Retry, StoreError};

/// One question for a store: may `identity` spend `cost` under `policy` now?
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// The limit to decide under; its name and algorithm are part of the key.
    pub policy: &'a Policy,
    /// Whose quota is spent.
    pub identity: &'a Identity,
    /// Units to spend; 0 is a peek that consumes nothing.
    pub cost: u64,
}

/// Somewhere decisions are made atomically, on the store's own clock.
pub trait Store: Send + Sync + 'static {
    /// Decides one check, consuming its cost when admitted.
    fn decide(&self, check: Check<'_>)
    -> impl Future<Output = Result<Decision, StoreError>> + Send;

    /// Decides every check all-or-nothing: when any is rejected nothing is
    /// consumed, and each decision says what that check alone would get
    /// (a check that fails only because an earlier check of the batch took
    /// from the same key reports that failure). The batch is admitted iff
    /// every decision is. Decisions come back in the order of `checks`.
    fn decide_all(
        &self,
        checks: &[Check<'_>],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send;

    /// Decides every check all-or-nothing, as [`Store::decide_all`], under a
    /// request id: when `retry.id` is recorded beside the first check's
    /// state for the same request (`retry.request`) and inside its window,
    /// nothing is consumed and the call answers admitted again
    /// ([`crate::Replay::Replayed`]); recorded for any other request it is
    /// refused ([`crate::Replay::Mismatch`]).
    /// Otherwise the checks are decided and, when all admit, the id is
    /// recorded in the same atomic step (crate::request_id).
    fn decide_once(
        &self,
        checks: &[Check<'_>],
        retry: Retry<'_>,
    ) -> impl Future<Output = Result<Retried, StoreError>> + Send;
}

/// The checks of a batch that can never pass within it: those whose key's
/// costs in the batch, up to and including their own, sum above the
/// policy's limit (one identity's costs, e.g. 3 + 3 under a limit of 5).
/// Usually none, and then nothing is allocated.
pub(crate) fn never_fit_in_batch(checks: &[Check<'_>]) -> Vec<usize> {
    let mut never = Vec::new();
    for (i, check) in checks.iter().enumerate() {
        let limit = check.policy.limits().limit();
        let mut total = check.cost;
        for earlier in &checks[..i] {
            if total > limit {
                break;
            }
            if same_key(earlier, check) {
                total = total.saturating_add(earlier.cost);
            }
        }
        if total > limit && check.cost <= limit {
            never.push(i);
        }
    }
    never
}

/// A rejected check of [`never_fit_in_batch`] has no retry time: waiting
/// admits the same batch never, as a single cost above the limit
/// (docs/design.md §3).
pub(crate) fn mark_never_fits(never: &[usize], decisions: &mut [Decision]) {
    for &i in never {
        if let Some(d) = decisions.get_mut(i).filter(|d| !d.allowed) {
            d.retry_after_ms = None;
        }
    }
}

/// The same stored key: policy name, algorithm and identity.
pub(crate) fn same_key(a: &Check<'_>, b: &Check<'_>) -> bool {
    a.policy.name() == b.policy.name()
        && a.policy.algorithm() == b.policy.algorithm()
        && a.identity == b.identity
}
