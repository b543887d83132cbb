//! Releasing a permit: the end of a request a concurrency check admitted.
//! A door that sees its request end (the tower layer, `/v1/release`)
//! hands the permit back to the plan's store; a permit never released
//! frees itself when its lease ends.

use thiserror::Error;
use tollgate_core::{Identity, PermitId, Released};
use tollgate_store::StoreError;

use crate::limiter::Limiter;
use crate::plan::Plan;

/// Why a release could not be answered. Nothing changed; the permit, if
/// held, stays held until it is released or its lease ends.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReleaseError {
    /// The plan's policy is a rate: it holds no permits.
    #[error("policy {policy:?} is not a concurrency policy: it holds no permits")]
    NotConcurrency {
        /// The policy's name.
        policy: String,
    },
    /// The plan's store could not be asked.
    #[error("the store could not release the permit: {0}")]
    Store(#[from] StoreError),
    /// The release could not reach a remote tollgate, or was refused by it.
    #[error("the remote tollgate did not release the permit: {0}")]
    Remote(String),
}

impl Limiter {
    /// Frees `permit`, held under `plan`'s policy by `identity`: `Ok(true)`
    /// when it was held and is free now; `Ok(false)` when it was never
    /// acquired, was already released, or its lease had ended.
    pub async fn release(
        &self,
        plan: &Plan,
        identity: &Identity,
        permit: PermitId,
    ) -> Result<bool, ReleaseError> {
        let policy = plan.policy();
        if !policy.limits().holds_permits() {
            return Err(ReleaseError::NotConcurrency {
                policy: policy.name().to_owned(),
            });
        }
        let Some(backend) = self.backends.get(plan.store()) else {
            return Err(StoreError::Config(format!("no store {}", plan.store())).into());
        };
        let freed = backend.release(policy, identity, permit).await? == Released::Freed;
        self.metrics.permits.released(policy, permit, freed);
        Ok(freed)
    }
}
