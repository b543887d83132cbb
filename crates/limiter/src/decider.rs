//! The decision trait above [`Limiter`]: what a door or a service needs
//! of whatever decides its checks — this process's limiter, or a remote
//! tollgate asked over HTTP — so a layer takes either one.

use std::future::Future;
use std::sync::Arc;

use tollgate_core::{Identity, PermitId};
use tollgate_store::RequestId;

use crate::limiter::{Decided, Limiter};
use crate::plan::{Check, Plan};
use crate::release::ReleaseError;

/// Decides a request's checks, all or nothing: nothing is spent unless
/// every check admits. A store that cannot decide answers by each plan's
/// failure mode (marked in [`Decided::by`](tollgate_store::GuardedDecisions::by));
/// a plan without one leaves the request unanswered (no decisions, the
/// store's error kept), which the door answers as an error, never as an
/// admission.
pub trait Decider: Send + Sync + 'static {
    /// One decision per check, in the checks' order; under `id` (an
    /// `Idempotency-Key`), a retry of the same request inside its
    /// policy's retry window is answered from the record, not charged again.
    /// `shape` is what the caller knows of the request beyond its checks
    /// (a method and normalized path): the id is bound to it too, so it
    /// never admits another route's request from its record.
    fn decide_request(
        &self,
        checks: &[Check<'_>],
        id: Option<&RequestId>,
        shape: Option<&str>,
    ) -> impl Future<Output = Decided> + Send;

    /// [`Decider::decide_request`] decided now, without awaiting, when
    /// this decider can (the in-process limiter on the embedded memory
    /// store, which answers without I/O); `None`, having decided and
    /// recorded nothing, when the caller must await
    /// [`Decider::decide_request`] (Redis, a remote tollgate). The default
    /// never decides now.
    fn decide_now(
        &self,
        checks: &[Check<'_>],
        id: Option<&RequestId>,
        shape: Option<&str>,
    ) -> Option<Decided> {
        let _ = (checks, id, shape);
        None
    }

    /// [`Decider::decide_request`] without a request id.
    fn decide(&self, checks: &[Check<'_>]) -> impl Future<Output = Decided> + Send {
        self.decide_request(checks, None, None)
    }

    /// Frees `permit` that an admitted concurrency check under `plan`
    /// handed `identity` ([`Decision::permit`](tollgate_core::Decision)):
    /// `Ok(true)` when it was held, `Ok(false)` when it was unknown,
    /// already released or expired.
    fn release(
        &self,
        plan: &Plan,
        identity: &Identity,
        permit: PermitId,
    ) -> impl Future<Output = Result<bool, ReleaseError>> + Send;
}

impl Decider for Limiter {
    fn decide_request(
        &self,
        checks: &[Check<'_>],
        id: Option<&RequestId>,
        shape: Option<&str>,
    ) -> impl Future<Output = Decided> + Send {
        Limiter::decide_request(self, checks, id, shape)
    }

    fn decide_now(
        &self,
        checks: &[Check<'_>],
        id: Option<&RequestId>,
        shape: Option<&str>,
    ) -> Option<Decided> {
        Limiter::decide_now(self, checks, id, shape)
    }

    fn release(
        &self,
        plan: &Plan,
        identity: &Identity,
        permit: PermitId,
    ) -> impl Future<Output = Result<bool, ReleaseError>> + Send {
        Limiter::release(self, plan, identity, permit)
    }
}

/// A shared decider decides as the one it points to.
impl<D: Decider> Decider for Arc<D> {
    fn decide_request(
        &self,
        checks: &[Check<'_>],
        id: Option<&RequestId>,
        shape: Option<&str>,
    ) -> impl Future<Output = Decided> + Send {
        D::decide_request(self, checks, id, shape)
    }

    fn decide_now(
        &self,
        checks: &[Check<'_>],
        id: Option<&RequestId>,
        shape: Option<&str>,
    ) -> Option<Decided> {
        D::decide_now(self, checks, id, shape)
    }

    fn release(
        &self,
        plan: &Plan,
        identity: &Identity,
        permit: PermitId,
    ) -> impl Future<Output = Result<bool, ReleaseError>> + Send {
        D::release(self, plan, identity, permit)
    }
}
