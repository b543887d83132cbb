//! One [`Plan`] per limit, built once per config load: everything a
//! decision under that limit needs — the policy, its store, failure mode,
//! local share, lease, shards, hot lease, request ids and metric handles —
//! so a [`Check`] is only a plan, an identity and a cost, whichever door
//! (HTTP, forward auth, Envoy's RLS, replay, a Rust service) builds it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tollgate_core::{Clock, Decision, Identity, Policy, split_policy};
use tollgate_store::{
    DEFAULT_RETRY_IDS, DEFAULT_RETRY_WINDOW_MS, GuardedCheck, OnStoreFailure, RequestId,
    local_policy,
};

use crate::carry::{Carried, CarriedKey};
use crate::hot_lease::HotLeases;
use crate::lease::Lease;
use crate::metrics::PolicyCounters;

/// What a policy does with request ids; `None` on a plan means `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryRule {
    /// How long an admitted request's id is remembered.
    pub window_ms: u64,
    /// Ids kept per identity; beyond it the oldest is forgotten.
    pub max_ids: u32,
}

impl Default for RetryRule {
    fn default() -> Self {
        Self {
            window_ms: DEFAULT_RETRY_WINDOW_MS,
            max_ids: DEFAULT_RETRY_IDS,
        }
    }
}

/// How one limit is decided. Built with [`Plan::new`] and the `with_`
/// methods; immutable after (but for the shard cursor and what leases
/// keep inside themselves).
pub struct Plan {
    policy: Policy,
    store: usize,
    on_failure: Option<OnStoreFailure>,
    local: Option<Policy>,
    lease: Option<Arc<Lease>>,
    shards: Vec<Policy>,
    shard_cursor: AtomicU64,
    carried: Vec<Arc<Carried>>,
    hot_lease: Option<Arc<HotLeases>>,
    retry: Option<RetryRule>,
    counters: Option<PolicyCounters>,
    shadow: bool,
}

impl Plan {
    /// `policy` decided on the limiter's store `store` (an index into the
    /// stores the limiter was made with), keeping no request ids, counted
    /// nowhere, and with no failure mode: when that store cannot decide,
    /// a request it enforces is answered with no decisions (an error for
    /// its door to say), never admitted.
    pub fn new(policy: Policy, store: usize) -> Self {
        Self {
            policy,
            store,
            on_failure: None,
            local: None,
            lease: None,
            shards: Vec::new(),
            shard_cursor: AtomicU64::new(0),
            carried: Vec::new(),
            hot_lease: None,
            retry: None,
            counters: None,
            shadow: false,
        }
    }

    /// What the limit does when its store cannot decide (with `local`, its
    /// share of the limit is made here once).
    pub fn with_failure_mode(mut self, on_failure: OnStoreFailure) -> Self {
        self.local = match on_failure {
            OnStoreFailure::Local { share_percent } => {
                Some(local_policy(&self.policy, share_percent))
            }
            _ => None,
        };
        self.on_failure = Some(on_failure);
        self
    }

    /// Under `leased`: decided under the share `lease` holds.
    pub fn with_lease(mut self, lease: Arc<Lease>) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Under `shards: n`: each identity's limit split over `n` keys, each
    /// an integer share (they sum to the limit), tried round robin.
    pub fn with_shards(mut self, n: u16) -> Self {
        self.shards = shard_policies(&self.policy, n);
        self
    }

    /// Replacing `previous` (a reload): where the shard layout changed,
    /// the old layouts are also decided on for the policy's rest, so what
    /// each identity spent carries over (crate::carry). Call it last.
    pub fn with_carry_over(mut self, previous: &Plan) -> Self {
        self.carried = self.carried_from(previous);
        self
    }

    /// The layouts it carries after replacing `previous`: `previous`'s own
    /// when its shard count differs, and those `previous` still carried
    /// (but those a decision found over), one per shard count, never its
    /// own (its keys are the new ones). None when the store or the
    /// algorithm changed (the old states are not read there: a store of
    /// its own, or states taken as absent).
    fn carried_from(&self, previous: &Plan) -> Vec<Arc<Carried>> {
        if previous.store != self.store || previous.policy.algorithm() != self.policy.algorithm() {
            return Vec::new();
        }
        let own = self.shards.len().max(1);
        let mut carried: Vec<Arc<Carried>> = Vec::new();
        if previous.shards.len().max(1) != own {
            let policies = if previous.shards.is_empty() {
                vec![previous.policy.clone()]
            } else {
                previous.shards.clone()
            };
            let rest_ms = previous.policy.limits().rest_ms();
            carried.push(Arc::new(Carried::new(policies, rest_ms)));
        }
        for old in &previous.carried {
            if !old.ended()
                && old.count() != own
                && carried.iter().all(|c| c.count() != old.count())
            {
                carried.push(Arc::clone(old));
            }
        }
        carried
    }

