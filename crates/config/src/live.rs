//! The policies as they serve: each policy's [`Plan`] (store, scope,
//! failure mode, lease, shards, hot lease, request ids, counters) and its
//! `RateLimit-Policy` item built once per load, so a request looks them up
//! and never builds them. Replaced whole on reload; never mutated.

use std::collections::HashMap;
use std::ops::Index;
use std::sync::Arc;

use tollgate_core::Policy;
use tollgate_limiter::{HotLeases, Lease, LimiterMetrics, Plan, PolicyCounters};

use crate::{Config, Scope, ServePolicy};

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

/// What building plans needs beyond the policies: where this instance is,
/// whether everything is in shadow, the counters to count in, and how the
/// door writes a policy's `RateLimit-Policy` item (the HTTP contract's
/// writer; this crate writes no header).
#[derive(Clone, Copy)]
pub struct PlanContext<'a> {
    /// This instance's region (`""` without regions).
    pub region: &'a str,
    /// `server.shadow_mode`: every plan in shadow.
    pub shadow_mode: bool,
    /// The limiter's metrics, which leases and counters register in.
    pub metrics: &'a LimiterMetrics,
    /// A policy's `RateLimit-Policy` item.
    pub policy_item: fn(&Policy) -> String,
}

/// One load's policies, live: in the config's order, by name, and by the
/// requests they match.
pub struct LivePolicies {
    policies: Vec<LivePolicy>,
    by_name: HashMap<String, usize, foldhash::fast::RandomState>,
}

impl LivePolicies {
    /// `previous`: the policies these replace, whose leases carry over
    /// where a policy's limit, terms and region are unchanged (a reload
    /// does not drop a region to its floor), and whose hot-lease blocks
    /// carry over where the policy, its rule and its store are unchanged.
    pub fn new(
        policies: &[ServePolicy],
        context: &PlanContext<'_>,
        previous: Option<&LivePolicies>,
    ) -> Self {
        let policies: Vec<LivePolicy> = policies
            .iter()
            .map(|serve| {
                let before = previous.and_then(|p| p.get(serve.declared.name()));
                LivePolicy {
                    plan: plan_of(serve, context, before),
                    policy_item: (context.policy_item)(&serve.policy),
                    serve: serve.clone(),
                }
            })
            .collect();
        let by_name = policies
            .iter()
            .enumerate()
            .map(|(i, p)| (p.serve.policy.name().to_owned(), i))
            .collect();
        Self { policies, by_name }
    }

    /// The policy named `name`.
    pub fn get(&self, name: &str) -> Option<&LivePolicy> {
        self.by_name.get(name).map(|&i| &self.policies[i])
    }

    /// The index of the policy named `name`, in the config's order.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The policies in the config's order.
    pub fn iter(&self) -> std::slice::Iter<'_, LivePolicy> {
        self.policies.iter()
    }

    /// How many policies there are.
    pub fn len(&self) -> usize {
        self.policies.len()
    }

    /// Whether there are none (a config of envoyproxy/ratelimit rules alone).
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// The policies whose `match` takes a request: its method, its
    /// normalized path ([`crate::normalize`]) and its host.
    pub fn matching<'a>(
        &'a self,
        method: &'a str,
        path: &'a str,
        host: &'a str,
    ) -> impl Iterator<Item = &'a LivePolicy> + 'a {
        self.policies
            .iter()
            .filter(move |p| p.serve.matcher.matches(method, path, host))
    }

    /// The leases of the leased policies.
    pub fn leases(&self) -> impl Iterator<Item = &Arc<Lease>> {
        self.policies.iter().filter_map(|p| p.plan.lease())
    }

    /// Every policy's plan.
    pub fn plans(&self) -> Vec<&Plan> {
        self.policies.iter().map(|p| &p.plan).collect()
    }
}

impl Index<usize> for LivePolicies {
    type Output = LivePolicy;

