//! The server's Prometheus metrics: the limiter's series (decisions,
//! stores, leases, hot identities: [`LimiterMetrics`]) and beside them what
//! only a server has — reloads, malformed requests, connections, bearer
//! tokens, operator resets, each policy's scope, Envoy's RLS, HTTP
//! requests by endpoint, the build, and the process (`process_*`).

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tollgate_core::{Clock, SystemClock};
use tollgate_limiter::LatencyHistogram;
use tollgate_limiter::LimiterMetrics;

use crate::process_metrics::ProcessCollector;

pub use tollgate_limiter::{PolicyCounters, PolicyLabels};

/// A policy's scope on this instance, and the region it serves.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScopeLabels {
    /// The policy's name.
    pub policy: String,
    /// Its scope, as the config spells it.
    pub scope: &'static str,
    /// This instance's region.
    pub region: String,
}

/// A malformed request's status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    /// The HTTP status it was refused with.
    pub status: u16,
}

/// An endpoint, for refused bearer tokens.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    /// `check`, `rls`, `policies`, `hot`, `state`, `metrics`, `authorize`
    /// or `ui`.
    pub endpoint: &'static str,
}

/// An HTTP request's route and answer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// The route template (`/v1/check`, `/readyz`, …), or `unmatched`:
    /// never the raw path, so the values are bounded.
    pub endpoint: &'static str,
    /// The status answered.
    pub status: u16,
}

/// An HTTP route, for its latency.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// The route template, as [`HttpLabels::endpoint`].
    pub endpoint: &'static str,
}

/// A connection rule, for the connections it refused.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabels {
    /// `max_connections_per_peer` or `proxy_reserved_connections`.
    pub rule: &'static str,
}

/// Whose connections: trusted proxies' or everyone else's.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabels {
    /// `proxy` (`trusted_proxies`, the proxy socket) or `other`.
    pub peer: &'static str,
}

/// The build, as `tollgate_build_info` labels it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// Every series the server exports.
pub struct Metrics {
    registry: Registry,
    /// What every decision records, whatever door it came in by.
    pub limiter: Arc<LimiterMetrics>,
    /// Configs loaded by reload.
    pub reloads: Counter,
    /// Reloads refused because the new config was invalid.
    pub reload_failures: Counter,
    /// Requests refused as malformed, by status.
    pub bad_requests: Family<StatusLabels, Counter>,
    /// Connections closed on arrival because `server.max_connections` were open.
    pub refused_connections: Counter,
    /// Connections closed on arrival by a peer's rule, by rule.
    pub refused_by_rule: Family<RuleLabels, Counter>,
    /// Connections from peers that are not trusted proxies closed for
    /// sending no request head (gRPC: no first byte) in time.
    pub header_timeouts: Counter,
    /// Connections open now, every listener together, by peer.
    pub open_connections: Family<PeerLabels, Gauge>,
    /// Requests refused for a missing or wrong bearer token, by endpoint.
    pub unauthorized: Family<EndpointLabels, Counter>,
    /// HTTP connections dropped because their TLS handshake failed or
    /// timed out.
    pub tls_handshake_failures: Counter,
    /// Capture lines dropped because the trace writer's queue was full or
    /// the file reached its cap (`server.trace`).
    pub trace_dropped: Counter,
    /// Envoy's rate limit service (gRPC).
    pub rls: RlsMetrics,
    /// Identities an operator reset (`DELETE /v1/state`), by policy.
    pub state_resets: Family<PolicyLabels, Counter>,
    /// What each policy's scope leaves this instance to enforce.
    pub scope_limit: Family<ScopeLabels, Gauge>,
    /// HTTP requests answered, by route and status.
    pub http_requests: Family<HttpLabels, Counter>,
    /// Time to answer an HTTP request, by route.
    pub http_seconds: Family<RouteLabels, LatencyHistogram>,
}

/// A metric registered under `name`.
fn registered<M>(registry: &mut Registry, name: &str, help: &str) -> M
where
    M: Default + Clone + prometheus_client::registry::Metric,
{
    let metric = M::default();
    registry.register(name, help, metric.clone());
    metric
}