    /// Under `hot_lease`: hot identities spend blocks taken at once.
    pub fn with_hot_lease(mut self, hot: Arc<HotLeases>) -> Self {
        self.hot_lease = Some(hot);
        self
    }

    /// Keeps request ids under `retry`.
    pub fn with_retry(mut self, retry: Option<RetryRule>) -> Self {
        self.retry = retry;
        self
    }

    /// In shadow mode (`true`): decided, spent and counted like any
    /// other limit, but its rejection never fails a request, so a new
    /// limit can be tried on real traffic before it is enforced.
    pub fn with_shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// Counts its verdicts in `counters`.
    pub fn with_counters(mut self, counters: PolicyCounters) -> Self {
        self.counters = Some(counters);
        self
    }

    /// The policy decided (under `split`, the region's share).
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The store it is decided on.
    pub fn store(&self) -> usize {
        self.store
    }

    /// Its failure mode; `None`: a store failure leaves its requests
    /// unanswered, and its door answers an error.
    pub fn on_failure(&self) -> Option<OnStoreFailure> {
        self.on_failure
    }

    /// The policy scaled to its local share, under `local`.
    pub fn local(&self) -> Option<&Policy> {
        self.local.as_ref()
    }

    /// Its lease, under `leased`.
    pub fn lease(&self) -> Option<&Arc<Lease>> {
        self.lease.as_ref()
    }

    /// Each shard's policy (empty: not sharded).
    pub fn shards(&self) -> &[Policy] {
        &self.shards
    }

    /// Every key of the layouts it carries for `identity`, live or not.
    pub(crate) fn carried_keys_of(&self, identity: &Identity) -> Vec<(&Policy, Identity)> {
        self.carried
            .iter()
            .flat_map(|layout| layout.every_key(identity))
            .collect()
    }

    /// How many shard layouts a reload replaced it carries (each read
    /// from the first decision after the reload for the policy's rest).
    pub fn carries_layouts(&self) -> usize {
        self.carried.len()
    }

    /// Its hot identities' blocks, under `hot_lease`.
    pub fn hot_lease(&self) -> Option<&Arc<HotLeases>> {
        self.hot_lease.as_ref()
    }

    /// How it keeps request ids.
    pub fn retry(&self) -> Option<RetryRule> {
        self.retry
    }

    /// Whether it is in shadow mode: its rejections are reported, never
    /// enforced.
    pub fn shadow(&self) -> bool {
        self.shadow
    }

    /// Where its verdicts are counted.
    pub fn counters(&self) -> Option<&PolicyCounters> {
        self.counters.as_ref()
    }

    /// The shard a check tries first, round robin on this instance.
    fn pick(&self) -> Option<usize> {
        let n = self.shards.len();
        if n < 2 {
            return None;
        }
        let turn = self.shard_cursor.fetch_add(1, Ordering::Relaxed);
        usize::try_from(turn % n as u64).ok()
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
        .filter_map(|i| split_policy(policy, &weights, i))
        .collect()
}

/// The old-layout keys `checks` also spend on at `now_ms` (monotonic),
/// `spill` shards after each layout's turn (crate::carry); empty, with no
/// allocation, when no plan carries a live layout.
pub(crate) fn carried_keys<'p>(
    checks: &[Check<'p>],
    spill: usize,
    now_ms: u64,
) -> Vec<CarriedKey<'p>> {
    let mut keys = Vec::new();
    for (owner, check) in checks.iter().enumerate() {
        for layout in check.plan.carried.iter().filter(|l| l.live(now_ms)) {
            if let Some((policy, identity)) = layout.key(check.identity, spill) {
                keys.push(CarriedKey {
                    owner,
                    policy,
                    identity,
                });
            }
        }
    }
    keys
}

