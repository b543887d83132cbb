//! The config as it serves: a loaded [`ServeConfig`] with what serving it
//! needs built once per load — each policy's plan and `RateLimit-Policy`
//! item ([`LivePolicies`], built by `tollgate_config` as every door builds
//! them), envoyproxy/ratelimit rules with theirs — so a request looks
//! things up and never builds them. Replaced whole on reload; never mutated.

use std::collections::HashMap;
use std::sync::Arc;

use tollgate_config::{LivePolicies, PlanContext, policy_counters};
use tollgate_limiter::{KeptPlans, Lease, Plan};

use crate::config::ServeConfig;
use crate::envoy_rules::{EnvoyRules, RuleKind, Unit};
use crate::metrics::{Metrics, PolicyCounters, RlsCounters, ScopeLabels};
use tollgate_http::policy_item;

pub use tollgate_config::LivePolicy;

/// One loaded config, live.
pub struct LiveConfig {
    /// The config.
    pub config: ServeConfig,
    /// Its policies, in the config's order.
    pub policies: LivePolicies,
    /// envoyproxy/ratelimit descriptor rules, for the gRPC service.
    pub envoy: LiveRules,
    /// Where leased policies' ledgers are: the global store.
    pub ledger: Option<usize>,
}

impl LiveConfig {
    /// `previous`: the config this one replaces, whose leases carry over
    /// where a policy's limit, terms and region are unchanged (a reload
    /// does not drop a region to its floor), and whose hot-lease blocks
    /// carry over where the policy, its rule and its store are unchanged.
    pub fn new(config: ServeConfig, metrics: &Metrics, previous: Option<&LiveConfig>) -> Self {
        metrics.limiter.set_hot_series(config.hot_series.clone());
        let region = config.deployment.region.clone().unwrap_or_default();
        let shadow_mode = config.server.shadow_mode;
        let context = PlanContext {
            region: &region,
            shadow_mode,
            metrics: &metrics.limiter,
            policy_item,
        };
        let policies = LivePolicies::new(&config.policies, &context, previous.map(|p| &p.policies));
        // Only where regions are told: without one, every scope leaves
        // the whole limit, and a `region=""` series says nothing.
        if config.deployment.region.is_some() {
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
        }
        let envoy = LiveRules::new(
            Arc::clone(&config.envoy),
            metrics,
            (config.stores.default_index(), shadow_mode),
            |name| {
                policies
                    .index_of(name)
                    .map(|i| (i, policies[i].policy_item.as_str()))
            },
        );
        let ledger = config.stores.index("global");
        Self {
            config,
            policies,
            envoy,
            ledger,
        }
    }

    /// The leases of this config's leased policies.
    pub fn leases(&self) -> impl Iterator<Item = &Arc<Lease>> {
        self.policies.leases()
    }

    /// Every policy's plan.
    pub fn plans(&self) -> Vec<&Plan> {
        self.policies.plans()
    }

    /// The policy named `name`.
    pub fn policy(&self, name: &str) -> Option<&LivePolicy> {
        self.policies.get(name)
    }
}

/// The limiter's upkeep keeps the live config's plans, re-read at each
/// turn, so a reload's plans are kept from its next one.
impl KeptPlans for LiveConfig {
    fn plans(&self) -> Vec<&Plan> {
        LiveConfig::plans(self)
    }

    fn ledger(&self) -> Option<usize> {
        self.ledger
    }
}

/// The loaded envoyproxy/ratelimit rules with their metric counters and
/// plans, resolved once per load.
pub struct LiveRules {
    /// The rules.
    pub rules: Arc<EnvoyRules>,
    /// Each rule's envoyproxy-style hit counters.
    pub counters: Vec<RlsCounters>,
    /// For limited rules: how they are decided and announced.
    pub limits: Vec<Option<RuleLimit>>,
    /// Counters of `limit` overrides, per configured domain.
    pub overrides: HashMap<String, RlsCounters>,
    /// The policies `limit` overrides decide as, by unit ([`Unit::index`]).
    pub override_policies: [OverridePolicy; 7],
}

/// How a limited rule's checks are decided.
pub enum RulePlan {
    /// An unbound rule: its own plan, on the config's most shared store,
    /// in its own namespace (as envoyproxy/ratelimit keeps it).
    Own(Box<Plan>),
    /// A rule bound to a tollgate policy (`tollgate: {policy: p}`): that
    /// policy's plan, by its index in [`LiveConfig::policies`] — the same
    /// store, scope, shards, hot lease and budget as every other door.
    Bound(usize),
}

/// What a limited rule's decisions are decided, counted and announced as.
pub struct RuleLimit {
    /// Its plan.
    pub plan: RulePlan,
    /// Its `RateLimit-Policy` item (a bound rule's policy's).
    pub policy_item: String,
}

impl RuleLimit {
    /// The plan its checks are decided under, in `live`.
    pub fn plan<'a>(&'a self, live: &'a LiveConfig) -> &'a Plan {
        match &self.plan {
            RulePlan::Own(plan) => plan,
            RulePlan::Bound(i) => &live.policies[*i].plan,
        }
    }
}

/// A request's `limit` override is a fixed window named
/// `limit-override-<unit>`, its outcomes counted under that name.
pub struct OverridePolicy {
    /// `limit-override-<unit>`.
    pub name: Arc<str>,
    /// `None` when no domain is configured (no override can apply), so a
    /// config without RLS rules shows no override series.
    pub counters: Option<PolicyCounters>,
}

impl LiveRules {
    /// `store`: where unbound rules decide (the most shared store), and
    /// `server.shadow_mode`, which puts them in shadow mode;
    /// `policy`: a configured policy's index and `RateLimit-Policy` item
    /// by name, for bound rules.
    pub fn new<'p>(
        rules: Arc<EnvoyRules>,
        metrics: &Metrics,
        (store, shadow_mode): (usize, bool),
        policy_by_name: impl Fn(&str) -> Option<(usize, &'p str)>,
    ) -> Self {
        let counters = rules
            .rules
            .iter()
            .map(|r| metrics.rls.counters(&r.domain, &r.key))
            .collect();
        let limits = rules
            .rules
            .iter()
            .map(|r| match &r.kind {
                RuleKind::Limited { policy, bound } => {
                    let bound = bound.as_deref().and_then(&policy_by_name);
                    if let Some((i, item)) = bound {
                        return Some(RuleLimit {
                            plan: RulePlan::Bound(i),
                            policy_item: item.to_owned(),
                        });
                    }
                    let plan = Plan::new(policy.clone(), store)
                        .with_counters(shadow_counters(metrics, policy.name(), shadow_mode))
                        .with_shadow(shadow_mode);
                    let plan = RulePlan::Own(Box::new(match r.on_store_failure {
                        Some(mode) => plan.with_failure_mode(mode),
                        None => plan,
                    }));
                    Some(RuleLimit {
                        plan,
                        policy_item: policy_item(policy),
                    })
                }
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
                counters: (!rules.is_empty()).then(|| shadow_counters(metrics, &name, shadow_mode)),
                name,
            }
        });
        Self {
            rules,
            counters,
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

/// `policy`'s counters, with its shadow-mode count when `shadow`.
fn shadow_counters(metrics: &Metrics, policy: &str, shadow: bool) -> PolicyCounters {
    policy_counters(&metrics.limiter, policy, shadow)
}
