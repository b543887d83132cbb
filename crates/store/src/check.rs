//! What a store is asked: one check (a policy, an identity, a cost), and
//! what a batch of checks can never fit.

use tollgate_core::{Decision, Identity, Policy};

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
