//! Each descriptor of a `ShouldRateLimit` request resolved to what decides
//! it, as envoyproxy/ratelimit resolves it: a request's own `limit`
//! override, else the most specific configured rule (minus those another
//! matched rule `replaces`), else nothing. What a limit needs to be decided
//! and reported — its plan, identity and cost — is gathered here, borrowed
//! from the live config where it can be. A rule bound to a tollgate policy
//! decides under that policy's plan with the identity every door spells
//! alike: the composite of the descriptor's entries (`tenant=acme` is
//! `/v1/check`'s `{"tenant": "acme"}`), so a policy is one budget whichever
//! door asks.

use std::borrow::Cow;
use std::collections::HashSet;
use std::ops::Deref;

use tollgate_core::{Identity, Limits, Policy, Window};
use tollgate_limiter::Plan;
use tonic::Status;

use super::identity::{IdentityFault, bound_identity, descriptor_identity};
use super::wire::{Descriptor, Entry, Override, RateLimitCall};
use crate::envoy_rules::{EnvoyRules, Matched, RuleKind, Unit};
use crate::live::{LiveConfig, RulePlan};
use crate::metrics::RlsCounters;
use tollgate_http::policy_item;

/// What one descriptor resolved to.
pub(super) enum Resolved<'a> {
    /// No configured limit (unknown domain, no match, or replaced).
    None,
    /// `unlimited: true`: OK without the store; in `quota_mode` (and not
    /// in shadow mode), a quota limit never over.
    Unlimited {
        rls: &'a RlsCounters,
        quota: bool,
        hits: u64,
    },
    /// `requests_per_unit: 0`: over for any positive cost, without the store.
    Blocked {
        unit: Unit,
        report: Report<'a>,
        shadow: bool,
        /// In `quota_mode`: one quota limit among the request's, always
        /// over, which alone does not make the request over.
        quota: bool,
        hits: u64,
    },
    /// A limit the store decides.
    Decide(Box<Pending<'a>>),
    /// What the client sent cannot key a budget (an empty identity part,
    /// a `client_ip` that is no address, entries too long): the request is
    /// over and nothing is decided, as forward auth answers such a request
    /// 400 — never an error Envoy's `failure_mode_deny: false` lets through.
    Refused(String),
}

/// What `current_limit` says, and the envoyproxy-style counters it counts in.
pub(super) struct Report<'a> {
    pub name: &'a str,
    pub requests_per_unit: u32,
    pub unit: Unit,
    pub rls: Option<&'a RlsCounters>,
}

/// The plan a limit decides under: a configured one, or one made for a
/// request's own `limit` override.
pub(super) enum PlanRef<'a> {
    Live(&'a Plan),
    Own(Box<Plan>),
}

impl Deref for PlanRef<'_> {
    type Target = Plan;
    fn deref(&self) -> &Plan {
        match self {
            PlanRef::Live(plan) => plan,
            PlanRef::Own(plan) => plan,
        }
    }
}

/// A limit to decide in the store.
pub(super) struct Pending<'a> {
    /// How it is decided: its policy, store, scope, failure mode, counters.
    pub plan: PlanRef<'a>,
    /// Its `RateLimit-Policy` item, when precomputed (a configured rule).
    pub policy_item: Option<&'a str>,
    pub identity: Identity,
    pub cost: u64,
    /// The rule's `shadow_mode`: decided in a batch of its own, nobody's
    /// verdict.
    pub shadow: bool,
    /// The rule's `quota_mode`: decided on its own; over only with every
    /// quota limit of the request.
    pub quota: bool,
    /// `is_negative_hits`: `cost` units given back, then looked at.
    pub refund: bool,
    pub report: Report<'a>,
}

impl Pending<'_> {
    /// Whether its rejection makes the request over: neither the rule
    /// nor its plan (a policy's `mode: shadow`, `server.shadow_mode`) is
    /// in shadow mode.
    pub fn enforced(&self) -> bool {
        !self.shadow && !self.plan.shadow()
    }

    /// The `RateLimit-Policy` item, written only for a request's override.
    pub fn policy_item(&self) -> Cow<'_, str> {
        match self.policy_item {
            Some(item) => Cow::Borrowed(item),
            None => Cow::Owned(policy_item(self.plan.policy())),
        }
    }
}

