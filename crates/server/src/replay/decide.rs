//! The limiter a replay decides on: one plan a policy, on one store (the
//! memory store, or Redis at each event's time), its clock set to each
//! event's time. A shadow policy's plan is in shadow mode, so a request
//! with shadow checks is decided as `serve` decides it: the enforced
//! checks first, all or nothing, then the shadow ones, spending only when
//! the enforced admitted.

use std::collections::BTreeMap;
use std::sync::Arc;

use tollgate_core::{Decision, Identity, ManualClock};
use tollgate_limiter::{
    Backend, Check, Decided, Limiter, OnStoreFailure, Plan, shadow_looked, would_allow,
};

use super::event::{Event, Item};
use super::policies::ReplayPolicy;
use super::store::open_redis;
use super::{ReplayError, ReplayStore};
use crate::metrics::Metrics;
use tollgate_limiter::StoreError;

/// What a check came to, as `serve`'s answer tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Admitted by an enforced policy.
    Admitted,
    /// Rejected by an enforced policy.
    Rejected,
    /// A shadow policy's: admitted, and what it would have decided.
    Shadow {
        /// Whether enforcing it would have admitted.
        would_allow: bool,
    },
}

impl Verdict {
    /// Whether the client was admitted by this check.
    pub fn admitted(self) -> bool {
        !matches!(self, Verdict::Rejected)
    }
}

/// Why an event was not decided: its line (skippable), or the store.
pub(crate) enum Fault {
    Line(String),
    Store(String),
}

impl Fault {
    /// The fault, said to be `whose` (`the old config`).
    pub fn named(self, whose: &str) -> Self {
        match self {
            Fault::Line(fault) => Fault::Line(format!("{whose}: {fault}")),
            Fault::Store(fault) => Fault::Store(format!("{whose}: {fault}")),
        }
    }
}

/// What an event came to.
pub(crate) struct Outcome {
    /// The identity of each check, in the line's order.
    pub identities: Vec<Identity>,
    /// One a check, in the line's order.
    pub decisions: Vec<Decision>,
    /// One a check: admitted, rejected, or a shadow policy's verdict.
    pub verdicts: Vec<Verdict>,
    /// The units a refund gave back (none for a decided event).
    pub refunded: Option<u64>,
}

/// A limiter deciding at a trace's times.
pub(crate) struct Decider {
    plans: BTreeMap<String, Plan>,
    limiter: Limiter,
    clock: Arc<ManualClock>,
}

impl Decider {
    /// One plan a policy on the store `target` names: `memory` (or none),
    /// or a `redis://` / `rediss://` URL under a replay's prefix.
    /// Unguarded: a replay stops at a store error.
    pub async fn open(
        policies: &[ReplayPolicy],
        target: &ReplayStore,
    ) -> Result<Self, ReplayError> {
        let clock = Arc::new(ManualClock::new(0));
        let backend = match target.store.as_deref() {
            None | Some("memory") => Backend::memory(target.max_keys, clock.clone()),
            Some(url) if url.starts_with("redis://") || url.starts_with("rediss://") => {
                let store = open_redis(url, target).await?;
                Backend::redis_at_clock(store, clock.clone())
            }
            Some(other) => {
                return Err(ReplayError::Store(StoreError::Config(format!(
                    "--store {:?}: expected memory or a redis:// URL",
                    tollgate_store::redact_url(other)
                ))));
            }
        };
        let metrics = Metrics::new(clock.clone());
        let limiter = Limiter::new(vec![backend], Arc::clone(&metrics.limiter), clock.clone());
        let plans = policies
            .iter()
            .map(|p| {
                let plan = Plan::new(p.policy.clone(), 0)
                    .with_failure_mode(OnStoreFailure::FailClosed)
                    .with_shadow(p.shadow);
                (p.name().to_owned(), plan)
            })
            .collect();
        Ok(Self {
            plans,
            limiter,
            clock,
        })
    }

    /// Forgets the memory store's idle keys.
    pub fn sweep(&self) {
        self.limiter.sweep();
    }

    fn plan_of(&self, item: &Item) -> Result<&Plan, Fault> {
        self.plans
            .get(item.policy.as_str())
            .ok_or_else(|| Fault::Line(format!("unknown policy {:?}", item.policy)))
    }

