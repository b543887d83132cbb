//! The decided descriptors back into Envoy's answer: a status per
//! descriptor (`current_limit`, `limit_remaining`, `duration_until_reset`),
//! the overall code, envoyproxy/ratelimit's hit counters and, when
//! configured, the RateLimit fields for Envoy to add to its response —
//! written by the same writer as HTTP's.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use tollgate_core::Decision;
use tonic::Status;

use super::resolve::{Pending, Report, Resolved};
use crate::envoy_rules::Unit;
use crate::metrics::RlsCounters;
use crate::ratelimit_fields::{ratelimit_draft, ratelimit_fields, retry_after_seconds};

/// The answer to the request whose descriptors were `resolved` and, where
/// the store decided them, `decided` (same order). `now_ms` dates blocked
/// limits' windows.
pub(super) fn answer(
    resolved: &[Resolved<'_>],
    decided: &[Option<Decision>],
    now_ms: u64,
    with_headers: bool,
) -> Result<RateLimitResponse, Status> {
    let mut verdict = Verdict::default();
    let mut statuses = Vec::with_capacity(resolved.len());
    for (r, decision) in resolved.iter().zip(decided) {
        statuses.push(match r {
            Resolved::None => DescriptorStatus {
                code: Code::Ok as i32,
                ..DescriptorStatus::default()
            },
            Resolved::Unlimited { rls, hits } => {
                rls.unlimited.inc_by(*hits);
                DescriptorStatus {
                    code: Code::Ok as i32,
                    limit_remaining: u32::MAX,
                    ..DescriptorStatus::default()
                }
            }
            Resolved::Blocked {
                unit,
                report,
                shadow,
                hits,
            } => blocked_status(*unit, report, *shadow, *hits, now_ms, &mut verdict),
            Resolved::Decide(pending) => {
                let Some(decision) = decision.as_ref() else {
                    return Err(Status::internal("a descriptor was left undecided"));
                };
                decided_status(pending, decision, &mut verdict)
            }
        });
    }
    let response_headers_to_add = if with_headers {
        ratelimit_headers(resolved, decided, verdict.retry_after_ms())
    } else {
        Vec::new()
    };
    Ok(RateLimitResponse {
        overall_code: if verdict.over {
            Code::OverLimit
        } else {
            Code::Ok
        } as i32,
        statuses,
        response_headers_to_add,
        ..RateLimitResponse::default()
    })
}

/// The request's overall answer, gathered descriptor by descriptor.
struct Verdict {
    /// Some enforced limit is over.
    over: bool,
    /// The longest wait among the limits over; `None` when waiting cannot
    /// help one of them.
    retry_ms: Option<u64>,
}

impl Default for Verdict {
    fn default() -> Self {
        Self {
            over: false,
            retry_ms: Some(0),
        }
    }
}

impl Verdict {
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
/// window ends.
fn blocked_status(
    unit: Unit,
    report: &Report<'_>,
    shadow: bool,
    hits: u64,
    now_ms: u64,
    verdict: &mut Verdict,
) -> DescriptorStatus {
    let rejected = hits > 0;
    count(report.rls, rejected, shadow, hits);
    let over = rejected && !shadow;
    if over {
        verdict.over(None);
    }
    DescriptorStatus {
        code: if over { Code::OverLimit } else { Code::Ok } as i32,
        current_limit: Some(current_limit(report)),
        limit_remaining: 0,
        duration_until_reset: Some(duration(unit.ms() - now_ms % unit.ms())),
        ..DescriptorStatus::default()
    }
}

/// A limit the store decided (a shadow-mode one is never over).
fn decided_status(
    pending: &Pending<'_>,
    decision: &Decision,
    verdict: &mut Verdict,
) -> DescriptorStatus {
    let rejected = !decision.allowed;
    count(pending.report.rls, rejected, pending.shadow, pending.cost);
    let over = rejected && !pending.shadow;
    if over {
        verdict.over(decision.retry_after_ms);
    }
    DescriptorStatus {
        code: if over { Code::OverLimit } else { Code::Ok } as i32,
        current_limit: Some(current_limit(&pending.report)),
        limit_remaining: u32::try_from(decision.remaining.max(0)).unwrap_or(u32::MAX),
        duration_until_reset: Some(duration(decision.reset_after_ms)),
        ..DescriptorStatus::default()
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

fn current_limit(report: &Report<'_>) -> RateLimit {
    RateLimit {
        name: report.name.to_owned(),
        requests_per_unit: report.requests_per_unit,
        unit: report.unit.proto(),
    }
}

fn duration(ms: u64) -> ProtoDuration {
    ProtoDuration {
        seconds: i64::try_from(ms / 1000).unwrap_or(i64::MAX),
        // Below 10^9: ms % 1000 is below 1000.
        nanos: i32::try_from((ms % 1000) * 1_000_000).unwrap_or(0),
    }
}

/// `RateLimit-Policy` and `RateLimit` for the enforced limits the store
/// decided and, when over the limit and a wait can help, `Retry-After`.
fn ratelimit_headers(
    resolved: &[Resolved<'_>],
    decided: &[Option<Decision>],
    retry_ms: Option<u64>,
) -> Vec<HeaderValue> {
    let mut headers = Vec::with_capacity(3);
    let enforced = resolved
        .iter()
        .zip(decided)
        .filter_map(|(r, d)| match (r, d) {
            (Resolved::Decide(p), Some(d)) if !p.shadow => {
                Some((p.policy_item(), p.policy.as_ref(), d))
            }
            _ => None,
        });
    if let Some(fields) = ratelimit_fields(enforced) {
        headers.push(header(ratelimit_draft::POLICY_FIELD, fields.policy));
        headers.push(header(ratelimit_draft::STATE_FIELD, fields.state));
    }
    if let Some(ms) = retry_ms {
        headers.push(header("retry-after", retry_after_seconds(ms).to_string()));
    }
    headers
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        ..HeaderValue::default()
    }
}
