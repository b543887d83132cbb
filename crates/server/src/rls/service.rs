//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`: request →
//! descriptors → rules → one all-or-nothing store call → statuses (and,
//! when configured, the RateLimit fields for Envoy to add to its response).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tollgate_core::{Clock, Decision, Identity, Limits, Policy, Window};
use tollgate_store::{Check, DecisionPath, GuardedCheck, OnStoreFailure, StoreError, local_policy};
use tonic::{Request, Response, Status};

use super::rules::{EnvoyRules, RuleKind, Unit};
use crate::app::App;
use crate::metrics::{EndpointLabels, Metrics, RlsCounters};
use crate::response::{policy_item, ratelimit_draft, retry_after_seconds, state_item};
use crate::tokens::Guarded;

/// The most descriptors one request may carry.
pub const MAX_DESCRIPTORS: usize = 64;
/// The most entries one descriptor may carry.
pub const MAX_ENTRIES: usize = super::rules::MAX_DEPTH;
/// Concurrent requests per HTTP/2 connection (Envoy multiplexes many).
const MAX_CONCURRENT_STREAMS: u32 = 1_024;

/// The loaded rules with their metric counters, resolved once per load.
pub struct LiveRules {
    pub rules: Arc<EnvoyRules>,
    counters: Vec<RlsCounters>,
    /// For `on_store_failure: local` rules: the limit scaled to its share.
    local: Vec<Option<Policy>>,
    /// Counters of `limit` overrides, per configured domain.
    overrides: HashMap<String, RlsCounters>,
}

impl LiveRules {
    pub fn new(rules: Arc<EnvoyRules>, metrics: &Metrics) -> Self {
        let counters = rules
            .rules
            .iter()
            .map(|r| metrics.rls.counters(&r.domain, &r.key))
            .collect();
        let local = rules
            .rules
            .iter()
            .map(|r| match (&r.kind, r.on_store_failure) {
                (
                    RuleKind::Limited { policy, .. },
                    Some(OnStoreFailure::Local { share_percent }),
                ) => Some(local_policy(policy, share_percent)),
                _ => None,
            })
            .collect();
        let overrides = rules
            .domains()
            .map(|d| (d.to_owned(), metrics.rls.counters(d, "limit_override")))
            .collect();
        Self {
            rules,
            counters,
            local,
            overrides,
        }
    }
}

/// The gRPC service over the running app.
pub struct RateLimitGrpc {
    app: Arc<App>,
    clock: Arc<dyn Clock>,
}

impl RateLimitGrpc {
    /// `clock` tells blocked (`requests_per_unit: 0`) limits when their
    /// window ends; the stores keep their own clock.
    pub fn new(app: Arc<App>, clock: Arc<dyn Clock>) -> Self {
        Self { app, clock }
    }
}

/// Serves `ShouldRateLimit` and the standard gRPC health service on
/// `listener` until `shutdown` resolves.
pub async fn serve_grpc(
    app: Arc<App>,
    clock: Arc<dyn Clock>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), String> {
    let mut builder = tonic::transport::Server::builder();
    let tls = {
        let runtime = app.runtime.load();
        let timeout = std::time::Duration::from_millis(runtime.config.server.request_timeout_ms);
        runtime.config.edge_tls()?.map(|tls| tls.grpc(timeout))
    };
    if let Some(tls) = tls {
        builder = builder
            .tls_config(tls)
            .map_err(|e| format!("cannot serve gRPC over TLS: {e}"))?;
    }
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_serving::<RateLimitServiceServer<RateLimitGrpc>>()
        .await;
    builder
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .add_service(health)
        .add_service(RateLimitServiceServer::new(RateLimitGrpc::new(app, clock)))
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        .await
        .map_err(|e| format!("gRPC server error: {e}"))
}

/// What one descriptor resolved to.
enum Resolved {
    /// No configured limit (unknown domain, no match, or replaced).
    None,
    Unlimited {
        counters: usize,
    },
    Blocked {
        unit: Unit,
        report: Report,
        shadow: bool,
    },
    Decide(Box<Pending>),
}

