//! The config as it serves: a loaded [`ServeConfig`] with what serving it
//! needs precomputed once per load — each policy's counters, its
//! `RateLimit-Policy` item and its local share, envoyproxy/ratelimit rules
//! with theirs — so a request looks things up and never builds them.
//! Replaced whole on reload; never mutated.

use std::collections::HashMap;
use std::sync::Arc;

use tollgate_core::Policy;
use tollgate_store::{OnStoreFailure, local_policy};

use crate::config::{ServeConfig, ServePolicy};
use crate::envoy_rules::{EnvoyRules, RuleKind, Unit};
use crate::limiter::{HotLeases, Lease};
use crate::metrics::{Metrics, PolicyCounters, RlsCounters, ScopeLabels};
use crate::ratelimit_fields::policy_item;
use crate::scope::Scope;

/// A policy ready to serve: config, counters and its precomputed
/// `RateLimit-Policy` item.
pub struct LivePolicy {
    pub serve: ServePolicy,
    pub counters: PolicyCounters,
    pub policy_item: String,
    /// The policy scaled to its local share, for `on_store_failure: local`.
    pub local: Option<Policy>,
    /// Under `leased`: the share this instance holds.
    pub lease: Option<Arc<Lease>>,
    /// Under `shards: N`: each shard's policy (empty when not sharded).
    pub shards: Vec<Policy>,
    /// Which shard the next request of this instance tries first.
    pub shard_cursor: std::sync::atomic::AtomicU64,
    /// Under `hot_lease`: this instance's blocks (a reload keeps them while
    /// the policy, its rule and its store are unchanged).
    pub hot_leases: Option<Arc<HotLeases>>,
}

/// One loaded config, live.
pub struct LiveConfig {
    pub config: ServeConfig,
    pub policies: Vec<LivePolicy>,
    by_name: HashMap<String, usize, foldhash::fast::RandomState>,
    /// envoyproxy/ratelimit descriptor rules, for the gRPC service.
    pub envoy: LiveRules,
    /// Where leased policies' ledgers are: the global store.
    pub ledger: Option<usize>,
}

impl LiveConfig {
    /// `previous`: the config this one replaces, whose leases carry over
    /// where a policy's limit, terms and region are unchanged (a reload
    /// does not drop a region to its floor).
    pub fn new(config: ServeConfig, metrics: &Metrics, previous: Option<&LiveConfig>) -> Self {
        let region = config.deployment.region.clone().unwrap_or_default();
        let lease =
            |serve: &ServePolicy| {
                let Scope::Leased(terms) = &serve.scope else {
                    return None;
                };
                let kept = previous
                    .and_then(|p| p.policy(serve.declared.name()))
                    .and_then(|p| p.lease.as_ref())
                    .filter(|l| l.serves(&serve.declared, terms, &region));
                Some(kept.cloned().unwrap_or_else(|| {
                    Arc::new(Lease::new(&serve.declared, terms, &region, metrics))
                }))
            };
        let hot_leases = |serve: &ServePolicy| {
            let rule = serve.hot_lease?;
            let kept = previous
                .and_then(|p| p.policy(serve.declared.name()))
                .filter(|p| {
                    p.serve.policy == serve.policy
                        && p.serve.store == serve.store
                        && p.serve.hot_lease == serve.hot_lease
                })
                .and_then(|p| p.hot_leases.clone());
            Some(kept.unwrap_or_else(|| {
                Arc::new(HotLeases::new(
                    rule,
                    metrics.hot_lease_lost.clone(),
                    metrics.hot_lease_returned.clone(),
                ))
            }))
        };
        let policies: Vec<LivePolicy> = config
            .policies
            .iter()
            .map(|serve| LivePolicy {
                counters: PolicyCounters {
                    split_turned_away: matches!(serve.scope, Scope::Split { .. })
                        .then(|| metrics.split_turned_away(serve.policy.name(), &region)),
                    ..metrics.policy_counters(serve.policy.name())
                },
                local: local_share(&serve.policy, serve.on_store_failure),
                policy_item: policy_item(&serve.policy),
                lease: lease(serve),
                shards: shard_policies(&serve.policy, serve.shards),
                shard_cursor: std::sync::atomic::AtomicU64::new(0),
                hot_leases: hot_leases(serve),
                serve: serve.clone(),
            })
            .collect();
        let by_name = policies
            .iter()
            .enumerate()
            .map(|(i, p)| (p.serve.policy.name().to_owned(), i))
            .collect();
        for serve in &config.policies {
            metrics
                .scope_limit
                .get_or_create(&ScopeLabels {
                    policy: serve.policy.name().to_owned(),
                    scope: serve.scope.name(),
                    region: region.clone(),
                })
                .set(i64::try_from(serve.policy.limits().limit()).unwrap_or(i64::MAX));
        }
        let envoy = LiveRules::new(Arc::clone(&config.envoy), metrics);
        let ledger = config.stores.index("global");
        Self {
            config,
            policies,
            by_name,
            envoy,
            ledger,
        }
    }

