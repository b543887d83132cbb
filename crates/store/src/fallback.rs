//! Failure is a policy (docs/design.md §6). [`Guarded`] puts a shared store
//! behind a circuit breaker and, when the store cannot decide, decides each
//! check as its policy declared: admit (`fail_open`), reject (`fail_closed`),
//! or spend an in-process budget, a stated share of the limit (`local`).
//! Every decision says what made it ([`DecidedBy`]), so degraded ones can
//! be marked.

use std::sync::Arc;

use tollgate_core::{Clock, Decision, Limits, Policy, Rate, Window};

use crate::breaker::{Admission, BreakerConfig, CircuitBreaker, CircuitState};
use crate::{Check, MemoryStore, MemoryStoreConfig, Replay, Retry, Store, StoreError};

/// What a policy does when the shared store cannot decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnStoreFailure {
    /// Admit: read-only APIs, where an outage must not become one.
    #[default]
    FailOpen,
    /// Reject: authentication and other abuse-sensitive endpoints.
    FailClosed,
    /// Enforce `share_percent`% of the limit in this process until the store
    /// is back. Worst case while degraded: instances × share × limit.
    Local {
        /// The share of the limit, 1 to 100, each process may spend alone.
        share_percent: u8,
    },
}

impl OnStoreFailure {
    /// The config spelling, also used in `tollgate explain` and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            OnStoreFailure::FailOpen => "fail_open",
            OnStoreFailure::FailClosed => "fail_closed",
            OnStoreFailure::Local { .. } => "local",
        }
    }
}

/// What made a decision: the shared store, or one of the failure modes.
/// (Its metric label and JSON field keep the name `path`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidedBy {
    /// The shared store decided: exact.
    Shared,
    /// The store failed and the policy admits: degraded.
    FailOpen,
    /// The store failed and the policy rejects: degraded.
    FailClosed,
    /// The store failed and this process's share of the limit decided: degraded.
    Local,
}

impl DecidedBy {
    /// Whether the decision is to be marked and counted as degraded.
    pub fn is_degraded(self) -> bool {
        self != DecidedBy::Shared
    }
    /// The metric label and log spelling.
    pub fn name(self) -> &'static str {
        match self {
            DecidedBy::Shared => "shared",
            DecidedBy::FailOpen => "fail_open",
            DecidedBy::FailClosed => "fail_closed",
            DecidedBy::Local => "local",
        }
    }
}

/// A check with what to do when the store fails.
#[derive(Debug, Clone, Copy)]
pub struct GuardedCheck<'a> {
    /// What the shared store is asked.
    pub check: Check<'a>,
    /// The check's policy's declared failure mode.
    pub on_failure: OnStoreFailure,
    /// For `Local`: the policy scaled to its share (see [`local_policy`]).
    pub local_policy: Option<&'a Policy>,
}

/// The decisions of one request, with what made them.
#[derive(Debug, Clone)]
pub struct GuardedDecisions {
    /// One per check, in the order of the checks.
    pub decisions: Vec<Decision>,
    /// What made them; all of a request's checks take the same one.
    pub by: DecidedBy,
    /// Why the shared store did not decide (`None` when it did, or when an
    /// open circuit skipped it).
    pub error: Option<StoreError>,
    /// How long the shared store took, in µs of the monotonic clock, when
    /// it was called.
    pub store_us: Option<u64>,
    /// What the request id made of the call ([`Replay::Fresh`] without
    /// one). A fallback that admits or rejects without a store knows no
    /// ids; a local budget records them in its own memory.
    pub replay: Replay,
}

impl GuardedDecisions {
    /// `decisions` made by `by`: fresh, no store error or latency known.
    pub fn new(by: DecidedBy, decisions: Vec<Decision>) -> Self {
        Self {
            decisions,
            by,
            error: None,
            store_us: None,
            replay: Replay::Fresh,
        }
    }

    /// Decided by the shared store; `replay`: what the request id made of
    /// the call (a replayed one consumed nothing).
    pub fn shared(decisions: Vec<Decision>, replay: Replay) -> Self {
        Self::new(DecidedBy::Shared, decisions).with_replay(replay)
    }

    /// Admitted without the store (`fail_open`).
    pub fn fail_open(decisions: Vec<Decision>) -> Self {
        Self::new(DecidedBy::FailOpen, decisions)
    }

    /// Rejected without the store (`fail_closed`).
    pub fn fail_closed(decisions: Vec<Decision>) -> Self {
        Self::new(DecidedBy::FailClosed, decisions)
    }

    /// Decided on this process's share of the limits (`local`), which
    /// keeps request ids in its own memory.
    pub fn local(decisions: Vec<Decision>, replay: Replay) -> Self {
        Self::new(DecidedBy::Local, decisions).with_replay(replay)
    }

