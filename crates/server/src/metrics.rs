//! Prometheus metrics. Per-policy counters are resolved once per config
//! load, so a decision only increments an atomic.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use tollgate_core::{Clock, SystemClock};

use crate::hot::{HOT_IDENTITIES, HOT_WINDOW_MS, HotIdentities, PolicyHot};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub policy: String,
    pub outcome: &'static str,
}

/// A policy, for counters of operator actions on it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    pub policy: String,
}

/// A policy's scope on this instance, and the region it serves.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScopeLabels {
    pub policy: String,
    pub scope: &'static str,
    pub region: String,
}

/// A leased policy in this instance's region.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabels {
    pub policy: String,
    pub region: String,
}

/// A renewal's outcome for a leased policy.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseOutcomeLabels {
    pub policy: String,
    pub region: String,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DegradedLabels {
    pub path: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    /// `check`, `rls`, `policies` or `metrics`.
    pub endpoint: &'static str,
}

pub struct Metrics {
    registry: Registry,
    decisions: Family<DecisionLabels, Counter>,
    replayed: Family<PolicyLabels, Counter>,
    pub decision_seconds: Histogram,
    pub store_keys: Gauge,
    /// Decisions answered from the rejected-until cache, without Redis.
    pub rejected_cache_answers: Gauge,
    /// Script calls made for single decisions (batched).
    pub store_script_calls: Gauge,
    /// Decisions admitted from a hot identity's local block.
    pub hot_lease_local: Counter,
    /// Blocks taken from the store for hot identities.
    pub hot_lease_blocks: Counter,
    /// Units of blocks neither spent nor given back.
    pub hot_lease_lost: Counter,
    /// Units of blocks given back to the store.
    pub hot_lease_returned: Counter,
    pub store_evictions: Gauge,
    pub reloads: Counter,
    pub reload_failures: Counter,
    pub bad_requests: Family<StatusLabels, Counter>,
    pub store_seconds: Histogram,
    pub store_errors: Family<ErrorLabels, Counter>,
    pub circuit_state: Gauge,
    /// 1 when the store answered its last readiness ping, else 0.
    pub store_up: Gauge,
    pub degraded: Family<DegradedLabels, Counter>,
    /// Connections closed on arrival because `server.max_connections` were open.
    pub refused_connections: Counter,
    /// Requests refused for a missing or wrong bearer token, by endpoint.
    pub unauthorized: Family<EndpointLabels, Counter>,
    /// HTTP connections dropped because their TLS handshake failed or
    /// timed out.
    pub tls_handshake_failures: Counter,
    /// Envoy's rate limit service (gRPC).
    pub rls: RlsMetrics,
    /// Identities an operator reset (`DELETE /v1/state`), by policy.
    pub state_resets: Family<PolicyLabels, Counter>,
    /// What each policy's scope leaves this instance to enforce.
    pub scope_limit: Family<ScopeLabels, Gauge>,
    /// Under `split`: units each region's share rejected, by policy.
    split_turned_away: Family<LeaseLabels, Counter>,
    /// The identities behind the most decisions and rejections, per policy.
    pub hot: Arc<HotIdentities>,
    lease: LeaseFamilies,
    clock: Arc<dyn Clock>,
}

/// The families of `leased` policies' series.
struct LeaseFamilies {
    share: Family<LeaseLabels, Gauge>,
    unleased: Family<LeaseLabels, Gauge>,
    demand: Family<LeaseLabels, Gauge>,
    outcomes: Family<LeaseOutcomeLabels, Counter>,
    floor_seconds: Family<LeaseLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
}

/// One leased policy's series on this instance.
#[derive(Clone)]
pub struct LeaseCounters {
    /// Units of the limit this instance may spend now: floor plus grant.
    pub share: Gauge,
    /// Units asked for in the last renewal period.
    pub demand: Gauge,
    /// The spare nobody held at the last grant (stranded capacity).
    pub unleased: Gauge,
    /// Renewal periods ended on the floor, in seconds.
    pub floor_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    outcomes: Family<LeaseOutcomeLabels, Counter>,
    labels: LeaseLabels,
}

