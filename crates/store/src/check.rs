//! The store seam: checks in, decisions out.

use std::future::Future;

use tollgate_core::{Decision, Identity, Policy};

use crate::StoreError;

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
}