impl Metrics {
    /// `clock` dates the hot identities' windows: the system clock in
    /// production, the tests' manual clock in tests.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        let mut registry = Registry::default();
        // The process series keep their standard, unprefixed names.
        registry.register_collector(Box::new(ProcessCollector));
        let r = registry.sub_registry_with_prefix("tollgate");
        let build: Family<BuildLabels, Gauge> = registered(
            r,
            "build_info",
            "1, labelled with the version of tollgate that serves",
        );
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        let http_requests = registered(
            r,
            "http_requests",
            "HTTP requests answered, by endpoint (the route, never the raw path) and status",
        );
        let http_seconds = Family::<RouteLabels, LatencyHistogram>::new_with_constructor(|| {
            // 10 µs to ~5 s.
            LatencyHistogram::exponential(10, 2, 20)
        });
        r.register(
            "http_request_duration_seconds",
            "Time to answer an HTTP request, by endpoint, in seconds, measured on the monotonic clock",
            http_seconds.clone(),
        );
        let limiter = Arc::new(LimiterMetrics::register(r, clock));
        let reloads = registered(r, "config_reloads", "Configs loaded by reload");
        let reload_failures = registered(
            r,
            "config_reload_failures",
            "Reloads refused because the new config was invalid",
        );
        let bad_requests = registered(
            r,
            "bad_requests",
            "Requests refused as malformed, by status",
        );
        let state_resets = registered(
            r,
            "state_resets",
            "Identities an operator reset with DELETE /v1/state, by policy",
        );
        let scope_limit = registered(
            r,
            "scope_limit",
            "The limit (C or L) each policy's scope leaves this instance's store to enforce: the whole limit, or under split this region's share",
        );
        let refused_connections = registered(
            r,
            "refused_connections",
            "Connections closed on arrival because server.max_connections were open (every listener together)",
        );
        let refused_by_rule = registered(
            r,
            "connections_refused",
            "Connections closed on arrival from a peer that is not a trusted proxy, by rule: max_connections_per_peer (the peer held its share) or proxy_reserved_connections (only the trusted proxies' slots were left)",
        );
        let header_timeouts = registered(
            r,
            "header_timeouts",
            "Connections from peers that are not trusted proxies closed for sending no complete request head within server.header_timeout_ms (gRPC: no first byte), at connect or between keep-alive requests",
        );
        let open_connections = registered(
            r,
            "open_connections",
            "Connections open now, every listener together, by peer: proxy (server.trusted_proxies, server.proxy_socket) or other",
        );
        let unauthorized = registered(
            r,
            "unauthorized_requests",
            "Requests refused for a missing or wrong bearer token, by endpoint (check, rls, policies, hot, state, metrics, authorize, ui)",
        );
        let tls_handshake_failures = registered(
            r,
            "tls_handshake_failures",
            "Connections dropped because their TLS handshake failed or took longer than its bound (server.header_timeout_ms; for a trusted proxy server.request_timeout_ms)",
        );
        let trace_dropped = registered(
            r,
            "trace_dropped",
            "Decisions server.trace sampled but did not write: its queue was full or its file reached max_bytes",
        );
        let rls = RlsMetrics::register(r);
        Self {
            registry,
            limiter,
            reloads,
            reload_failures,
            bad_requests,
            refused_connections,
            refused_by_rule,
            header_timeouts,
            open_connections,
            unauthorized,
            tls_handshake_failures,
            trace_dropped,
            rls,
            state_resets,
            scope_limit,
            http_requests,
            http_seconds,
        }
    }

    /// The counters `policy`'s decisions increment.
    pub fn policy_counters(&self, policy: &str) -> PolicyCounters {
        self.limiter.policy_counters(policy)
    }

    /// Every series in Prometheus's text format.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(4096);
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(Arc::new(SystemClock))
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
/// A configured descriptor's hits by outcome.
pub struct RlsLabels {
    /// The rule's domain.
    pub domain: String,
    /// The configured descriptor key (`key_value.subkey`), never a request value.
    pub key: String,
    /// `within_limit`, `over_limit`, `shadow_mode` or `unlimited`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
/// A `ShouldRateLimit` call's answer.
pub struct RlsCodeLabels {
    /// `ok`, `over_limit`, `invalid_argument` or `unavailable`.
    pub code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
/// The path that answered when the store failed.
pub struct RlsPathLabels {
    /// `fail_open`, `fail_closed` or `local`.
    pub path: &'static str,
}

/// The metrics of `ShouldRateLimit`. Label sets come from the loaded
/// config (domains and descriptor keys), so their number is bounded by it.
pub struct RlsMetrics {
    hits: Family<RlsLabels, Counter>,
    /// Calls by answer.
    pub requests: Family<RlsCodeLabels, Counter>,
    /// Store calls that failed, by the path that answered instead.
    pub store_failures: Family<RlsPathLabels, Counter>,
}

/// The counters one configured descriptor increments, by hits.
#[derive(Clone, Debug)]
pub struct RlsCounters {
    /// Hits within the limit.
    pub within_limit: Counter,
    /// Hits over the limit.
    pub over_limit: Counter,
    /// Over the limit but answered OK (`shadow_mode`).
    pub shadow_mode: Counter,
    /// Hits of an `unlimited` rule.
    pub unlimited: Counter,
}

impl RlsMetrics {
    fn register(registry: &mut Registry) -> Self {
        let hits = Family::<RlsLabels, Counter>::default();
        registry.register(
            "rls_hits",
            "ShouldRateLimit hits by domain, descriptor key and outcome (within_limit, over_limit, shadow_mode, unlimited)",
            hits.clone(),
        );
        let requests = Family::<RlsCodeLabels, Counter>::default();
        registry.register(
            "rls_requests",
            "ShouldRateLimit calls by answer (ok, over_limit, refused, invalid_argument, unavailable)",
            requests.clone(),
        );
        let store_failures = Family::<RlsPathLabels, Counter>::default();
        registry.register(
            "rls_store_failures",
            "ShouldRateLimit store calls that failed, by the path that answered instead",
            store_failures.clone(),
        );
        Self {
            hits,
            requests,
            store_failures,
        }
    }

    /// The counters of one configured descriptor.
    pub fn counters(&self, domain: &str, key: &str) -> RlsCounters {
        let get = |outcome| {
            self.hits
                .get_or_create(&RlsLabels {
                    domain: domain.to_owned(),
                    key: key.to_owned(),
                    outcome,
                })
                .clone()
        };
        RlsCounters {
            within_limit: get("within_limit"),
            over_limit: get("over_limit"),
            shadow_mode: get("shadow_mode"),
            unlimited: get("unlimited"),
        }
    }
}