/// What `current_limit` says.
#[derive(Clone)]
struct Report {
    name: String,
    requests_per_unit: u32,
    unit: Unit,
    counters: Counters,
}

#[derive(Clone, Copy)]
enum Counters {
    Rule(usize),
    Override,
}

/// A limit to decide in the store.
struct Pending {
    policy: Policy,
    identity: Identity,
    cost: u64,
    shadow: bool,
    on_failure: Option<OnStoreFailure>,
    local: Option<Policy>,
    report: Report,
}

#[tonic::async_trait]
impl RateLimitService for RateLimitGrpc {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let metrics = &self.app.metrics;
        let authorization = request
            .metadata()
            .get("authorization")
            .map(|v| v.as_bytes());
        if !self
            .app
            .runtime
            .load()
            .config
            .tokens
            .admits(Guarded::Check, authorization)
        {
            metrics
                .unauthorized
                .get_or_create(&EndpointLabels { endpoint: "rls" })
                .inc();
            return Err(Status::unauthenticated(format!(
                "ShouldRateLimit needs the metadata `authorization: Bearer <token>` ({})",
                Guarded::Check.env()
            )));
        }
        let request = request.into_inner();
        let result = self.decide(&request).await;
        metrics
            .rls
            .requests
            .get_or_create(&crate::metrics::RlsCodeLabels {
                code: match &result {
                    Ok(r) if r.overall_code == Code::OverLimit as i32 => "over_limit",
                    Ok(_) => "ok",
                    Err(s) if s.code() == tonic::Code::InvalidArgument => "invalid_argument",
                    Err(_) => "unavailable",
                },
            })
            .inc();
        result.map(Response::new)
    }
}

impl RateLimitGrpc {
    async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        if request.domain.is_empty() {
            return Err(Status::invalid_argument(
                "rate limit domain must not be empty",
            ));
        }
        if request.descriptors.is_empty() {
            return Err(Status::invalid_argument(
                "rate limit descriptor list must not be empty",
            ));
        }
        if request.descriptors.len() > MAX_DESCRIPTORS {
            return Err(Status::invalid_argument(format!(
                "{} descriptors; at most {MAX_DESCRIPTORS} are accepted",
                request.descriptors.len()
            )));
        }
        let runtime = self.app.runtime.load();
        let live = &runtime.envoy;
        let rules = &live.rules;
        let max_key_bytes = runtime.config.server.max_key_bytes;
        let domain = request.domain.as_str();
        let known = rules.has_domain(domain);