    /// The leases of this config's leased policies.
    pub fn leases(&self) -> impl Iterator<Item = &Arc<Lease>> {
        self.policies.iter().filter_map(|p| p.lease.as_ref())
    }

    pub fn policy(&self, name: &str) -> Option<&LivePolicy> {
        self.by_name.get(name).map(|&i| &self.policies[i])
    }
}

/// Each shard's policy: an integer share of the limit (they sum to it),
/// the refill split exactly; none when not sharded.
fn shard_policies(policy: &Policy, shards: u16) -> Vec<Policy> {
    if shards <= 1 {
        return Vec::new();
    }
    let weights = vec![1; usize::from(shards)];
    (0..usize::from(shards))
        // Load refused a count that leaves a shard nothing.
        .filter_map(|i| tollgate_core::split_policy(policy, &weights, i))
        .collect()
}

/// The policy scaled to its local share, when it fails over to one.
fn local_share(policy: &Policy, on_failure: OnStoreFailure) -> Option<Policy> {
    match on_failure {
        OnStoreFailure::Local { share_percent } => Some(local_policy(policy, share_percent)),
        _ => None,
    }
}

/// The loaded envoyproxy/ratelimit rules with their metric counters,
/// resolved once per load.
pub struct LiveRules {
    pub rules: Arc<EnvoyRules>,
    pub counters: Vec<RlsCounters>,
    /// For `on_store_failure: local` rules: the limit scaled to its share.
    pub local: Vec<Option<Policy>>,
    /// For limited rules: their policy's outcomes and `RateLimit-Policy` item.
    pub limits: Vec<Option<RuleLimit>>,
    /// Counters of `limit` overrides, per configured domain.
    pub overrides: HashMap<String, RlsCounters>,
    /// The policies `limit` overrides decide as, by unit ([`Unit::index`]).
    pub override_policies: [OverridePolicy; 7],
}

/// What a limited rule's decisions are counted and announced as.
pub struct RuleLimit {
    pub counters: PolicyCounters,
    pub policy_item: String,
}

/// A request's `limit` override is a fixed window named
/// `limit-override-<unit>`, its outcomes counted under that name.
pub struct OverridePolicy {
    pub name: Arc<str>,
    /// `None` when no domain is configured (no override can apply), so a
    /// config without RLS rules shows no override series.
    pub counters: Option<PolicyCounters>,
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
                (RuleKind::Limited { policy, .. }, Some(mode)) => local_share(policy, mode),
                _ => None,
            })
            .collect();
        let limits = rules
            .rules
            .iter()
            .map(|r| match &r.kind {
                RuleKind::Limited { policy, .. } => Some(RuleLimit {
                    counters: metrics.policy_counters(policy.name()),
                    policy_item: policy_item(policy),
                }),
                RuleKind::Unlimited | RuleKind::Blocked { .. } => None,
            })
            .collect();
        let overrides = rules
            .domains()
            .map(|d| (d.to_owned(), metrics.rls.counters(d, "limit_override")))
            .collect();
        let override_policies = Unit::ALL.map(|unit| {
            let name: Arc<str> = format!("limit-override-{}", unit.name()).into();
            OverridePolicy {
                counters: (!rules.is_empty()).then(|| metrics.policy_counters(&name)),
                name,
            }
        });
        Self {
            rules,
            counters,
            local,
            limits,
            overrides,
            override_policies,
        }
    }

    /// The policy a `limit` override in `unit` decides as.
    pub fn override_policy(&self, unit: Unit) -> &OverridePolicy {
        &self.override_policies[unit.index()]
    }
}