    fn index(&self, index: usize) -> &LivePolicy {
        &self.policies[index]
    }
}

impl<'a> IntoIterator for &'a LivePolicies {
    type Item = &'a LivePolicy;
    type IntoIter = std::slice::Iter<'a, LivePolicy>;

    fn into_iter(self) -> Self::IntoIter {
        self.policies.iter()
    }
}

impl Config {
    /// This config's policies with their plans, in its region and shadow
    /// mode; `previous` as [`LivePolicies::new`] takes it.
    pub fn live(
        &self,
        metrics: &LimiterMetrics,
        policy_item: fn(&Policy) -> String,
        previous: Option<&LivePolicies>,
    ) -> LivePolicies {
        let context = PlanContext {
            region: self.deployment.region.as_deref().unwrap_or_default(),
            shadow_mode: self.shadow_mode,
            metrics,
            policy_item,
        };
        LivePolicies::new(&self.policies, &context, previous)
    }
}

/// A configured policy's plan: its scope's store, failure mode, lease
/// (kept from `before`, the policy as it served until now, where it still
/// serves), shards (with the layouts `before` decided on carried over),
/// hot lease (kept likewise), request ids, counters, and shadow mode (its
/// own `mode`, or `server.shadow_mode`).
pub fn plan_of(
    serve: &ServePolicy,
    context: &PlanContext<'_>,
    before: Option<&LivePolicy>,
) -> Plan {
    plan_after(serve, context, before.map(|p| (&p.serve, &p.plan)))
}

/// [`plan_of`] for a door that keeps its plans its own way (a tower
/// layer's rules): `before` is the policy as it served until now and its
/// plan.
pub fn plan_after(
    serve: &ServePolicy,
    context: &PlanContext<'_>,
    before: Option<(&ServePolicy, &Plan)>,
) -> Plan {
    let PlanContext {
        region,
        shadow_mode,
        metrics,
        ..
    } = *context;
    let counters = PolicyCounters {
        split_turned_away: matches!(serve.scope, Scope::Split { .. })
            .then(|| metrics.split_turned_away(serve.policy.name(), region)),
        ..policy_counters(metrics, serve.policy.name(), serve.shadow || shadow_mode)
    };
    let mut plan = Plan::new(serve.policy.clone(), serve.store)
        .with_failure_mode(serve.on_store_failure)
        .with_shards(serve.shards)
        .with_retry(serve.retry)
        .with_counters(counters)
        .with_shadow(serve.shadow || shadow_mode);
    if let Scope::Leased(terms) = &serve.scope {
        let kept = before
            .and_then(|(_, plan)| plan.lease())
            .filter(|l| l.serves(&serve.declared, terms, region));
        plan = plan.with_lease(
            kept.cloned()
                .unwrap_or_else(|| Arc::new(Lease::new(&serve.declared, terms, region, metrics))),
        );
    }
    if let Some(rule) = serve.hot_lease {
        let kept = before
            .filter(|(was, _)| {
                was.policy == serve.policy
                    && was.store == serve.store
                    && was.hot_lease == serve.hot_lease
            })
            .and_then(|(_, plan)| plan.hot_lease().cloned());
        plan = plan.with_hot_lease(kept.unwrap_or_else(|| {
            Arc::new(HotLeases::new(
                rule,
                metrics.hot_lease_lost.clone(),
                metrics.hot_lease_returned.clone(),
            ))
        }));
    }
    // A changed `shards` reads the old layout's states for the policy's
    // rest: an exhausted identity stays exhausted across the reload.
    match before {
        Some((_, was)) => plan.with_carry_over(was),
        None => plan,
    }
}

/// `policy`'s counters; in shadow mode (`shadow`), a shadow policy's.
pub fn policy_counters(metrics: &LimiterMetrics, policy: &str, shadow: bool) -> PolicyCounters {
    if shadow {
        metrics.shadow_policy_counters(policy)
    } else {
        metrics.policy_counters(policy)
    }
}
