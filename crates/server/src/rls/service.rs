//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`: request →
//! descriptors resolved to rules (`resolve.rs`) → the limiter, one
//! all-or-nothing call for the enforced limits and one for the shadowed →
//! statuses and fields (`answer.rs`). Metrics of the decisions
//! themselves are the limiter's; this adapter counts only RLS requests and
//! the store failures it turned into errors.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::SERVICE_NAME;
use futures_util::future::Either;
use hyper::body::Incoming;
use tollgate_core::Decision;
use tonic::Status;
use tonic::service::Routes;
use tower::ServiceExt;

use super::answer::{Answer, answer, refused};
use super::resolve::{Pending, Resolved, Resolver};
use super::unary::{self, GrpcBody};
use super::wire::{self, MAX_DESCRIPTORS, MAX_ENTRIES, RateLimitCall};
use crate::app::App;
use crate::limiter::{Check, Decided, StoreError};
use crate::metrics::{EndpointLabels, RlsCodeLabels, RlsPathLabels};
use crate::otlp::request_span;
use crate::tokens::Guarded;

/// The hot method's path.
const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The gRPC methods beside `ShouldRateLimit`: the standard health
/// service (reporting the rate limit service as serving), and tonic's
/// `UNIMPLEMENTED` for any other.
pub(crate) async fn other_methods() -> Routes {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status(SERVICE_NAME, tonic_health::ServingStatus::Serving)
        .await;
    Routes::new(health).prepare()
}

/// One gRPC request: `ShouldRateLimit` answered here, the rest by tonic.
///
/// Not an `async fn`: one awaiting the other would hold both the request
/// and the call's future that took it, twice the size of either, and the
/// stream's future is moved when it is spawned.
pub(crate) fn route(
    app: Arc<App>,
    others: Routes,
    request: hyper::Request<Incoming>,
) -> impl Future<Output = Result<hyper::Response<GrpcBody>, Infallible>> + Send {
    if request.uri().path() == SHOULD_RATE_LIMIT {
        let span = request_span("rls", request.headers());
        return Either::Left(async move {
            Ok(tollgate_limiter::within_span!(
                span,
                should_rate_limit(&app, request)
            ))
        });
    }
    // Boxed: the router's future is large and this path is cold.
    Either::Right(async move {
        let response = Box::pin(others.oneshot(request))
            .await
            .unwrap_or_else(|never| match never {});
        Ok(response.map(GrpcBody::Routed))
    })
}

/// `ShouldRateLimit`: the token, the one message, the decision, counted by
/// its answer's code.
async fn should_rate_limit(
    app: &App,
    request: hyper::Request<Incoming>,
) -> hyper::Response<GrpcBody> {
    let rls = RateLimitGrpc { app };
    let (head, body) = request.into_parts();
    let (admitted, timeout) = {
        let live = app.live.load();
        let authorization = head.headers.get("authorization").map(|v| v.as_bytes());
        (
            live.config.tokens.admits(Guarded::Check, authorization),
            Duration::from_millis(live.config.server.request_timeout_ms),
        )
    };
    if !admitted {
        app.metrics
            .unauthorized
            .get_or_create(&EndpointLabels { endpoint: "rls" })
            .inc();
        return unary::refuse(Status::unauthenticated(format!(
            "ShouldRateLimit needs the metadata `authorization: Bearer <token>` ({})",
            Guarded::Check.env()
        )));
    }
    let result = match unary::read_message(body, timeout).await {
        Ok(bytes) => match wire::read_request(&bytes) {
            Ok(call) => rls.decide(&call).await,
            Err(e) => Err(Status::invalid_argument(format!(
                "the request message: {e}"
            ))),
        },
        Err(status) => Err(status),
    };
    let (code, response) = match result {
        Ok((answered, response)) => (answered.code(), response),
        Err(status) => (
            if status.code() == tonic::Code::InvalidArgument {
                "invalid_argument"
            } else {
                "unavailable"
            },
            unary::refuse(status),
        ),
    };
    app.metrics
        .rls
        .requests
        .get_or_create(&RlsCodeLabels { code })
        .inc();
    response
}

/// How a call was answered, as `tollgate_rls_requests_total` counts it.
#[derive(Clone, Copy)]
enum Answered {
    Ok,
    Over,
    /// Over because what the client sent cannot key a budget.
    Refused,
}

impl Answered {
    fn code(self) -> &'static str {
        match self {
            Answered::Ok => "ok",
            Answered::Over => "over_limit",
            Answered::Refused => "refused",
        }
    }
}

/// The service's decisions over the running app.
#[derive(Clone, Copy)]
struct RateLimitGrpc<'a> {
    app: &'a App,
}

