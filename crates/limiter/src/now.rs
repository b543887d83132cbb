//! Deciding now, without awaiting: a request whose checks are all on the
//! embedded memory store is decided by the same path as any other
//! ([`Limiter::decide_request`]), polled once. The memory store answers
//! without I/O, so that one poll completes it; a caller gets the
//! [`Decided`] at once and needs no future of its own for the decision (the
//! tower layer answers from `call`). A check on a shared store (Redis)
//! sends the caller to the awaited path.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use tollgate_store::{RequestId, StoreError};

use crate::limiter::{Decided, Limiter};
use crate::plan::Check;

impl Limiter {
    /// [`Limiter::decide_request`], decided now when every check's store
    /// is the embedded memory store; `None`, with nothing decided or
    /// recorded, when some check's store is shared (Redis), for the caller
    /// to await [`Limiter::decide_request`] instead.
    pub fn decide_now(
        &self,
        checks: &[Check<'_>],
        id: Option<&RequestId>,
        shape: Option<&str>,
    ) -> Option<Decided> {
        let on_memory = |c: &Check<'_>| {
            self.backends
                .get(c.plan.store())
                .is_some_and(|backend| !backend.is_shared())
        };
        if !checks.iter().all(on_memory) {
            return None;
        }
        let deciding = pin!(self.decide_request(checks, id, shape));
        match deciding.poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(decided) => Some(decided),
            // Never reached: no step of the memory store's path waits. Were
            // one to, the request is unanswered (an error to its door),
            // never admitted unchecked.
            Poll::Pending => Some(Decided::unanswered(StoreError::Unavailable(
                "the memory store did not decide at once".to_owned(),
            ))),
        }
    }
}