/// One request's descriptors against one live config.
pub(super) struct Resolver<'a> {
    live: &'a LiveConfig,
    call: &'a RateLimitCall<'a>,
    domain: &'a str,
    /// Whether the domain is configured; an unknown one limits nothing.
    known: bool,
    /// The cost of a descriptor without its own `hits_addend`.
    hits: u64,
}

impl<'a> Resolver<'a> {
    pub fn new(live: &'a LiveConfig, call: &'a RateLimitCall<'a>) -> Self {
        Self {
            live,
            call,
            domain: call.domain,
            known: live.envoy.rules.has_domain(call.domain),
            hits: u64::from(call.hits_addend.max(1)),
        }
    }

    /// Every descriptor resolved, in the request's order.
    pub fn resolve_all(&self) -> Result<Vec<Resolved<'a>>, Status> {
        let descriptors = self.call.descriptors();
        let matched: Vec<Option<Matched<'a>>> = descriptors.iter().map(|d| self.find(d)).collect();
        let replaced = replaced_names(&self.live.envoy.rules, &matched);
        descriptors
            .iter()
            .zip(matched)
            .enumerate()
            .map(|(i, (descriptor, matched))| self.resolve(i, descriptor, matched, &replaced))
            .collect()
    }

    /// The configured rule for a descriptor without its own `limit`.
    fn find(&self, descriptor: &Descriptor) -> Option<Matched<'a>> {
        if !self.known || descriptor.limit.is_some() {
            return None;
        }
        let entries = self.entries(descriptor).iter().map(|e| (e.key, e.value));
        self.live.envoy.rules.find(self.domain, entries)
    }

    fn entries(&self, descriptor: &Descriptor) -> &'a [Entry<'a>] {
        self.call.entries(descriptor)
    }

    fn resolve(
        &self,
        i: usize,
        descriptor: &Descriptor,
        matched: Option<Matched<'a>>,
        replaced: &HashSet<&str>,
    ) -> Result<Resolved<'a>, Status> {
        let hits = descriptor.hits_addend.unwrap_or(self.hits);
        if let Some(limit) = descriptor.limit.as_ref().filter(|_| self.known) {
            return self.resolve_override(i, descriptor, limit, hits);
        }
        let Some(matched) = matched else {
            return Ok(Resolved::None);
        };
        let rule = &self.live.envoy.rules.rules[matched.rule];
        if rule.name.as_deref().is_some_and(|n| replaced.contains(n)) {
            return Ok(Resolved::None);
        }
        self.resolve_rule(i, descriptor, &matched, hits)
    }

    /// A configured rule, matched and not replaced.
    fn resolve_rule(
        &self,
        i: usize,
        descriptor: &Descriptor,
        matched: &Matched<'a>,
        hits: u64,
    ) -> Result<Resolved<'a>, Status> {
        let envoy = &self.live.envoy;
        let index = matched.rule;
        let rule = &envoy.rules.rules[index];
        let report = Report {
            name: rule.name.as_deref().unwrap_or_default(),
            requests_per_unit: rule.requests_per_unit,
            unit: rule.unit,
            rls: envoy.counters.get(index),
        };
        Ok(match &rule.kind {
            // A refund of an unlimited or blocked limit has nothing to
            // give back: a look, answered OK.
            RuleKind::Unlimited => Resolved::Unlimited {
                rls: &envoy.counters[index],
                quota: rule.quota_mode && !rule.shadow_mode && !self.live.config.server.shadow_mode,
                hits: if descriptor.negative_hits { 0 } else { hits },
            },
            RuleKind::Blocked { unit } => Resolved::Blocked {
                unit: *unit,
                report,
                shadow: rule.shadow_mode || self.live.config.server.shadow_mode,
                quota: rule.quota_mode,
                hits: if descriptor.negative_hits { 0 } else { hits },
            },
            RuleKind::Limited { .. } => {
                let Some(limit) = envoy.limits[index].as_ref() else {
                    return Err(Status::internal("a limited rule without its plan"));
                };
                let shared = Some(&matched.shared[..]);
                let identity = match limit.plan {
                    RulePlan::Own(_) => self.identity(descriptor, shared),
                    RulePlan::Bound(p) => self.bound_identity(descriptor, shared, p),
                };
                let identity = match identity {
                    Ok(identity) => identity,
                    Err(fault) => return refusal(i, fault),
                };
                Resolved::Decide(Box::new(Pending {
                    plan: PlanRef::Live(limit.plan(self.live)),
                    policy_item: Some(limit.policy_item.as_str()),
                    identity,
                    cost: hits,
                    shadow: rule.shadow_mode,
                    quota: rule.quota_mode,
                    refund: descriptor.negative_hits,
                    report,
                }))
            }
        })
    }

    /// A request's own `limit`: a fixed window of its `requests_per_unit`
    /// per its `unit`, failing as a rule without a failure mode does.
    fn resolve_override(
        &self,
        i: usize,
        descriptor: &Descriptor,
        limit: &Override,
        hits: u64,
    ) -> Result<Resolved<'a>, Status> {
        let unit = Unit::from_proto(limit.unit).ok_or_else(|| {
            Status::invalid_argument(format!(
                "descriptors[{i}].limit.unit: unknown unit {}",
                limit.unit
            ))
        })?;
        let report = Report {
            name: "",
            requests_per_unit: limit.requests_per_unit,
            unit,
            rls: self.live.envoy.overrides.get(self.domain),
        };
        let Some(window) = Window::new(u64::from(limit.requests_per_unit), unit.ms()) else {
            // As a blocked rule: a refund has nothing to give back.
            return Ok(Resolved::Blocked {
                unit,
                report,
                shadow: self.live.config.server.shadow_mode,
                quota: false,
                hits: if descriptor.negative_hits { 0 } else { hits },
            });
        };
        let policy = self.live.envoy.override_policy(unit);
        let plan = Plan::new(
            Policy::new(policy.name.clone(), Limits::FixedWindow(window)),
            self.live.config.stores.default_index(),
        )
        .with_shadow(self.live.config.server.shadow_mode);
        let plan = match &policy.counters {
            Some(counters) => plan.with_counters(counters.clone()),
            None => plan,
        };
        let identity = match self.identity(descriptor, None) {
            Ok(identity) => identity,
            Err(fault) => return refusal(i, fault),
        };
        Ok(Resolved::Decide(Box::new(Pending {
            plan: PlanRef::Own(Box::new(plan)),
            policy_item: None,
            identity,
            cost: hits,
            shadow: false,
            quota: false,
            refund: descriptor.negative_hits,
            report,
        })))
    }

    /// An unbound rule's (or a `limit` override's) identity.
    fn identity(
        &self,
        descriptor: &Descriptor,
        shared: Option<&'a [Option<&'a str>]>,
    ) -> Result<Identity, IdentityFault> {
        descriptor_identity(
            self.domain,
            self.entries(descriptor).iter().map(|e| (e.key, e.value)),
            shared,
            self.live.config.server.max_key_bytes,
        )
    }

    /// A rule bound to policy `index`: keyed by that policy's identity
    /// rules ([`bound_identity`]).
    fn bound_identity(
        &self,
        descriptor: &Descriptor,
        shared: Option<&[Option<&str>]>,
        index: usize,
    ) -> Result<Identity, IdentityFault> {
        bound_identity(
            &self.live.policies[index].serve,
            self.entries(descriptor),
            shared,
            self.live.config.hasher.as_ref(),
            self.live.config.server.max_key_bytes,
        )
    }
}

/// Descriptor `i`'s identity fault as its answer: the client's is a
/// refusal, a malformed descriptor `INVALID_ARGUMENT`.
fn refusal<'a>(i: usize, fault: IdentityFault) -> Result<Resolved<'a>, Status> {
    match fault {
        IdentityFault::Refused(reason) => {
            Ok(Resolved::Refused(format!("descriptors[{i}]: {reason}")))
        }
        IdentityFault::Invalid(reason) => Err(Status::invalid_argument(format!(
            "descriptors[{i}]: {reason}"
        ))),
    }
}

/// `replaces`: a matched limit named by another matched limit's
/// `replaces` is dropped (unlimited ones replace too).
fn replaced_names<'a>(rules: &'a EnvoyRules, matched: &[Option<Matched<'_>>]) -> HashSet<&'a str> {
    matched
        .iter()
        .flatten()
        .flat_map(|m| rules.rules[m.rule].replaces.iter().map(String::as_str))
        .collect()
}