impl RateLimitGrpc<'_> {
    /// Validate → resolve each descriptor → decide the enforced limits,
    /// then the shadowed ones, through the limiter → answer.
    /// Whether the call is over a limit, and its response.
    async fn decide(
        &self,
        call: &RateLimitCall<'_>,
    ) -> Result<(Answered, hyper::Response<GrpcBody>), Status> {
        validate(call)?;
        let live = self.app.live.load();
        let resolved = Resolver::new(&live, call).resolve_all()?;
        if resolved.iter().any(|r| matches!(r, Resolved::Refused(_))) {
            // Nothing is decided: a refused request spends no budget.
            return Ok((Answered::Refused, refused(&resolved).into_response()));
        }
        let decided = self.decide_resolved(&resolved).await?;
        // Blocked (`requests_per_unit: 0`) limits end with their window.
        let now_ms = self.app.limiter.clock().now_ms();
        let answer: Answer<'_> = answer(
            &resolved,
            &decided,
            now_ms,
            live.config.server.grpc_response_headers,
        )?;
        let answered = if answer.over {
            Answered::Over
        } else {
            Answered::Ok
        };
        Ok((answered, answer.into_response()))
    }

    /// The store's decisions, in `resolved`'s order (`None` where the store
    /// had nothing to decide): the enforced limits in one all-or-nothing
    /// call, the shadowed ones in another, so a shadow limit never vetoes.
    async fn decide_resolved(
        &self,
        resolved: &[Resolved<'_>],
    ) -> Result<Vec<Option<Decision>>, Status> {
        self.refund(resolved).await?;
        let mut decided = vec![None; resolved.len()];
        let quota_over = self.decide_quotas(resolved, &mut decided).await?;
        // A blocked limit rejects any positive cost, so the request is over
        // and the store only peeks; so it is when every quota limit is over.
        let blocked_over = resolved.iter().any(|r| {
            matches!(r, Resolved::Blocked { shadow: false, quota: false, hits, .. } if *hits > 0)
        });
        let enforced = if blocked_over || quota_over {
            Batch::Peek
        } else {
            Batch::Enforced
        };
        self.decide_batch(resolved, enforced, &mut decided).await?;
        self.decide_batch(resolved, Batch::Shadowed, &mut decided)
            .await?;
        Ok(decided)
    }

    /// Decides `batch`'s limits of `resolved` in one all-or-nothing call
    /// through the limiter, writing each decision in place.
    async fn decide_batch(
        &self,
        resolved: &[Resolved<'_>],
        batch: Batch,
        out: &mut [Option<Decision>],
    ) -> Result<(), Status> {
        let (indices, pendings): (Vec<usize>, Vec<&Pending<'_>>) = resolved
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Resolved::Decide(p) if batch.holds(p) => Some((i, p.as_ref())),
                _ => None,
            })
            .unzip();
        if pendings.is_empty() {
            return Ok(());
        }
        // Each limit on its plan's store: an unbound rule on the config's
        // most shared one, a bound rule on its policy's.
        let checks: Vec<Check<'_>> = pendings.iter().map(|p| batch.check(p)).collect();
        let result = self.app.limiter.decide(&checks).await;
        self.count_store_failure(&result);
        if result.decisions.len() != indices.len() {
            return Err(unanswered(&result));
        }
        for (i, decision) in indices.into_iter().zip(result.decisions) {
            out[i] = Some(decision);
        }
        Ok(())
    }

    /// Gives back the units of the request's `is_negative_hits`
    /// descriptors, before anything is decided (their status is a look
    /// at the state after).
    async fn refund(&self, resolved: &[Resolved<'_>]) -> Result<(), Status> {
        for r in resolved {
            if let Resolved::Decide(p) = r
                && p.refund
            {
                let check = Check::new(&p.plan, &p.identity, p.cost);
                if let Err(e) = self.app.limiter.refund(&check).await {
                    return Err(Status::unavailable(store_fault(Some(&e))));
                }
            }
        }
        Ok(())
    }

    /// Decides each `quota_mode` limit in a call of its own, as
    /// envoyproxy/ratelimit decides every limit: one quota limit over never
    /// stops another from spending. Whether the request has quota limits
    /// and every one of them is over.
    async fn decide_quotas(
        &self,
        resolved: &[Resolved<'_>],
        out: &mut [Option<Decision>],
    ) -> Result<bool, Status> {
        let (mut quotas, mut over) = (0, 0);
        for (i, r) in resolved.iter().enumerate() {
            // A blocked quota limit is over for any positive cost, an
            // unlimited one never, both without the store.
            match r {
                Resolved::Blocked {
                    shadow: false,
                    quota: true,
                    hits,
                    ..
                } => {
                    quotas += 1;
                    over += usize::from(*hits > 0);
                    continue;
                }
                Resolved::Unlimited { quota: true, .. } => {
                    quotas += 1;
                    continue;
                }
                _ => {}
            }
            let Resolved::Decide(p) = r else { continue };
            if !Batch::Quota.holds(p) {
                continue;
            }
            let result = self.app.limiter.decide(&[Batch::Quota.check(p)]).await;
            self.count_store_failure(&result);
            let Some(decision) = result.decisions.first().copied() else {
                return Err(unanswered(&result));
            };
            // A quota limit in shadow mode (its policy's) never counts.
            if p.enforced() {
                quotas += 1;
                over += usize::from(!decision.allowed);
            }
            out[i] = Some(decision);
        }
        Ok(quotas > 0 && over == quotas)
    }

    /// Counts a store call decided without the store, by the path that
    /// answered instead (or would have: a limit without a failure mode
    /// leaves the call unanswered).
    fn count_store_failure(&self, result: &Decided) {
        if !result.by.is_degraded() {
            return;
        }
        self.app
            .metrics
            .rls
            .store_failures
            .get_or_create(&RlsPathLabels {
                path: result.by.name(),
            })
            .inc();
    }
}

/// A call the limiter left without decisions. A store failure under a
/// limit with no declared failure mode answers as envoyproxy/ratelimit
/// does, with an error, so Envoy's `failure_mode_deny` decides; the
/// store's own words (addresses, Redis replies) stay in the log (the
/// limiter's), Envoy and its client get tollgate's.
fn unanswered(result: &Decided) -> Status {
    if result.by.is_degraded() || result.error.is_some() {
        return Status::unavailable(store_fault(result.error.as_ref()));
    }
    Status::internal("the store answered a different number of decisions")
}

/// Which limits one store call decides, and whether they are the policies'
/// verdicts (counted in `tollgate_decisions_total` and the hot identities).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Batch {
    /// The enforced limits: their policies' verdicts.
    Enforced,
    /// The enforced limits when a blocked limit has already made the
    /// request over: a cost-0 look at their state, nobody's verdict.
    Peek,
    /// `shadow_mode` limits: reported, never enforced, never counted as
    /// their policy's.
    Shadowed,
    /// A `quota_mode` limit, decided alone.
    Quota,
}

impl Batch {
    /// Whether `p` is decided in this batch: a shadow limit with the
    /// shadowed, a quota limit alone, a refund's look with the enforced.
    fn holds(self, p: &Pending<'_>) -> bool {
        match self {
            Batch::Shadowed => p.shadow,
            Batch::Quota => !p.shadow && p.quota && !p.refund,
            Batch::Enforced | Batch::Peek => !p.shadow && (!p.quota || p.refund),
        }
    }

    fn check<'a>(self, p: &'a Pending<'_>) -> Check<'a> {
        // Envoy's RLS carries no request id.
        let check = Check::new(&p.plan, &p.identity, p.cost);
        if p.refund {
            // Given back already: a look at the state it left.
            return check.peek();
        }
        match self {
            Batch::Enforced | Batch::Quota => check,
            Batch::Peek => check.peek(),
            Batch::Shadowed => check.uncounted(),
        }
    }
}

/// The request as the protocol bounds it, before anything is looked up.
fn validate(call: &RateLimitCall<'_>) -> Result<(), Status> {
    if call.domain.is_empty() {
        return Err(Status::invalid_argument(
            "rate limit domain must not be empty",
        ));
    }
    if call.descriptor_count == 0 {
        return Err(Status::invalid_argument(
            "rate limit descriptor list must not be empty",
        ));
    }
    if call.descriptor_count > MAX_DESCRIPTORS {
        return Err(Status::invalid_argument(format!(
            "{} descriptors; at most {MAX_DESCRIPTORS} are accepted",
            call.descriptor_count
        )));
    }
    for (i, descriptor) in call.descriptors().iter().enumerate() {
        if descriptor.entry_count == 0 {
            return Err(Status::invalid_argument(format!(
                "descriptors[{i}] has no entries"
            )));
        }
        if descriptor.entry_count > MAX_ENTRIES {
            return Err(Status::invalid_argument(format!(
                "descriptors[{i}] has {} entries; at most {MAX_ENTRIES} are accepted",
                descriptor.entry_count
            )));
        }
    }
    Ok(())
}

/// Why the store could not decide, in tollgate's words: a store error's
/// text names hosts and replies a gRPC client has no business reading.
fn store_fault(error: Option<&StoreError>) -> &'static str {
    match error {
        None => "the rate limit store is unavailable (its circuit is open)",
        Some(StoreError::Timeout { .. }) => {
            "the rate limit store is unavailable (it did not answer in time)"
        }
        Some(
            StoreError::Unavailable(_)
            | StoreError::Refused(_)
            | StoreError::Unresolved(_)
            | StoreError::Auth(_),
        ) => "the rate limit store is unavailable",
        Some(StoreError::Protocol(_) | StoreError::Config(_)) => {
            "the rate limit store is unavailable (its answer could not be used)"
        }
        Some(StoreError::Full { .. }) => {
            "the rate limit store is full (every identity it holds is limited)"
        }
    }
}
