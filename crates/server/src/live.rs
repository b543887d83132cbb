//! The config as it serves: a loaded [`ServeConfig`] with what serving it
//! needs built once per load — each policy's [`Plan`] (store, scope,
//! failure mode, lease, shards, hot lease, request ids, counters) and its
//! `RateLimit-Policy` item, envoyproxy/ratelimit rules with theirs — so a
//! request looks things up and never builds them. Replaced whole on
//! reload; never mutated.

use std::collections::HashMap;
use std::sync::Arc;

use tollgate_limiter::{HotLeases, KeptPlans, Lease, Plan};

use crate::config::{ServeConfig, ServePolicy};
use crate::envoy_rules::{EnvoyRules, RuleKind, Unit};
use crate::metrics::{Metrics, PolicyCounters, RlsCounters, ScopeLabels};
use crate::ratelimit_fields::policy_item;
use crate::scope::Scope;

/// A policy ready to serve: its config, its plan and its precomputed
/// `RateLimit-Policy` item.
pub struct LivePolicy {
    /// The policy as the config states it.
    pub serve: ServePolicy,
    /// How its checks are decided, whichever door asks.
    pub plan: Plan,
    /// Its `RateLimit-Policy` item.
    pub policy_item: String,
}

/// One loaded config, live.
pub struct LiveConfig {
    /// The config.
    pub config: ServeConfig,
    /// Its policies, in the config's order.
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
    /// does not drop a region to its floor), and whose hot-lease blocks
    /// carry over where the policy, its rule and its store are unchanged.
    pub fn new(config: ServeConfig, metrics: &Metrics, previous: Option<&LiveConfig>) -> Self {
        metrics.limiter.set_hot_series(config.hot_series.clone());
        let region = config.deployment.region.clone().unwrap_or_default();
        let shadow_mode = config.server.shadow_mode;
        let policies: Vec<LivePolicy> = config
            .policies
            .iter()
            .map(|serve| LivePolicy {
                plan: plan_of(serve, shadow_mode, &region, metrics, previous),
                policy_item: policy_item(&serve.policy),
                serve: serve.clone(),
            })
            .collect();
        let by_name: HashMap<String, usize, foldhash::fast::RandomState> = policies
            .iter()
            .enumerate()
            .map(|(i, p)| (p.serve.policy.name().to_owned(), i))
            .collect();
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
                by_name
                    .get(name)
                    .map(|&i| (i, policies[i].policy_item.as_str()))
            },
        );
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
        self.policies.iter().filter_map(|p| p.plan.lease())
    }

    /// Every policy's plan.
    pub fn plans(&self) -> Vec<&Plan> {
        self.policies.iter().map(|p| &p.plan).collect()
    }

    /// The policy named `name`.
    pub fn policy(&self, name: &str) -> Option<&LivePolicy> {
        self.by_name.get(name).map(|&i| &self.policies[i])
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

/// A configured policy's plan: its scope's store, failure mode, lease
/// (kept from `previous` where it still serves), shards (with the layouts
/// `previous` decided on carried over), hot lease (kept likewise), request
/// ids, counters, and shadow mode (its own `mode`, or `server.shadow_mode`).
fn plan_of(
    serve: &ServePolicy,
    shadow_mode: bool,
    region: &str,
    metrics: &Metrics,
    previous: Option<&LiveConfig>,
) -> Plan {
    let before = previous.and_then(|p| p.policy(serve.declared.name()));
    let counters = PolicyCounters {
        split_turned_away: matches!(serve.scope, Scope::Split { .. }).then(|| {
            metrics
                .limiter
                .split_turned_away(serve.policy.name(), region)
        }),
        ..shadow_counters(metrics, serve.policy.name(), serve.shadow || shadow_mode)
    };
    let mut plan = Plan::new(serve.policy.clone(), serve.store)
        .with_failure_mode(serve.on_store_failure)
        .with_shards(serve.shards)
        .with_retry(serve.retry)
        .with_counters(counters)
        .with_shadow(serve.shadow || shadow_mode);
    if let Scope::Leased(terms) = &serve.scope {
        let kept = before
            .and_then(|p| p.plan.lease())
            .filter(|l| l.serves(&serve.declared, terms, region));
        plan = plan.with_lease(kept.cloned().unwrap_or_else(|| {
            Arc::new(Lease::new(&serve.declared, terms, region, &metrics.limiter))
        }));
    }
    if let Some(rule) = serve.hot_lease {
        let kept = before
            .filter(|p| {
                p.serve.policy == serve.policy
                    && p.serve.store == serve.store
                    && p.serve.hot_lease == serve.hot_lease
            })
            .and_then(|p| p.plan.hot_lease().cloned());
        plan = plan.with_hot_lease(kept.unwrap_or_else(|| {
            Arc::new(HotLeases::new(
                rule,
                metrics.limiter.hot_lease_lost.clone(),
                metrics.limiter.hot_lease_returned.clone(),
            ))
        }));
    }
    // A changed `shards` reads the old layout's states for the policy's
    // rest: an exhausted identity stays exhausted across the reload.
    match before {
        Some(before) => plan.with_carry_over(&before.plan),
        None => plan,
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
    PolicyCounters {
        shadow: shadow.then(|| metrics.limiter.shadow_counter(policy)),
        ..metrics.policy_counters(policy)
    }
}