/// The store checks of `carried`: each its check's cost and failure mode
/// on an old layout's key.
pub(crate) fn carried_checks<'s>(
    checks: &[Check<'s>],
    carried: &'s [CarriedKey<'s>],
) -> impl Iterator<Item = GuardedCheck<'s>> {
    carried.iter().filter_map(move |key| {
        let check = checks.get(key.owner)?;
        Some(check.guarded(None, Some((key.policy, &key.identity))))
    })
}

/// One check: may `identity` spend `cost` under `plan` now?
#[derive(Clone, Copy)]
pub struct Check<'a> {
    /// How the limit is decided.
    pub plan: &'a Plan,
    /// Whose budget is spent.
    pub identity: &'a Identity,
    /// Units to spend; 0 is a peek.
    pub cost: u64,
    /// Whether the outcome is the plan's verdict, counted in its counters
    /// and hot identities (not a peek made for another limit, not an RLS
    /// limit in shadow mode).
    pub counted: bool,
}

impl<'a> Check<'a> {
    /// A counted check of `cost` for `identity` under `plan`.
    pub fn new(plan: &'a Plan, identity: &'a Identity, cost: u64) -> Self {
        Self {
            plan,
            identity,
            cost,
            counted: true,
        }
    }

    /// The same check, nobody's verdict.
    pub fn uncounted(self) -> Self {
        Self {
            counted: false,
            ..self
        }
    }

    /// The same check as a cost-0 look at the state, nobody's verdict.
    pub fn peek(self) -> Self {
        Self {
            cost: 0,
            counted: false,
            ..self
        }
    }

    /// The counters its outcome lands in, if it is counted.
    pub(crate) fn counters(&self) -> Option<&'a PolicyCounters> {
        self.plan.counters.as_ref().filter(|_| self.counted)
    }

    /// The shard this check tries first.
    pub(crate) fn pick(&self) -> Option<usize> {
        self.plan.pick()
    }

    /// The shard this check tries first under request id `id`: the same
    /// for every attempt on every instance (FNV-1a of the id, stable across
    /// processes), so a retry meets the record of its first attempt.
    pub(crate) fn pick_for(&self, id: &RequestId) -> Option<usize> {
        let n = self.plan.shards.len();
        if n < 2 {
            return None;
        }
        let hash = id.as_str().bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        usize::try_from(hash % n as u64).ok()
    }

    /// The share to decide under, for a leased plan (its identity's demand
    /// counted), now on `clock`'s monotonic time (read only when leased).
    pub(crate) fn share(&self, clock: &dyn Clock) -> Option<Arc<Policy>> {
        let lease = self.plan.lease.as_ref()?;
        Some(lease.share(self.identity, self.cost, clock.monotonic_ms()))
    }

    /// The share a leased plan decides its identity under now, for a
    /// refund: no demand is counted.
    pub(crate) fn current_share(&self, clock: &dyn Clock) -> Option<Arc<Policy>> {
        let lease = self.plan.lease.as_ref()?;
        Some(lease.policy_now(self.identity, clock.monotonic_ms()))
    }

    /// Tells a leased plan's lease that `decision` turned its identity
    /// away: it will ask for more than its floor at the next renewal.
    pub(crate) fn note(&self, decision: &Decision) {
        if let Some(lease) = &self.plan.lease
            && !decision.allowed
        {
            lease.rejected(self.identity, self.cost);
        }
    }

    /// The store's check: under `share` when leased, on `shard` (its
    /// policy and identity) when sharded.
    pub(crate) fn guarded<'s>(
        &self,
        share: Option<&'s Policy>,
        shard: Option<(&'s Policy, &'s Identity)>,
    ) -> GuardedCheck<'s>
    where
        'a: 's,
    {
        GuardedCheck {
            check: tollgate_store::Check {
                policy: shard.map(|(p, _)| p).or(share).unwrap_or(&self.plan.policy),
                identity: shard.map_or(self.identity, |(_, id)| id),
                cost: self.cost,
            },
            on_failure: self.plan.on_failure.unwrap_or_default(),
            local_policy: self.plan.local.as_ref(),
        }
    }

    /// The shard `spill` places after `pick`: its policy and identity.
    pub(crate) fn shard(
        &self,
        pick: Option<usize>,
        spill: usize,
    ) -> Option<(&'a Policy, Identity)> {
        let base = pick?;
        let shards = &self.plan.shards;
        let index = (base + spill) % shards.len();
        let id = u16::try_from(index).ok()?;
        Some((shards.get(index)?, self.identity.shard(id)))
    }
}