    /// No decision: the store could not make one and nothing answers in
    /// its place; `error` says why.
    pub fn unanswered(error: StoreError) -> Self {
        Self::new(DecidedBy::Shared, Vec::new()).with_error(Some(error))
    }

    /// The same, with what the request id made of the call.
    pub fn with_replay(self, replay: Replay) -> Self {
        Self { replay, ..self }
    }

    /// The same, with why the shared store did not decide.
    pub fn with_error(self, error: Option<StoreError>) -> Self {
        Self { error, ..self }
    }

    /// The same, with how long the shared store took (µs, monotonic).
    pub fn timed(self, store_us: Option<u64>) -> Self {
        Self { store_us, ..self }
    }
}

/// How long a fail-closed rejection tells the client to wait.
pub const FAIL_CLOSED_RETRY_MS: u64 = 1_000;

/// A shared store behind a circuit breaker with per-policy fallbacks.
pub struct Guarded<S> {
    shared: S,
    local: MemoryStore,
    breaker: CircuitBreaker,
    clock: Arc<dyn Clock>,
}

impl<S: Store> Guarded<S> {
    /// `clock` times the breaker (on its monotonic clock) and the local
    /// budgets (on its wall clock); `local_keys` bounds
    /// the local fallback's memory.
    pub fn new(
        shared: S,
        breaker: BreakerConfig,
        clock: Arc<dyn Clock>,
        local_keys: usize,
    ) -> Self {
        Self {
            shared,
            local: MemoryStore::new(
                Arc::clone(&clock),
                MemoryStoreConfig {
                    max_keys: local_keys,
                    ..MemoryStoreConfig::default()
                },
            ),
            breaker: CircuitBreaker::new(breaker),
            clock,
        }
    }

    /// The wrapped store, for what the guard does not cover (readiness, stats).
    pub fn shared(&self) -> &S {
        &self.shared
    }

    /// The breaker's state, for the circuit gauge and readiness.
    pub fn circuit(&self) -> CircuitState {
        self.breaker.state()
    }

    /// Keys held by the local fallback, for its memory gauge.
    pub fn local_keys(&self) -> usize {
        self.local.key_count()
    }

    /// Forgets the local fallback's state of `policy` for `identity`.
    pub fn forget_local(&self, policy: &Policy, identity: &tollgate_core::Identity) -> bool {
        self.local.forget(policy, identity)
    }

    /// Forgets request id `id` recorded by the local fallback with
    /// `policy`'s state of `identity`.
    pub fn forget_local_request_id(
        &self,
        policy: &Policy,
        identity: &tollgate_core::Identity,
        id: &crate::RequestId,
    ) {
        self.local.forget_request_id(policy, identity, id);
    }

    /// Expires idle local-fallback keys.
    pub fn sweep(&self) {
        self.local.sweep();
    }