        // Resolve every descriptor to a rule (or none), as envoyproxy does.
        let mut matched: Vec<Option<(usize, Vec<Option<String>>)>> =
            Vec::with_capacity(request.descriptors.len());
        let mut hits = Vec::with_capacity(request.descriptors.len());
        for (i, descriptor) in request.descriptors.iter().enumerate() {
            if descriptor.entries.is_empty() {
                return Err(Status::invalid_argument(format!(
                    "descriptors[{i}] has no entries"
                )));
            }
            if descriptor.entries.len() > MAX_ENTRIES {
                return Err(Status::invalid_argument(format!(
                    "descriptors[{i}] has {} entries; at most {MAX_ENTRIES} are accepted",
                    descriptor.entries.len()
                )));
            }
            hits.push(match &descriptor.hits_addend {
                Some(v) => v.value,
                None => u64::from(request.hits_addend.max(1)),
            });
            let entries: Vec<(&str, &str)> = descriptor
                .entries
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str()))
                .collect();
            let found = if known && descriptor.limit.is_none() {
                rules.find(domain, &entries).map(|m| {
                    let shared = m.shared.iter().map(|s| s.map(str::to_owned)).collect();
                    (m.rule, shared)
                })
            } else {
                None
            };
            matched.push(found);
        }
        // `replaces`: a matched limit named by another matched limit's
        // `replaces` is dropped (unlimited ones replace too).
        let replaced: HashSet<&str> = matched
            .iter()
            .flatten()
            .flat_map(|(rule, _)| rules.rules[*rule].replaces.iter().map(String::as_str))
            .collect();

        let mut resolved = Vec::with_capacity(request.descriptors.len());
        for (i, descriptor) in request.descriptors.iter().enumerate() {
            let identity = || {
                descriptor_identity(
                    domain,
                    descriptor
                        .entries
                        .iter()
                        .map(|e| (e.key.as_str(), e.value.as_str())),
                    matched[i].as_ref().map(|(_, s)| s.as_slice()),
                    max_key_bytes,
                )
                .map_err(|reason| Status::invalid_argument(format!("descriptors[{i}]: {reason}")))
            };
            if let Some(limit) = descriptor.limit.as_ref().filter(|_| known) {
                let unit = Unit::from_proto(limit.unit).ok_or_else(|| {
                    Status::invalid_argument(format!(
                        "descriptors[{i}].limit.unit: unknown unit {}",
                        limit.unit
                    ))
                })?;
                let report = Report {
                    name: String::new(),
                    requests_per_unit: limit.requests_per_unit,
                    unit,
                    counters: Counters::Override,
                };
                resolved.push(
                    match Window::new(u64::from(limit.requests_per_unit), unit.ms()) {
                        Some(window) => Resolved::Decide(Box::new(Pending {
                            policy: Policy::new(
                                format!("limit-override-{}", unit.name()),
                                Limits::FixedWindow(window),
                            ),
                            identity: identity()?,
                            cost: hits[i],
                            shadow: false,
                            on_failure: None,
                            local: None,
                            report,
                        })),
                        None => Resolved::Blocked {
                            unit,
                            report,
                            shadow: false,
                        },
                    },
                );
                continue;
            }
            let Some((index, _)) = matched[i] else {
                resolved.push(Resolved::None);
                continue;
            };
            let rule = &rules.rules[index];
            if rule.name.as_deref().is_some_and(|n| replaced.contains(n)) {
                resolved.push(Resolved::None);
                continue;
            }
            let report = Report {
                name: rule.name.clone().unwrap_or_default(),
                requests_per_unit: rule.requests_per_unit,
                unit: rule.unit,
                counters: Counters::Rule(index),
            };
            resolved.push(match &rule.kind {
                RuleKind::Unlimited => Resolved::Unlimited { counters: index },
                RuleKind::Blocked { unit } => Resolved::Blocked {
                    unit: *unit,
                    report,
                    shadow: rule.shadow_mode,
                },
                RuleKind::Limited { policy, bound } => {
                    let bound = bound.as_deref().and_then(|name| runtime.policy(name));
                    Resolved::Decide(Box::new(Pending {
                        policy: policy.clone(),
                        identity: identity()?,
                        cost: hits[i],
                        shadow: rule.shadow_mode,
                        on_failure: bound
                            .map(|b| b.serve.on_store_failure)
                            .or(rule.on_store_failure),
                        local: bound
                            .and_then(|b| b.local.clone())
                            .or_else(|| live.local[index].clone()),
                        report,
                    }))
                }
            });
        }

        // A blocked limit rejects any positive cost, so the request is over
        // and the store only peeks.
        let blocked_over = resolved
            .iter()
            .enumerate()
            .any(|(i, r)| matches!(r, Resolved::Blocked { shadow: false, .. }) && hits[i] > 0);
        let enforced: Vec<usize> = pending_indices(&resolved, false);
        let shadowed: Vec<usize> = pending_indices(&resolved, true);
        let mut decisions: Vec<Option<Decision>> = vec![None; resolved.len()];
        self.decide_batch(&resolved, &enforced, blocked_over, &mut decisions)
            .await?;
        self.decide_batch(&resolved, &shadowed, false, &mut decisions)
            .await?;

        let now_ms = self.clock.now_ms();
        let mut statuses = Vec::with_capacity(resolved.len());
        let mut over = false;
        let mut retry_ms: Option<u64> = Some(0);
        let mut headers_from: Vec<(&Pending, &Decision)> = Vec::new();
        for (i, r) in resolved.iter().enumerate() {
            let status = match r {
                Resolved::None => DescriptorStatus {
                    code: Code::Ok as i32,
                    ..DescriptorStatus::default()
                },
                Resolved::Unlimited { counters } => {
                    live.counters[*counters].unlimited.inc_by(hits[i]);
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
                } => {
                    let counters = counters_of(live, domain, report.counters);
                    let rejected = hits[i] > 0;
                    if let Some(c) = counters {
                        match (rejected, shadow) {
                            (false, _) => c.within_limit.inc_by(hits[i]),
                            (true, false) => c.over_limit.inc_by(hits[i]),
                            (true, true) => c.shadow_mode.inc_by(hits[i]),
                        };
                    }
                    if rejected && !shadow {
                        over = true;
                        retry_ms = None;
                    }
                    DescriptorStatus {
                        code: if rejected && !shadow {
                            Code::OverLimit
                        } else {
                            Code::Ok
                        } as i32,
                        current_limit: Some(current_limit(report)),
                        limit_remaining: 0,
                        duration_until_reset: Some(duration(unit.ms() - now_ms % unit.ms())),
                        ..DescriptorStatus::default()
                    }
                }
                Resolved::Decide(pending) => {
                    let Some(decision) = decisions[i].as_ref() else {
                        return Err(Status::internal("a descriptor was left undecided"));
                    };
                    let counters = counters_of(live, domain, pending.report.counters);
                    let rejected = !decision.allowed;
                    if let Some(c) = counters {
                        match (rejected, pending.shadow) {
                            (false, _) => c.within_limit.inc_by(pending.cost),
                            (true, false) => c.over_limit.inc_by(pending.cost),
                            (true, true) => c.shadow_mode.inc_by(pending.cost),
                        };
                    }
                    if rejected && !pending.shadow {
                        self.app.metrics.hot.record(
                            pending.policy.name(),
                            &pending.identity,
                            now_ms,
                        );
                        over = true;
                        retry_ms = match (retry_ms, decision.retry_after_ms) {
                            (Some(a), Some(b)) => Some(a.max(b)),
                            _ => None,
                        };
                    }
                    if !pending.shadow {
                        headers_from.push((pending, decision));
                    }
                    DescriptorStatus {
                        code: if rejected && !pending.shadow {
                            Code::OverLimit
                        } else {
                            Code::Ok
                        } as i32,
                        current_limit: Some(current_limit(&pending.report)),
                        limit_remaining: u32::try_from(decision.remaining.max(0))
                            .unwrap_or(u32::MAX),
                        duration_until_reset: Some(duration(decision.reset_after_ms)),
                        ..DescriptorStatus::default()
                    }
                }
            };
            statuses.push(status);
        }
        let response_headers_to_add = if runtime.config.server.grpc_response_headers {
            ratelimit_headers(&headers_from, over.then_some(retry_ms).flatten())
        } else {
            Vec::new()
        };
        Ok(RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            response_headers_to_add,
            ..RateLimitResponse::default()
        })
    }

    /// Decides `indices` of `resolved` in one all-or-nothing store call
    /// (peeks only, when `peek`), writing each decision in place.
    async fn decide_batch(
        &self,
        resolved: &[Resolved],
        indices: &[usize],
        peek: bool,
        out: &mut [Option<Decision>],
    ) -> Result<(), Status> {
        if indices.is_empty() {
            return Ok(());
        }
        let pendings: Vec<&Pending> = indices
            .iter()
            .filter_map(|&i| match &resolved[i] {
                Resolved::Decide(p) => Some(p.as_ref()),
                _ => None,
            })
            .collect();
        let checks: Vec<GuardedCheck<'_>> = pendings
            .iter()
            .map(|p| GuardedCheck {
                check: Check {
                    policy: &p.policy,
                    identity: &p.identity,
                    cost: if peek { 0 } else { p.cost },
                },
                on_failure: p.on_failure.unwrap_or_default(),
                local_policy: p.local.as_ref(),
            })
            .collect();
        let result = self.app.store.decide_all(&checks).await;
        if result.path.is_degraded() {
            self.app
                .metrics
                .rls
                .store_failures
                .get_or_create(&crate::metrics::RlsPathLabels {
                    path: result.path.name(),
                })
                .inc();
            // Limits without a declared failure mode answer as
            // envoyproxy/ratelimit does: an error, so Envoy's
            // `failure_mode_deny` decides.
            if result.path != DecisionPath::FailClosed
                && pendings.iter().any(|p| p.on_failure.is_none())
            {
                // The store's own words (addresses, Redis replies) stay in
                // the log; Envoy and its client get tollgate's.
                if self.app.degraded_log.should_log() {
                    tracing::warn!(
                        path = result.path.name(),
                        error = result.error.as_ref().map(ToString::to_string),
                        "ShouldRateLimit answered unavailable: the store cannot decide"
                    );
                }
                return Err(Status::unavailable(store_fault(result.error.as_ref())));
            }
        }
        if result.decisions.len() != indices.len() {
            return Err(Status::internal(
                "the store answered a different number of decisions",
            ));
        }
        for (&i, decision) in indices.iter().zip(result.decisions) {
            out[i] = Some(decision);
        }
        Ok(())
    }
}

