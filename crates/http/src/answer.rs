//! The answer to a decided request whose policies matched, written once
//! for forward auth (`/v1/authorize`) and the tower layer: the replayed
//! and degraded marks, the RateLimit fields of the enforced policies, and
//! when one of them refuses, the rejection with its problem also in
//! `Tollgate-Problem` (nginx's `auth_request` drops the body).

use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use tollgate_core::{Decision, Policy};
use tollgate_limiter::{Decided, DecidedBy, Replay};

use crate::request_id::request_id_mismatch;
use crate::response::{
    PROBLEM_HEADER, Problem, degraded_header, problem_header, ratelimit_values, rejection,
    replayed_header, state_value, write_ratelimit_values,
};

/// A matched policy as its answer names it.
#[derive(Clone, Copy)]
pub struct Matched<'a> {
    /// Its `RateLimit-Policy` item ([`policy_item`](crate::policy_item)),
    /// written once when the policy was loaded.
    pub policy_item: &'a str,
    /// The same item as a header value, when the caller keeps one: written
    /// as it is (shared, not rendered again) when this is the answer's one
    /// enforced policy.
    pub policy_value: Option<&'a HeaderValue>,
    /// The policy.
    pub policy: &'a Policy,
    /// Shadow mode: decided and counted, never answered.
    pub shadow: bool,
    /// What the request cost it.
    pub cost: u64,
}

/// What a decision makes of a request.
pub enum Answer {
    /// Every enforced policy admits: the request goes on, with these
    /// fields on its answer.
    Admit(Admission),
    /// Refused here: the deny status, the RateLimit fields, the problem.
    Deny(Response<String>),
}

/// The fields an admission adds to its answer, rendered, for the caller
/// to write onto whatever answer it gives: no map of its own to build and
/// copy over.
pub struct Admission {
    replayed: bool,
    degraded: Option<&'static str>,
    ratelimit: Option<(HeaderValue, HeaderValue)>,
}

impl Admission {
    /// The marks and the RateLimit fields into `headers`.
    pub fn write_headers(self, headers: &mut HeaderMap) {
        if self.replayed {
            replayed_header(headers);
        }
        if let Some(path) = self.degraded {
            degraded_header(headers, path);
        }
        if let Some(values) = self.ratelimit {
            write_ratelimit_values(headers, values);
        }
    }
}

/// The fields of an answer whose one enforced policy comes with its
/// `RateLimit-Policy` value: that value shared, and the state rendered.
fn one_policy_values<'a, 'd>(
    mut enforced: impl Iterator<Item = (Matched<'a>, &'d Decision)>,
) -> Option<(HeaderValue, HeaderValue)> {
    let (only, decision) = enforced.next()?;
    let policy_value = only.policy_value?;
    if enforced.next().is_some() {
        return None;
    }
    Some((policy_value.clone(), state_value(only.policy, decision)?))
}

/// The answer to `decided`, the decisions of `matched` in order; a denial
/// has status `deny` (429, or a door's own). A request id sent before with
/// another request is the client's fault, a 422 problem for the caller to
/// answer as it answers its clients' faults.
pub fn answer<'a, M>(matched: M, decided: &Decided, deny: StatusCode) -> Result<Answer, Problem>
where
    M: Iterator<Item = Matched<'a>> + Clone,
{
    match decided.replay {
        Replay::Mismatch => return Err(request_id_mismatch()),
        Replay::Fresh | Replay::Replayed => {}
    }
    // A decider that answers fewer decisions than checks decided nothing
    // this request can be answered by.
    if decided.decisions.len() != matched.clone().count() {
        let problem =
            Problem::unavailable("the limiter could not decide: the store answered nothing");
        return Ok(Answer::Deny(problem.response()));
    }
    // A shadow-mode policy never answers: no RateLimit fields, no veto.
    let enforced = || {
        matched
            .clone()
            .zip(&decided.decisions)
            .filter(|(m, _)| !m.shadow)
    };
    let admission = Admission {
        replayed: decided.replay == Replay::Replayed,
        degraded: decided.by.is_degraded().then(|| decided.by.name()),
        ratelimit: one_policy_values(enforced())
            .or_else(|| ratelimit_values(enforced().map(|(m, d)| (m.policy_item, m.policy, d)))),
    };
    if enforced().all(|(_, d)| d.allowed) {
        return Ok(Answer::Admit(admission));
    }
    let mut headers = HeaderMap::new();
    admission.write_headers(&mut headers);
    let violated = enforced()
        .filter(|(_, d)| !d.allowed)
        .map(|(m, d)| (m.policy, d));
    // The store's own error goes to the log and the metrics, never to the
    // client.
    let cause = (decided.by == DecidedBy::FailClosed).then(|| {
        "the limiter could not decide: its shared store is unavailable, and a matching policy fails closed".to_owned()
    });
    let reject = rejection(
        violated,
        |policy| {
            matched
                .clone()
                .find(|m| m.policy.name() == policy.name())
                .map_or(0, |m| m.cost)
        },
        cause,
    );
    // auth_request drops the body; nginx relays the problem from this header.
    if let Some(v) = problem_header(&reject.body) {
        headers.insert(HeaderName::from_static(PROBLEM_HEADER), v);
    }
    Ok(Answer::Deny(reject.response(deny, headers)))
}
