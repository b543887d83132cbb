//! A shadow-mode check's would-be verdict, read in one place by every door
//! and the decision log, so none of them can tell a different story. A
//! request its enforced checks rejected (or answered from its request id)
//! only looks at its shadow checks' state (cost 0: enforcing them would
//! have spent nothing), and a look admits whatever it costs; the verdict
//! is then whether the cost fits what the look found remaining.

use tollgate_core::Decision;
use tollgate_store::{GuardedDecisions, Replay};

use crate::plan::Check;

/// Whether `decided`'s shadow-mode checks were only looked at: some check
/// is enforced, and the enforced ones rejected the request or it was
/// answered from its request id's record.
pub fn shadow_looked(checks: &[Check<'_>], decided: &GuardedDecisions) -> bool {
    let mut enforced = checks
        .iter()
        .zip(&decided.decisions)
        .filter(|(check, _)| !check.plan.shadow())
        .peekable();
    if enforced.peek().is_none() {
        return false;
    }
    decided.replay == Replay::Replayed || enforced.any(|(_, decision)| !decision.allowed)
}

/// A shadow-mode `check`'s would-be verdict from its `decision`; `looked`
/// as [`shadow_looked`] says of its request. A look is exact: the cost
/// would have fit when it is within `remaining` (whole units, floored).
pub fn would_allow(check: &Check<'_>, decision: &Decision, looked: bool) -> bool {
    if looked {
        i64::try_from(check.cost).is_ok_and(|cost| cost <= decision.remaining)
    } else {
        decision.allowed
    }
}