    /// Decides every check all-or-nothing: on the shared store when it
    /// answers, else by each check's declared failure mode. With `retry`,
    /// under a request id ([`Store::decide_once`]).
    pub async fn decide_all(
        &self,
        checks: &[GuardedCheck<'_>],
        retry: Option<Retry<'_>>,
    ) -> GuardedDecisions {
        // The breaker's durations run on the monotonic clock: a wall clock
        // stepped back does not hold the circuit open the longer.
        let admission = self.breaker.admit(self.clock.monotonic_ms());
        let mut error = None;
        let mut store_us = None;
        if admission != Admission::Skip {
            let started = self.clock.monotonic_us();
            let result = match (checks, retry) {
                ([one], None) => self
                    .shared
                    .decide(one.check)
                    .await
                    .map(|d| (vec![d], Replay::Fresh)),
                // Boxed: several checks, or a request id, take a deeper
                // path than one plain check; inline, their futures would
                // widen every decision's, which the servers move per call.
                (_, None) => {
                    Box::pin(async {
                        let plain: Vec<Check<'_>> = checks.iter().map(|g| g.check).collect();
                        self.shared
                            .decide_all(&plain)
                            .await
                            .map(|d| (d, Replay::Fresh))
                    })
                    .await
                }
                (_, Some(retry)) => {
                    Box::pin(async {
                        let plain: Vec<Check<'_>> = checks.iter().map(|g| g.check).collect();
                        self.shared
                            .decide_once(&plain, retry)
                            .await
                            .map(|r| (r.decisions, r.replay))
                    })
                    .await
                }
            };
            let ended = self.clock.monotonic_us();
            store_us = Some(ended.saturating_sub(started));
            self.breaker
                .record(admission, result.is_ok(), ended / 1_000);
            match result {
                Ok((decisions, replay)) => {
                    return GuardedDecisions::shared(decisions, replay).timed(store_us);
                }
                Err(e) => error = Some(e),
            }
        }
        self.fallback(checks, retry)
            .with_error(error)
            .timed(store_us)
    }

    fn fallback(&self, checks: &[GuardedCheck<'_>], retry: Option<Retry<'_>>) -> GuardedDecisions {
        by_failure_mode(checks, retry, |local, retry| {
            self.local.decide_local(local, retry, true)
        })
    }
}

/// Decides `checks` as their failure modes say, without the store that
/// could not: `local` decides the `local` checks under their local
/// policies (`None`: no memory left for a budget, and they are rejected).
pub(crate) fn by_failure_mode(
    checks: &[GuardedCheck<'_>],
    retry: Option<Retry<'_>>,
    local: impl FnOnce(&[Check<'_>], Option<Retry<'_>>) -> Option<(Vec<Decision>, Replay)>,
) -> GuardedDecisions {
    let closed = checks
        .iter()
        .any(|g| g.on_failure == OnStoreFailure::FailClosed);
    if closed {
        // The request is rejected by the fail-closed policies alone; no
        // local budget is spent on it.
        return GuardedDecisions::fail_closed(
            checks
                .iter()
                .map(|g| match g.on_failure {
                    OnStoreFailure::FailClosed => fail_closed(g.check.policy),
                    _ => fail_open(g.check.policy),
                })
                .collect(),
        );
    }
    let local_checks: Vec<Check<'_>> = checks
        .iter()
        .filter_map(|g| match (g.on_failure, g.local_policy) {
            (OnStoreFailure::Local { .. }, Some(policy)) => Some(Check {
                policy,
                identity: g.check.identity,
                cost: g.check.cost,
            }),
            _ => None,
        })
        .collect();
    if local_checks.is_empty() {
        return GuardedDecisions::fail_open(
            checks.iter().map(|g| fail_open(g.check.policy)).collect(),
        );
    }
    let Some((local_decisions, replay)) = local(&local_checks, retry) else {
        return GuardedDecisions::fail_closed(
            checks
                .iter()
                .map(|g| match g.on_failure {
                    OnStoreFailure::Local { .. } => fail_closed(g.check.policy),
                    _ => fail_open(g.check.policy),
                })
                .collect(),
        );
    };
    if replay == Replay::Mismatch {
        return GuardedDecisions::local(Vec::new(), replay);
    }
    let mut local_decisions = local_decisions.into_iter();
    let decisions = checks
        .iter()
        .map(|g| match (g.on_failure, g.local_policy) {
            (OnStoreFailure::Local { .. }, Some(_)) => local_decisions
                .next()
                .unwrap_or_else(|| fail_open(g.check.policy)),
            _ => fail_open(g.check.policy),
        })
        .collect();
    GuardedDecisions::local(decisions, replay)
}

/// Admitted without a store. Nothing is known of what is left, so none is
/// claimed: a full `remaining` would invite a client to spend a budget no
/// store is counting (the answer is marked degraded, which says why).
fn fail_open(policy: &Policy) -> Decision {
    Decision {
        allowed: true,
        limit: policy.limits().limit(),
        remaining: 0,
        retry_after_ms: Some(0),
        reset_after_ms: 0,
    }
}

/// Rejected because no store could decide.
fn fail_closed(policy: &Policy) -> Decision {
    Decision {
        allowed: false,
        limit: policy.limits().limit(),
        remaining: 0,
        retry_after_ms: Some(FAIL_CLOSED_RETRY_MS),
        reset_after_ms: 0,
    }
}

/// `policy` scaled to `share_percent`% for the local fallback: a bucket's
/// capacity and refill rate, a window's limit; rounded down, never below 1,
/// so the local budget never exceeds its stated share (but for that floor).
pub fn local_policy(policy: &Policy, share_percent: u8) -> Policy {
    let share = u64::from(share_percent.clamp(1, 100));
    let scale = |x: u64| (u128::from(x) * u128::from(share) / 100).max(1) as u64;
    let rate = |r: &Rate| {
        // tokens·share per per·100 is the exact share of the refill rate.
        Rate::new(
            scale(r.capacity()),
            r.tokens().saturating_mul(share),
            r.per_ms().saturating_mul(100),
        )
        .unwrap_or(*r)
    };
    let window = |w: &Window| Window::new(scale(w.limit()), w.window_ms()).unwrap_or(*w);
    let limits = match policy.limits() {
        Limits::TokenBucket(r) => Limits::TokenBucket(rate(r)),
        Limits::Gcra(r) => Limits::Gcra(rate(r)),
        Limits::FixedWindow(w) => Limits::FixedWindow(window(w)),
        Limits::SlidingWindow(w) => Limits::SlidingWindow(window(w)),
        Limits::SlidingLog(w) => Limits::SlidingLog(window(w)),
    };
    Policy::new(policy.name(), limits)
}