    /// An event decided at its own time: each check's decision, all or
    /// nothing across the enforced ones (one store, one call), or a
    /// refund's look at the state it left with the units it gave back.
    pub async fn decide(&self, event: &Event) -> Result<Outcome, Fault> {
        // One check, the common line, is decided without lists of plans.
        if let [item] = event.items() {
            let plan = self.plan_of(item)?;
            let identity = item.key.identity().map_err(Fault::Line)?;
            self.clock.set(event.t_ms);
            let mut cost = item.cost;
            let mut refunded = None;
            if event.refund {
                let given = self
                    .limiter
                    .refund(&Check::new(plan, &identity, cost))
                    .await;
                refunded = Some(given.map_err(|e| Fault::Store(e.to_string()))?);
                cost = 0;
            }
            let checks = [Check::new(plan, &identity, cost).uncounted()];
            let decided = self.limiter.decide(&checks).await;
            let verdicts = verdicts(&checks, &decided)?;
            return Ok(Outcome {
                identities: vec![identity],
                decisions: decided.decisions.into_vec(),
                verdicts,
                refunded,
            });
        }
        let mut planned = Vec::with_capacity(event.items().len());
        for item in event.items() {
            let identity = item.key.identity().map_err(Fault::Line)?;
            planned.push((self.plan_of(item)?, identity));
        }
        self.clock.set(event.t_ms);
        // A refund is one check's (the line's parser refuses it on `checks`).
        let checks: Vec<Check<'_>> = planned
            .iter()
            .zip(event.items())
            .map(|((plan, identity), item)| Check::new(plan, identity, item.cost).uncounted())
            .collect();
        let decided = self.limiter.decide(&checks).await;
        let verdicts = verdicts(&checks, &decided)?;
        let identities = planned.into_iter().map(|(_, identity)| identity).collect();
        Ok(Outcome {
            identities,
            decisions: decided.decisions.into_vec(),
            verdicts,
            refunded: None,
        })
    }

    /// One check of `cost` for `identity` by the policy `policy` alone, at
    /// `t_ms`: how `compare` offers one trace to several policies.
    pub async fn decide_one(
        &self,
        policy: &str,
        t_ms: u64,
        identity: &Identity,
        cost: u64,
    ) -> Result<(Decision, Verdict), Fault> {
        let plan = self
            .plans
            .get(policy)
            .ok_or_else(|| Fault::Line(format!("unknown policy {policy:?}")))?;
        self.clock.set(t_ms);
        let checks = [Check::new(plan, identity, cost).uncounted()];
        let decided = self.limiter.decide(&checks).await;
        let verdict = verdicts(&checks, &decided)?;
        match (decided.decisions.into_iter().next(), verdict.first()) {
            (Some(decision), Some(verdict)) => Ok((decision, *verdict)),
            _ => Err(Fault::Store("the store answered no decision".into())),
        }
    }
}

/// Each check's verdict as `serve` answers it: an enforced check by its
/// own decision, a shadow one admitted with its would-be verdict; or the
/// store's fault.
fn verdicts(checks: &[Check<'_>], decided: &Decided) -> Result<Vec<Verdict>, Fault> {
    if let Some(e) = &decided.error {
        return Err(Fault::Store(e.to_string()));
    }
    if decided.decisions.len() != checks.len() {
        return Err(Fault::Store(
            "the store answered another number of decisions".into(),
        ));
    }
    if !checks.iter().any(|c| c.plan.shadow()) {
        let verdict = |d: &Decision| {
            if d.allowed {
                Verdict::Admitted
            } else {
                Verdict::Rejected
            }
        };
        return Ok(decided.decisions.iter().map(verdict).collect());
    }
    let looked = shadow_looked(checks, decided);
    Ok(checks
        .iter()
        .zip(&decided.decisions)
        .map(|(check, decision)| {
            if check.plan.shadow() {
                Verdict::Shadow {
                    would_allow: would_allow(check, decision, looked),
                }
            } else if decision.allowed {
                Verdict::Admitted
            } else {
                Verdict::Rejected
            }
        })
        .collect())
}
