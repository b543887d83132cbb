//! The decided descriptors back into Envoy's answer: a status per
//! descriptor (`current_limit`, `limit_remaining`, `duration_until_reset`),
//! the overall code, envoyproxy/ratelimit's hit counters and, when
//! configured, the RateLimit fields for Envoy to add to its response —
//! written by the same writer as HTTP's.

use tollgate_core::Decision;
use tonic::Status;

use super::resolve::{Pending, Report, Resolved};
use super::unary::{self, GrpcBody};
use super::wire::{self, Code, CurrentLimit, DescriptorStatus, Header};
use crate::envoy_rules::Unit;
use crate::metrics::RlsCounters;
use tollgate_http::{RateLimitFields, ratelimit_draft, ratelimit_fields, retry_after_seconds};

/// The answer to one call, its parts borrowed from the resolved
/// descriptors: written straight into its gRPC frame.
pub(super) struct Answer<'a> {
    pub over: bool,
    statuses: Vec<DescriptorStatus<'a>>,
    /// The RateLimit fields, when configured and some enforced limit was
    /// decided.
    fields: Option<RateLimitFields>,
    /// `Retry-After`, in seconds, when configured, over, and a wait helps.
    retry_after: Option<u64>,
    /// Why the request was refused ([`refused`]), for Envoy to add as
    /// `Tollgate-Problem`, as forward auth names a client's fault.
    problem: Option<&'a str>,
}

impl Answer<'_> {
    /// The gRPC response carrying this answer.
    pub fn into_response(self) -> hyper::Response<GrpcBody> {
        let mut seconds = itoa::Buffer::new();
        let mut headers = [Header::default(); 3];
        let mut n = 0;
        if let Some(problem) = self.problem {
            headers[0] = Header {
                key: PROBLEM_FIELD,
                value: problem,
            };
            n = 1;
        }
        if let Some(fields) = &self.fields {
            headers[0] = Header {
                key: ratelimit_draft::POLICY_FIELD,
                value: &fields.policy,
            };
            headers[1] = Header {
                key: ratelimit_draft::STATE_FIELD,
                value: &fields.state,
            };
            n = 2;
        }
        if let Some(s) = self.retry_after {
            headers[n] = Header {
                key: "retry-after",
                value: seconds.format(s),
            };
            n += 1;
        }
        let headers = &headers[..n];
        let overall = Code::of(self.over);
        let length = wire::response_len(overall, &self.statuses, headers);
        unary::answer(length, |out| {
            wire::write_response(out, overall, &self.statuses, headers);
        })
    }
}

/// The field naming a refused request's fault, as forward auth's
/// `Tollgate-Problem`.
const PROBLEM_FIELD: &str = "tollgate-problem";

/// The answer to a request with a descriptor the client's input cannot
/// key ([`Resolved::Refused`]): over the limit, nothing decided or spent,
/// the refused descriptors `OVER_LIMIT` and the others `OK` without a
/// limit; the first refusal's reason in `Tollgate-Problem`. An error
/// status instead would reach Envoy's `failure_mode_deny: false`, which
/// lets the request through.
pub(super) fn refused<'a>(resolved: &'a [Resolved<'a>]) -> Answer<'a> {
    let statuses = resolved
        .iter()
        .map(|r| DescriptorStatus {
            code: Code::of(matches!(r, Resolved::Refused(_))),
            current_limit: None,
            limit_remaining: 0,
            reset_ms: None,
        })
        .collect();
    let problem = resolved.iter().find_map(|r| match r {
        Resolved::Refused(reason) => Some(reason.as_str()),
        _ => None,
    });
    Answer {
        over: true,
        statuses,
        fields: None,
        retry_after: None,
        problem,
    }
}

/// The answer to the request whose descriptors were `resolved` and, where
/// the store decided them, `decided` (same order). `now_ms` dates blocked
/// limits' windows.
pub(super) fn answer<'a>(
    resolved: &'a [Resolved<'a>],
    decided: &[Option<Decision>],
    now_ms: u64,
    with_headers: bool,
) -> Result<Answer<'a>, Status> {
    let mut verdict = Verdict::default();
    let mut statuses = Vec::with_capacity(resolved.len());
    for (r, decision) in resolved.iter().zip(decided) {
        statuses.push(match r {
            Resolved::None => DescriptorStatus {
                code: Code::Ok,
                current_limit: None,
                limit_remaining: 0,
                reset_ms: None,
            },
            Resolved::Unlimited { rls, quota, hits } => {
                rls.unlimited.inc_by(*hits);
                if *quota {
                    verdict.quota(false, None);
                }
                DescriptorStatus {
                    code: Code::Ok,
                    current_limit: None,
                    limit_remaining: u32::MAX,
                    reset_ms: None,
                }
            }
            Resolved::Blocked {
                unit,
                report,
                shadow,
                quota,
                hits,
            } => blocked_status(
                *unit,
                report,
                (*shadow, *quota),
                *hits,
                now_ms,
                &mut verdict,
            ),
            Resolved::Refused(_) => return Ok(refused(resolved)),
            Resolved::Decide(pending) => {
                let Some(decision) = decision.as_ref() else {
                    return Err(Status::internal("a descriptor was left undecided"));
                };
                decided_status(pending, decision, &mut verdict)
            }
        });
    }
    verdict.settle_quotas();
    let (fields, retry_after) = if with_headers {
        (
            enforced_fields(resolved, decided),
            verdict.retry_after_ms().map(retry_after_seconds),
        )
    } else {
        (None, None)
    };
    Ok(Answer {
        over: verdict.over,
        statuses,
        fields,
        retry_after,
        problem: None,
    })
}
/// The request's overall answer, gathered descriptor by descriptor.
struct Verdict {
    /// Some enforced limit is over.
    over: bool,
    /// The longest wait among the limits over; `None` when waiting cannot
    /// help one of them.
    retry_ms: Option<u64>,
    /// `quota_mode` limits: how many, how many over, and the shortest
    /// wait for one of them (`None`: none can be waited for).
    quotas: (usize, usize, Option<u64>),
}

