//! The `/v1/check` answer's one schema: a decision per check, and a batch's
//! verdict over them. The server writes these types and a client reads
//! them; fields that only some answers carry (`degraded`, `shadow`,
//! `replayed`, `refunded`, `permit`) are left out when they do not apply.
//! `/v1/release`'s body and answer are here too.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::check_body::{CheckKey, Object, Text};
use crate::response::Problem;
use tollgate_core::{Decision, PermitId};

/// One check's decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckDecision<'a> {
    /// Whether the check was admitted (a shadow policy's always is).
    pub allowed: bool,
    /// The policy decided.
    pub policy: Cow<'a, str>,
    /// The policy's limit.
    pub limit: u64,
    /// What is left; 0 when a stepped-back clock made gcra's internal
    /// figure negative.
    pub remaining: u64,
    /// When a retry can be admitted; `null` when this cost never can.
    pub retry_after_ms: Option<u64>,
    /// When the state is full again.
    pub reset_after_ms: u64,
    /// `true` when the shared store did not make the decision.
    #[serde(default, skip_serializing_if = "is_false")]
    pub degraded: bool,
    /// The path that made a degraded decision (fail_open, fail_closed, local).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<Cow<'a, str>>,
    /// `true` for a shadow-mode policy: decided, never enforced.
    #[serde(default, skip_serializing_if = "is_false")]
    pub shadow: bool,
    /// A shadow policy's would-be verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub would_allow: Option<bool>,
    /// `true` when answered from a request id's record (nothing was consumed).
    #[serde(default, skip_serializing_if = "is_false")]
    pub replayed: bool,
    /// A refund's units that went back (fewer than asked when the state
    /// was fuller: a refund never lifts it past full).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refunded: Option<u64>,
    /// The permit an admitted concurrency check holds, to hand back to
    /// `/v1/release` when the work ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permit: Option<PermitId>,
}

impl<'a> CheckDecision<'a> {
    /// `decision` of `policy`; `degraded` names the path that made it when
    /// the shared store did not.
    pub fn new(policy: &'a str, decision: &Decision, degraded: Option<&'a str>) -> Self {
        Self {
            allowed: decision.allowed,
            policy: Cow::Borrowed(policy),
            limit: decision.limit,
            remaining: u64::try_from(decision.remaining).unwrap_or(0),
            retry_after_ms: decision.retry_after_ms,
            reset_after_ms: decision.reset_after_ms,
            degraded: degraded.is_some(),
            path: degraded.map(Cow::Borrowed),
            shadow: false,
            would_allow: None,
            replayed: false,
            refunded: None,
            permit: decision.permit,
        }
    }

    /// A shadow-mode policy's decision made an admission, what it would
    /// have decided in `would_allow` (its figures stay the would-be
    /// decision's), so a client reading `shadow` never takes a shadow
    /// rejection for an enforced admission.
    #[must_use]
    pub fn shadowed(mut self, would_allow: bool) -> Self {
        self.allowed = true;
        self.shadow = true;
        self.would_allow = Some(would_allow);
        self
    }

    /// Marked as answered from a request id's record.
    #[must_use]
    pub fn replayed(mut self) -> Self {
        self.replayed = true;
        self
    }

    /// A refund's answer: the state left, and the units that went back.
    #[must_use]
    pub fn refunded(mut self, units: u64) -> Self {
        self.refunded = Some(units);
        self
    }
}

/// A batch's answer: admitted only when every enforced check is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchDecision<'a> {
    /// Whether the batch was admitted (and so charged).
    pub allowed: bool,
    /// `true` when answered from a request id's record.
    #[serde(default, skip_serializing_if = "is_false")]
    pub replayed: bool,
    /// `true` when the shared store did not make the decisions.
    #[serde(default, skip_serializing_if = "is_false")]
    pub degraded: bool,
    /// The path that made degraded decisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<Cow<'a, str>>,
    /// Each check's decision, in the request's order.
    pub decisions: Vec<CheckDecision<'a>>,
}

/// `/v1/release`'s body: the permit an admitted concurrency check of
/// `policy` for `key` returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseBody<'a> {
    /// The concurrency policy the permit was acquired under.
    #[serde(borrow)]
    pub policy: Text<'a>,
    /// The key it was acquired for, as `/v1/check` spelled it.
    #[serde(borrow)]
    pub key: CheckKey<'a>,
    /// The permit, 16 lowercase hex digits.
    pub permit: PermitId,
}

/// `/v1/release`'s body, or the 400 that names what is wrong with it:
/// malformed JSON, not an object, a missing or unknown field, a key that is
/// not a string or an object of strings, a permit that is not 16 lowercase
/// hex digits. Nothing is released then.
pub fn parse_release_body(body: &[u8]) -> Result<ReleaseBody<'_>, Problem> {
    serde_json::from_slice::<Object<ReleaseBody<'_>>>(body)
        .map(|Object(parsed)| parsed)
        .map_err(|e| {
            let said = e.to_string().replace("struct ReleaseBody", "an object");
            Problem::bad_request(format!("malformed release: {said}"))
        })
}

/// `/v1/release`'s answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseAnswer {
    /// `true` when the permit was held and is free now; `false` when it
    /// was unknown, already released or expired.
    pub released: bool,
}

// serde's `skip_serializing_if` takes a reference.
fn is_false(flag: &bool) -> bool {
    !*flag
}