impl LeaseCounters {
    /// The counter of one renewal outcome (granted, renewed, floor,
    /// new_ledger, held_by_others, refused, expired).
    pub fn outcome(&self, outcome: &'static str) -> Counter {
        self.outcomes
            .get_or_create(&LeaseOutcomeLabels {
                policy: self.labels.policy.clone(),
                region: self.labels.region.clone(),
                outcome,
            })
            .clone()
    }
}

/// The counters one policy increments.
#[derive(Clone, Debug)]
pub struct PolicyCounters {
    pub allowed: Counter,
    pub rejected: Counter,
    /// Its hot identities' summaries.
    pub hot: Arc<PolicyHot>,
    /// Admissions answered from a request id's record, consuming nothing
    /// (also counted in `allowed`).
    pub replayed: Counter,
    /// Under `split`: units this region's share rejected
    /// (`tollgate_split_turned_away_units`).
    pub split_turned_away: Option<Counter>,
}

impl Metrics {
    /// `clock` dates the hot identities' windows: the system clock in
    /// production, the tests' manual clock in tests.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        let mut registry = Registry::with_prefix("tollgate");
        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "decisions",
            "Decisions by policy and outcome (allowed, rejected)",
            decisions.clone(),
        );
        let replayed = Family::<PolicyLabels, Counter>::default();
        registry.register(
            "replayed_decisions",
            "Admissions answered from a request id's record (a retry inside its window), consuming nothing; also counted in tollgate_decisions_total",
            replayed.clone(),
        );
        // 10 µs to ~5 s.
        let decision_seconds = Histogram::new(exponential_buckets(0.000_01, 2.0, 20));
        registry.register(
            "decision_duration_seconds",
            "Time to decide one request (all its policies), store call included",
            decision_seconds.clone(),
        );
        let hot_lease_local = Counter::default();
        registry.register(
            "hot_lease_local_decisions",
            "Decisions admitted from a hot identity's local block (hot_lease), without a store call",
            hot_lease_local.clone(),
        );
        let hot_lease_lost = Counter::default();
        registry.register(
            "hot_lease_lost_units",
            "Units of the budget taken in a hot identity's block, never spent and not given back (the key's state could not take them back exactly, the store did not answer, or the instance dropped the block): consumed, never admitted",
            hot_lease_lost.clone(),
        );
        let hot_lease_returned = Counter::default();
        registry.register(
            "hot_lease_returned_units",
            "Units of a hot identity's block never spent and given back to the key's state when the block ended (hot_lease)",
            hot_lease_returned.clone(),
        );
        let hot_lease_blocks = Counter::default();
        registry.register(
            "hot_lease_blocks",
            "Blocks of a hot identity's budget taken from the store, one decision each (hot_lease)",
            hot_lease_blocks.clone(),
        );
        let rejected_cache_answers = Gauge::default();
        registry.register(
            "rejected_cache_answers",
            "Decisions answered since start from the rejected-until cache without a store call (exact: the key is rejected until then); beside tollgate_store_script_calls, how much the cache shields the store from an abusive client",
            rejected_cache_answers.clone(),
        );
        let store_script_calls = Gauge::default();
        registry.register(
            "store_script_calls",
            "Script calls made since start for single decisions (each may carry a batch of them)",
            store_script_calls.clone(),
        );
        let store_keys = Gauge::default();
        registry.register(
            "store_keys",
            "Keys held by the memory store",
            store_keys.clone(),
        );
        let store_evictions = Gauge::default();
        registry.register(
            "store_evictions",
            "Live keys the memory store evicted because it was full (since start)",
            store_evictions.clone(),
        );
        let reloads = Counter::default();
        registry.register(
            "config_reloads",
            "Configs loaded by reload",
            reloads.clone(),
        );
        let reload_failures = Counter::default();
        registry.register(
            "config_reload_failures",
            "Reloads refused because the new config was invalid",
            reload_failures.clone(),
        );
        let bad_requests = Family::<StatusLabels, Counter>::default();
        registry.register(
            "bad_requests",
            "Requests refused as malformed, by status",
            bad_requests.clone(),
        );
        let store_seconds = Histogram::new(exponential_buckets(0.000_05, 2.0, 16));
        registry.register(
            "store_call_duration_seconds",
            "Time of each call to the shared store (Redis)",
            store_seconds.clone(),
        );
        let store_errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "store_errors",
            "Shared-store calls that failed, by kind (timeout, unavailable, protocol, config)",
            store_errors.clone(),
        );
        let circuit_state = Gauge::default();
        registry.register(
            "store_circuit_state",
            "The shared store's circuit: 0 closed, 1 open, 2 half-open",
            circuit_state.clone(),
        );
        let store_up = Gauge::default();
        store_up.set(1);
        registry.register(
            "store_up",
            "1 when the store answered its last readiness ping (GET /readyz), 0 when it did not",
            store_up.clone(),
        );
        let state_resets = Family::<PolicyLabels, Counter>::default();
        registry.register(
            "state_resets",
            "Identities an operator reset with DELETE /v1/state, by policy",
            state_resets.clone(),
        );
        let scope_limit = Family::<ScopeLabels, Gauge>::default();
        registry.register(
            "scope_limit",
            "The limit (C or L) each policy's scope leaves this instance's store to enforce: the whole limit, or under split this region's share",
            scope_limit.clone(),
        );
        let split_turned_away = Family::<LeaseLabels, Counter>::default();
        registry.register(
            "split_turned_away_units",
            "Units a split policy's share for this region rejected (not while degraded): demand above the region's share, which a global scope would have admitted as far as the other regions left their shares unused — the capacity split strands, as this region's demand meets it",
            split_turned_away.clone(),
        );
        let degraded = Family::<DegradedLabels, Counter>::default();
        registry.register(
            "degraded_decisions",
            "Requests decided without the shared store, by path (fail_open, fail_closed, local) and outcome",
            degraded.clone(),
        );
        let refused_connections = Counter::default();
        registry.register(
            "refused_connections",
            "HTTP connections closed on arrival because server.max_connections were open",
            refused_connections.clone(),
        );
        let unauthorized = Family::<EndpointLabels, Counter>::default();
        registry.register(
            "unauthorized_requests",
            "Requests refused for a missing or wrong bearer token, by endpoint (check, rls, policies, hot, state, metrics)",
            unauthorized.clone(),
        );
        let tls_handshake_failures = Counter::default();
        registry.register(
            "tls_handshake_failures",
            "HTTP connections dropped because their TLS handshake failed or took longer than server.request_timeout_ms",
            tls_handshake_failures.clone(),
        );
        let lease = LeaseFamilies {
            share: Family::default(),
            unleased: Family::default(),
            demand: Family::default(),
            outcomes: Family::default(),
            floor_seconds: Family::default(),
        };
        registry.register(
            "lease_share",
            "Units of a leased policy's limit this instance may spend now (its region's floor plus its grant)",
            lease.share.clone(),
        );
        registry.register(
            "lease_unleased",
            "Units of a leased policy's spare that no region held at this instance's last grant: capacity stranded until demand claims it (or resting between regions)",
            lease.unleased.clone(),
        );
        registry.register(
            "lease_demand",
            "Units of a leased policy this instance was asked for in its last renewal period (what it reports to the ledger)",
            lease.demand.clone(),
        );
        registry.register(
            "lease_renewals",
            "Lease renewals by outcome: granted, renewed, floor (granted nothing), new_ledger, held_by_others (less than demand earned), refused (the ledger could not be asked), expired (a grant ran out unrenewed)",
            lease.outcomes.clone(),
        );
        registry.register(
            "lease_floor_seconds",
            "Time a leased policy spent on its region's floor alone, counted per renewal period",
            lease.floor_seconds.clone(),
        );
        let rls = RlsMetrics::register(&mut registry);
        let hot = Arc::new(HotIdentities::default());
        registry.register_collector(Box::new(HotCollector {
            hot: Arc::clone(&hot),
            clock: Arc::clone(&clock),
        }));
        Self {
            hot,
            clock,
            lease,
            refused_connections,
            unauthorized,
            tls_handshake_failures,
            rls,
            registry,
            store_seconds,
            store_errors,
            circuit_state,
            store_up,
            state_resets,
            scope_limit,
            split_turned_away,
            degraded,
            decisions,
            replayed,
            decision_seconds,
            store_keys,
            rejected_cache_answers,
            store_script_calls,
            hot_lease_local,
            hot_lease_blocks,
            hot_lease_lost,
            hot_lease_returned,
            store_evictions,
            reloads,
            reload_failures,
            bad_requests,
        }
    }

    /// A leased policy's series in `region`.
    pub fn lease_counters(&self, policy: &str, region: &str) -> LeaseCounters {
        let labels = LeaseLabels {
            policy: policy.to_owned(),
            region: region.to_owned(),
        };
        LeaseCounters {
            share: self.lease.share.get_or_create(&labels).clone(),
            demand: self.lease.demand.get_or_create(&labels).clone(),
            unleased: self.lease.unleased.get_or_create(&labels).clone(),
            floor_seconds: self.lease.floor_seconds.get_or_create(&labels).clone(),
            outcomes: self.lease.outcomes.clone(),
            labels,
        }
    }

    pub fn policy_counters(&self, policy: &str) -> PolicyCounters {
        let get = |outcome| {
            self.decisions
                .get_or_create(&DecisionLabels {
                    policy: policy.to_owned(),
                    outcome,
                })
                .clone()
        };
        PolicyCounters {
            allowed: get("allowed"),
            rejected: get("rejected"),
            hot: self.hot.policy(policy, self.clock.now_ms()),
            replayed: self
                .replayed
                .get_or_create(&PolicyLabels {
                    policy: policy.to_owned(),
                })
                .clone(),
            split_turned_away: None,
        }
    }

    /// A split policy's count of units its region's share rejected here.
    pub fn split_turned_away(&self, policy: &str, region: &str) -> Counter {
        self.split_turned_away
            .get_or_create(&LeaseLabels {
                policy: policy.to_owned(),
                region: region.to_owned(),
            })
            .clone()
    }

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
struct HotLabels {
    policy: String,
    identity: String,
}

