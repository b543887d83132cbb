//! The decision trait above [`Limiter`]: what a door or a service needs
//! of whatever decides its checks — this process's limiter, or a remote
//! tollgate asked over HTTP — so a layer takes either one.

use std::future::Future;
use std::sync::Arc;

use crate::limiter::{Decided, Limiter};
use crate::plan::Check;

/// Decides a request's checks, all or nothing: nothing is spent unless
/// every check admits. A store that cannot decide answers by each plan's
/// failure mode (marked in [`Decided::by`]), never by an error: the
/// caller always has an answer to give.
pub trait Decider: Send + Sync + 'static {
    /// One decision per check, in the checks' order.
    fn decide(&self, checks: &[Check<'_>]) -> impl Future<Output = Decided> + Send;
}

impl Decider for Limiter {
    fn decide(&self, checks: &[Check<'_>]) -> impl Future<Output = Decided> + Send {
        Limiter::decide(self, checks)
    }
}

/// A shared decider decides as the one it points to.
impl<D: Decider> Decider for Arc<D> {
    fn decide(&self, checks: &[Check<'_>]) -> impl Future<Output = Decided> + Send {
        D::decide(self, checks)
    }
}
