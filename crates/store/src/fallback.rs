//! Failure is a policy (docs/design.md §6): when a store cannot decide,
//! each check is decided as its policy declared: admit (`fail_open`),
//! reject (`fail_closed`), or spend an in-process budget, a stated share of
//! the limit (`local`). Every decision says what made it ([`DecidedBy`]),
//! so degraded ones can be marked. [`crate::Guarded`] applies this to a
//! store behind a breaker; the memory store, when full.

use smallvec::SmallVec;
use tollgate_core::{Decision, Policy};

use crate::check::Check;
use crate::error::StoreError;
use crate::request_id::{Replay, Retry};

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

/// A request's decisions, one per check in the checks' order: inline for
/// the common request of one check, so deciding it allocates nothing.
pub type Decisions = SmallVec<[Decision; 1]>;

/// The decisions of one request, with what made them.
#[derive(Debug, Clone)]
pub struct GuardedDecisions {
    /// One per check, in the order of the checks.
    pub decisions: Decisions,
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
    pub fn new(by: DecidedBy, decisions: impl Into<Decisions>) -> Self {
        Self {
            decisions: decisions.into(),
            by,
            error: None,
            store_us: None,
            replay: Replay::Fresh,
        }
    }

    /// Decided by the shared store; `replay`: what the request id made of
    /// the call (a replayed one consumed nothing).
    pub fn shared(decisions: impl Into<Decisions>, replay: Replay) -> Self {
        Self::new(DecidedBy::Shared, decisions).with_replay(replay)
    }

    /// Admitted without the store (`fail_open`).
    pub fn fail_open(decisions: impl Into<Decisions>) -> Self {
        Self::new(DecidedBy::FailOpen, decisions)
    }

    /// Rejected without the store (`fail_closed`).
    pub fn fail_closed(decisions: impl Into<Decisions>) -> Self {
        Self::new(DecidedBy::FailClosed, decisions)
    }

    /// Decided on this process's share of the limits (`local`), which
    /// keeps request ids in its own memory.
    pub fn local(decisions: impl Into<Decisions>, replay: Replay) -> Self {
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

/// Decisions made by the store itself, with what the request id made of
/// the call.
pub(crate) fn shared(
    result: Result<(impl Into<Decisions>, Replay), StoreError>,
) -> GuardedDecisions {
    match result {
        Ok((decisions, replay)) => GuardedDecisions::shared(decisions, replay),
        Err(e) => GuardedDecisions::unanswered(e),
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
                .collect::<Decisions>(),
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
            checks
                .iter()
                .map(|g| fail_open(g.check.policy))
                .collect::<Decisions>(),
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
                .collect::<Decisions>(),
        );
    };
    if replay == Replay::Mismatch {
        return GuardedDecisions::local(Decisions::new(), replay);
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
        .collect::<Decisions>();
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
        permit: None,
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
        permit: None,
    }
}

/// `policy` scaled to `share_percent`% for the local fallback: a bucket's
/// capacity and refill rate, a window's limit ([`Limits::share`](tollgate_core::Limits::share)); the
/// limit rounded down, never below 1, so the local budget never exceeds
/// its stated share (but for that floor). A refill too large to scale
/// (N or P past u64::MAX / 100) keeps the policy whole.
pub fn local_policy(policy: &Policy, share_percent: u8) -> Policy {
    let share = u64::from(share_percent.clamp(1, 100));
    let limits = policy.limits();
    // ≤ the limit, so it fits.
    let limit = (u128::from(limits.limit()) * u128::from(share) / 100).max(1) as u64;
    let scaled = limits.share(limit, share, 100).unwrap_or(*limits);
    Policy::new(policy.name(), scaled)
}