impl Default for Verdict {
    fn default() -> Self {
        Self {
            over: false,
            retry_ms: Some(0),
            quotas: (0, 0, None),
        }
    }
}

impl Verdict {
    /// A quota limit's outcome: over only when every one is.
    fn quota(&mut self, over: bool, retry_ms: Option<u64>) {
        let (all, failed, wait) = &mut self.quotas;
        *all += 1;
        if over {
            *failed += 1;
            *wait = match (*wait, retry_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
    }

    /// Every quota limit over makes the request over; one of them coming
    /// back is enough to be let in.
    fn settle_quotas(&mut self) {
        let (all, failed, wait) = self.quotas;
        if all > 0 && failed == all {
            self.over(wait);
        }
    }

    fn over(&mut self, retry_ms: Option<u64>) {
        self.over = true;
        self.retry_ms = match (self.retry_ms, retry_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
    }

    /// `Retry-After`'s wait: only when over, and only when a wait can help.
    fn retry_after_ms(&self) -> Option<u64> {
        self.over.then_some(self.retry_ms).flatten()
    }
}

/// A `requests_per_unit: 0` limit: over for any positive cost, until its
/// window ends; in `quota_mode`, one quota limit among the request's.
fn blocked_status<'a>(
    unit: Unit,
    report: &Report<'a>,
    (shadow, quota): (bool, bool),
    hits: u64,
    now_ms: u64,
    verdict: &mut Verdict,
) -> DescriptorStatus<'a> {
    let rejected = hits > 0;
    count(report.rls, rejected, shadow, hits);
    let over = rejected && !shadow;
    if quota && !shadow {
        verdict.quota(over, None);
    } else if over {
        verdict.over(None);
    }
    DescriptorStatus {
        code: Code::of(over),
        current_limit: Some(current_limit(report)),
        limit_remaining: 0,
        reset_ms: Some(unit.ms() - now_ms % unit.ms()),
    }
}

/// A limit the store decided (a shadow-mode one is never over).
fn decided_status<'a>(
    pending: &Pending<'a>,
    decision: &Decision,
    verdict: &mut Verdict,
) -> DescriptorStatus<'a> {
    let rejected = !decision.allowed;
    let shadow = !pending.enforced();
    if !pending.refund {
        count(pending.report.rls, rejected, shadow, pending.cost);
    }
    let over = rejected && !shadow;
    if pending.quota && !shadow && !pending.refund {
        verdict.quota(over, decision.retry_after_ms);
    } else if over {
        verdict.over(decision.retry_after_ms);
    }
    DescriptorStatus {
        code: Code::of(over),
        current_limit: Some(current_limit(&pending.report)),
        limit_remaining: u32::try_from(decision.remaining.max(0)).unwrap_or(u32::MAX),
        reset_ms: Some(decision.reset_after_ms),
    }
}

/// envoyproxy/ratelimit's hit counters, by hits.
fn count(rls: Option<&RlsCounters>, rejected: bool, shadow: bool, hits: u64) {
    if let Some(c) = rls {
        match (rejected, shadow) {
            (false, _) => c.within_limit.inc_by(hits),
            (true, false) => c.over_limit.inc_by(hits),
            (true, true) => c.shadow_mode.inc_by(hits),
        };
    }
}

fn current_limit<'a>(report: &Report<'a>) -> CurrentLimit<'a> {
    CurrentLimit {
        name: report.name,
        requests_per_unit: report.requests_per_unit,
        unit: report.unit.proto(),
    }
}

/// `RateLimit-Policy` and `RateLimit` for the enforced limits the store
/// decided.
fn enforced_fields(
    resolved: &[Resolved<'_>],
    decided: &[Option<Decision>],
) -> Option<RateLimitFields> {
    let enforced = resolved
        .iter()
        .zip(decided)
        .filter_map(|(r, d)| match (r, d) {
            (Resolved::Decide(p), Some(d)) if p.enforced() && !p.refund => {
                Some((p.policy_item(), p.plan.policy(), d))
            }
            _ => None,
        });
    ratelimit_fields(enforced)
}