/// Why the store could not decide, in tollgate's words: a store error's
/// text names hosts and replies a gRPC client has no business reading.
fn store_fault(error: Option<&StoreError>) -> &'static str {
    match error {
        None => "the rate limit store is unavailable (its circuit is open)",
        Some(StoreError::Timeout { .. }) => {
            "the rate limit store is unavailable (it did not answer in time)"
        }
        Some(StoreError::Unavailable(_)) => "the rate limit store is unavailable",
        Some(StoreError::Protocol(_) | StoreError::Config(_)) => {
            "the rate limit store is unavailable (its answer could not be used)"
        }
    }
}

fn pending_indices(resolved: &[Resolved], shadow: bool) -> Vec<usize> {
    resolved
        .iter()
        .enumerate()
        .filter(|(_, r)| matches!(r, Resolved::Decide(p) if p.shadow == shadow))
        .map(|(i, _)| i)
        .collect()
}

fn counters_of<'a>(live: &'a LiveRules, domain: &str, which: Counters) -> Option<&'a RlsCounters> {
    match which {
        Counters::Rule(i) => live.counters.get(i),
        Counters::Override => live.overrides.get(domain),
    }
}

fn current_limit(report: &Report) -> RateLimit {
    RateLimit {
        name: report.name.clone(),
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

/// The identity of a matched descriptor: the domain and every entry, each
/// length-prefixed so no two descriptors share one (`share_threshold`
/// wildcards put their pattern in place of the value).
fn descriptor_identity<'a>(
    domain: &str,
    entries: impl Iterator<Item = (&'a str, &'a str)>,
    shared: Option<&[Option<String>]>,
    max_bytes: usize,
) -> Result<Identity, String> {
    use std::fmt::Write as _;
    let mut text = String::with_capacity(64);
    let _ = write!(text, "rls:{}:{domain}", domain.len());
    for (i, (key, value)) in entries.enumerate() {
        let value = shared
            .and_then(|s| s.get(i))
            .and_then(|s| s.as_deref())
            .map_or(value, |pattern| pattern);
        let _ = write!(text, "|{}:{key}{}:{value}", key.len(), value.len());
    }
    if text.len() > max_bytes {
        return Err(format!(
            "the descriptor's entries take {} bytes; at most {max_bytes} are accepted (server.max_key_bytes)",
            text.len()
        ));
    }
    Ok(Identity::value(&text))
}

/// `RateLimit-Policy`, `RateLimit` (draft-11) and, when over the limit and
/// a wait can help, `Retry-After`.
fn ratelimit_headers(decided: &[(&Pending, &Decision)], retry_ms: Option<u64>) -> Vec<HeaderValue> {
    let mut headers = Vec::with_capacity(3);
    if !decided.is_empty() {
        let mut policy_field = String::new();
        let mut state_field = String::new();
        for (pending, decision) in decided {
            if !policy_field.is_empty() {
                policy_field.push_str(", ");
                state_field.push_str(", ");
            }
            policy_field.push_str(&policy_item(&pending.policy));
            state_item(&mut state_field, &pending.policy, decision);
        }
        headers.push(header(ratelimit_draft::POLICY_FIELD, policy_field));
        headers.push(header(ratelimit_draft::STATE_FIELD, state_field));
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