/// Reports the hot identities' last whole window at each scrape.
struct HotCollector {
    hot: Arc<HotIdentities>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for HotCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HotCollector")
    }
}

impl Collector for HotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let report = self.hot.report(self.clock.now_ms());
        for (name, what) in [
            ("hot_identity_decisions", "Decisions"),
            ("hot_identity_rejections", "Rejections"),
        ] {
            let help = format!(
                "{what} in the last whole {} s window of the {} identities behind each policy's most {} (upper bounds: the Space-Saving algorithm never under-counts)",
                HOT_WINDOW_MS / 1000,
                HOT_IDENTITIES,
                what.to_lowercase()
            );
            let mut metric = encoder.encode_descriptor(name, &help, None, MetricType::Gauge)?;
            // By policy, then most first.
            for (policy, hot) in &report {
                let list = if name == "hot_identity_decisions" {
                    &hot.decisions
                } else {
                    &hot.rejections
                };
                // Only the last whole window: a series per scrape would
                // otherwise rise and reset within each window.
                for (identity, n) in list {
                    let labels = HotLabels {
                        policy: policy.clone(),
                        identity: identity.clone(),
                    };
                    metric
                        .encode_family(&labels)?
                        .encode_gauge(&i64::try_from(*n).unwrap_or(i64::MAX))?;
                }
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RlsLabels {
    pub domain: String,
    /// The configured descriptor key (`key_value.subkey`), never a request value.
    pub key: String,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RlsCodeLabels {
    pub code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RlsPathLabels {
    pub path: &'static str,
}

/// The metrics of `ShouldRateLimit`. Label sets come from the loaded
/// config (domains and descriptor keys), so their number is bounded by it.
pub struct RlsMetrics {
    hits: Family<RlsLabels, Counter>,
    pub requests: Family<RlsCodeLabels, Counter>,
    pub store_failures: Family<RlsPathLabels, Counter>,
}

/// The counters one configured descriptor increments, by hits.
#[derive(Clone, Debug)]
pub struct RlsCounters {
    pub within_limit: Counter,
    pub over_limit: Counter,
    /// Over the limit but answered OK (`shadow_mode`).
    pub shadow_mode: Counter,
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
            "ShouldRateLimit calls by answer (ok, over_limit, invalid_argument, unavailable)",
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
