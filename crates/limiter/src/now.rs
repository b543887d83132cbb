//! Deciding now, without awaiting: a request whose checks are all on the
//! embedded memory store is decided by the same path as any other
//! ([`Limiter::decide_request`]), polled once. The memory store answers
//! without I/O, so that one poll completes it; a caller gets the
//! [`Decided`] at once and needs no future of its own for the decision (the
//! tower layer answers from `call`). A check on a shared store (Redis)
//! sends the caller to the awaited path.
//!
//! A plain request (no request id, no shadow-mode, leased, sharded, hot
//! or reloaded-layout plan, no spans, one memory store) skips even that
//! poll: its checks go straight to the store's synchronous decision and
//! the same records the awaited path keeps (crate::recorded), with no
//! future built, moved or polled through the layers of the general path.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use smallvec::SmallVec;
use tollgate_store::{GuardedCheck, MemoryStore, RequestId, StoreError};

use crate::backend::Backend;
use crate::limiter::{Decided, Limiter};
use crate::plan::Check;
use crate::spans;

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
        if id.is_none()
            && let Some((store, memory)) = self.plain_on(checks)
        {
            return Some(self.decide_plain(store, memory, checks));
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

impl Limiter {
    /// The one memory store every check of a plain request is on, with its
    /// index; `None` when any check needs more than one store call.
    fn plain_on(&self, checks: &[Check<'_>]) -> Option<(usize, &MemoryStore)> {
        let store = checks.first()?.plan.store();
        let plain = |c: &Check<'_>| {
            let plan = c.plan;
            plan.store() == store
                && !plan.shadow()
                && plan.lease().is_none()
                && plan.hot_lease().is_none()
                && plan.shards().len() <= 1
                && plan.carries_layouts() == 0
        };
        if spans::spans_on() || !checks.iter().all(plain) {
            return None;
        }
        match self.backends.get(store)? {
            Backend::Memory(memory) => Some((store, memory)),
            #[cfg(feature = "redis")]
            _ => None,
        }
    }

    /// A plain request decided on `memory` (store `store`): what
    /// [`Limiter::decide_request`] would do, without its future.
    ///
    /// The clock is read twice, at the start and for the latency at the
    /// end: the start's reading dates the decision and, when the store
    /// keeps time by the same clock, is the store's own (a read of the
    /// TSC is some 10 ns, a third of a hot key's whole decision).
    fn decide_plain(&self, store: usize, memory: &MemoryStore, checks: &[Check<'_>]) -> Decided {
        let (now_ms, started_us) = self.clock.now_ms_and_monotonic_us();
        let started_ms = self.trace().map(|_| now_ms);
        self.metrics.store_requests.inc();
        let decide = |guarded: &[GuardedCheck<'_>]| {
            if memory.keeps_time_by(&self.clock) {
                memory.decide_guarded_at(guarded, now_ms, started_us / 1_000)
            } else {
                memory.decide_guarded(guarded, None)
            }
        };
        // One check, the common case, is decided where it lies: a list of
        // them would be built and then moved.
        let decided = match checks {
            [one] => decide(std::slice::from_ref(&one.guarded(None, None))),
            _ => decide(
                &checks
                    .iter()
                    .map(|c| c.guarded(None, None))
                    .collect::<SmallVec<[GuardedCheck<'_>; 4]>>(),
            ),
        };
        let decided = self.record_store_call(store, checks, decided, now_ms);
        self.record_request(checks, &decided, started_us, started_ms);
        decided
    }
}
