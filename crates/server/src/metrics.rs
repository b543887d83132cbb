//! Prometheus metrics. Per-policy counters are resolved once per config
//! load, so a decision only increments an atomic.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    pub status: u16,
}

pub struct Metrics {
    registry: Registry,
    decisions: Family<DecisionLabels, Counter>,
    pub decision_seconds: Histogram,
    pub store_keys: Gauge,
    pub store_evictions: Gauge,
    pub reloads: Counter,
    pub reload_failures: Counter,
    pub bad_requests: Family<StatusLabels, Counter>,
}

/// The counters one policy increments.
#[derive(Clone, Debug)]
pub struct PolicyCounters {
    pub allowed: Counter,
    pub rejected: Counter,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tollgate");
        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "decisions",
            "Decisions by policy and outcome (allowed, rejected)",
            decisions.clone(),
        );
        // 10 µs to ~5 s.
        let decision_seconds = Histogram::new(exponential_buckets(0.000_01, 2.0, 20));
        registry.register(
            "decision_duration_seconds",
            "Time to decide one request (all its policies), store call included",
            decision_seconds.clone(),
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
        Self {
            registry,
            decisions,
            decision_seconds,
            store_keys,
            store_evictions,
            reloads,
            reload_failures,
            bad_requests,
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
        }
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
        Self::new()
    }
}
