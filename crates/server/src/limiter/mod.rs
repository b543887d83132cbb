//! The decision seam: every protocol's checks are decided here, and only
//! here. A protocol adapter (HTTP `/v1/check`, forward auth, Envoy's RLS,
//! replay) turns its input into [`Check`]s and the [`Decided`] back into its
//! own answer; the limiter calls each check's store under its policy's
//! failure mode and records what happened — store latency, store errors by
//! kind, degraded decisions, each policy's outcomes, hot identities — so
//! every decision lands in the same metrics whatever door it came in by.
//!
//! Each policy's scope (crate::scope) picks its store: the limiter holds
//! one [`Backend`] per store the config names (local, regional, global).
//! A new scope belongs here and in crate::scope; a new protocol is a module
//! beside `http` and `rls` that calls [`Limiter::decide`].

mod backend;
mod hot_lease;
mod lease;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tollgate_core::{Clock, Decision, Identity, Policy};
use tollgate_store::{
    DecidedBy, GuardedCheck, GuardedDecisions, OnStoreFailure, Replay, RequestId, Retry, StoreError,
};

use crate::config::RetryRule;

use crate::decision_log::{DecisionLog, LOG_INTERVAL_MS};
use crate::live::{LiveConfig, LivePolicy};
use crate::metrics::{DegradedLabels, ErrorLabels, Metrics, PolicyCounters};
use crate::stopwatch::Stopwatch;

pub use backend::Backend;
pub use hot_lease::{HotLeases, MAX_BLOCKS, MAX_UNSPENT, Unspent};

/// How often the upkeep gives back what ended hot-lease blocks left
/// unspent ([`Limiter::give_back_unspent`]): their units reach the store
/// within this of a block's end.
pub const GIVE_BACK_INTERVAL_MS: u64 = 50;
pub use lease::{Lease, instance_id, share_of};

/// One check as an adapter hands it to the limiter.
#[derive(Clone, Copy)]
pub struct Check<'a> {
    pub policy: &'a Policy,
    pub identity: &'a Identity,
    pub cost: u64,
    /// What the policy does when the shared store cannot decide; `None`:
    /// nothing — its protocol answers an error instead (an envoyproxy/
    /// ratelimit rule without a `tollgate` failure mode), so such a call is
    /// neither a decision nor a degraded one in the metrics.
    pub on_failure: Option<OnStoreFailure>,
    /// For `local`: the policy scaled to its share.
    pub local: Option<&'a Policy>,
    /// Where the outcome is counted (`tollgate_decisions_total{policy}`,
    /// hot identities); `None` for a decision that is not the policy's
    /// verdict (an RLS limit in shadow mode, a peek made for another limit).
    pub counters: Option<&'a PolicyCounters>,
    /// The store it is decided on: an index into the limiter's stores, in
    /// the config's order (crate::scope::Stores).
    pub store: usize,
    /// Under `leased`: the share this instance holds, which the check is
    /// decided under instead of `policy`, and where its demand is counted.
    pub lease: Option<&'a Lease>,
    /// Under `shards: N`: each shard's policy (empty: not sharded), and the
    /// instance's round-robin cursor over them.
    pub shards: &'a [Policy],
    pub shard_cursor: Option<&'a AtomicU64>,
    /// Under `hot_lease`: this instance's blocks of the policy's budget.
    pub hot_lease: Option<&'a HotLeases>,
    /// How its policy keeps request ids; `None`: it keeps none.
    pub retry: Option<RetryRule>,
}

impl<'a> Check<'a> {
    /// A configured policy's check, on its scope's store, counted as that
    /// policy's.
    pub fn of(live: &'a LivePolicy, identity: &'a Identity, cost: u64) -> Self {
        Self {
            policy: &live.serve.policy,
            identity,
            cost,
            on_failure: Some(live.serve.on_store_failure),
            local: live.local.as_ref(),
            counters: Some(&live.counters),
            store: live.serve.store,
            lease: live.lease.as_deref(),
            shards: &live.shards,
            shard_cursor: Some(&live.shard_cursor),
            hot_lease: live.hot_leases.as_deref(),
            retry: live.serve.retry,
        }
    }

    /// The shard this check tries first, round robin on this instance.
    fn pick(&self) -> Option<usize> {
        let n = self.shards.len();
        if n < 2 {
            return None;
        }
        let turn = self.shard_cursor?.fetch_add(1, Ordering::Relaxed);
        usize::try_from(turn % n as u64).ok()
    }

    /// The share to decide under, for a leased policy (its demand counted).
    fn share(&self, now_ms: u64) -> Option<Arc<Policy>> {
        let lease = self.lease?;
        lease.record_demand(self.cost);
        Some(lease.share(now_ms))
    }

    /// The store's check: under `share` when leased, on `shard` (its
    /// policy and identity) when sharded.
    fn guarded<'s>(
        &self,
        share: Option<&'s Policy>,
        shard: Option<(&'s Policy, &'s Identity)>,
    ) -> GuardedCheck<'s>
    where
        'a: 's,
    {
        GuardedCheck {
            check: tollgate_store::Check {
                policy: shard.map(|(p, _)| p).or(share).unwrap_or(self.policy),
                identity: shard.map_or(self.identity, |(_, id)| id),
                cost: self.cost,
            },
            on_failure: self.on_failure.unwrap_or_default(),
            local_policy: self.local,
        }
    }
}

/// The decisions of one request (in the checks' order), what made them,
/// and why a shared store did not, if one did not.
pub type Decided = GuardedDecisions;

/// How often a degraded decision may be logged at warn (the rest are
/// counted): the one interval of the limiter's rate-limited lines.
const DEGRADED_LOG_EVERY_MS: u64 = LOG_INTERVAL_MS;

/// Lets one log line through per interval of the limiter's clock; the rest
/// are only counted.
#[derive(Default)]
struct LogLimiter {
    last_ms: Mutex<Option<u64>>,
}

impl LogLimiter {
    fn should_log(&self, now_ms: u64) -> bool {
        let Ok(mut last) = self.last_ms.lock() else {
            return false;
        };
        let due = last.is_none_or(|t| now_ms.saturating_sub(t) >= DEGRADED_LOG_EVERY_MS);
        if due {
            *last = Some(now_ms);
        }
        due
    }
}

/// The stores, their failure modes, the clock and the decision metrics.
pub struct Limiter {
    /// In the config's store order: the cheapest first (local, regional,
    /// global), which is the order a request spanning several is decided.
    backends: Vec<Backend>,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    degraded_log: LogLimiter,
    /// Rejections and degraded decisions at debug, per policy, rate-limited.
    decision_log: DecisionLog,
}

impl Limiter {
    /// `backends` in the config's store order (a [`Check`]'s `store`
    /// indexes them).
    pub fn new(backends: Vec<Backend>, metrics: Arc<Metrics>, clock: Arc<dyn Clock>) -> Self {
        Self {
            backends,
            metrics,
            clock,
            degraded_log: LogLimiter::default(),
            decision_log: DecisionLog::default(),
        }
    }

    /// Decides `checks`, and records what the stores did and what each
    /// counted policy decided. On one store, all or nothing (one script
    /// call, or one lock): nothing is spent unless every check admits.
    /// Across stores there is no atomic call: the stores are asked in order
    /// (local, regional, global), and once one rejects, the later ones only
    /// peek. What an earlier store spent stays spent, so a request spanning
    /// stores may be rejected having consumed some of another policy's
    /// budget — it never admits more than any policy allows.
    pub async fn decide(&self, checks: &[Check<'_>]) -> Decided {
        self.decide_request(checks, None).await
    }

    /// [`Limiter::decide`] under a request id (`Idempotency-Key`): on each
    /// store the id is recorded with the store's first check, under that
    /// check's policy's `retry_window` (none when the policy's is `off`),
    /// and a retry inside the window is answered from the record,
    /// consuming nothing ([`Replay::Replayed`]); under other costs it is
    /// refused ([`Replay::CostMismatch`], no decisions).
    pub async fn decide_request(&self, checks: &[Check<'_>], id: Option<&RequestId>) -> Decided {
        let stopwatch = Stopwatch::start();
        let first = checks.first().map_or(0, |c| c.store);
        let decided = if checks.iter().all(|c| c.store == first) {
            self.decide_on(first, checks, id).await
        } else {
            Box::pin(self.decide_across(checks, id)).await
        };
        self.metrics.decision_seconds.observe(stopwatch.seconds());
        decided
    }

    /// One store's all-or-nothing call, observed and counted.
    async fn decide_on(
        &self,
        store: usize,
        checks: &[Check<'_>],
        id: Option<&RequestId>,
    ) -> Decided {
        let Some(backend) = self.backends.get(store) else {
            return Decided {
                decisions: Vec::new(),
                by: DecidedBy::Shared,
                error: Some(StoreError::Config(format!("no store {store}"))),
                store_ms: None,
                replay: Replay::Fresh,
            };
        };
        let now_ms = self.clock.now_ms();
        let retry = id
            .zip(checks.first().and_then(|c| c.retry))
            .map(|(id, rule)| Retry {
                id,
                window_ms: rule.window_ms,
                max_ids: rule.max_ids,
            });
        if let ([one], None) = (checks, retry)
            && let Some(hot) = one.hot_lease
            && let Some(decided) = Box::pin(self.decide_by_block(backend, one, hot, now_ms)).await
        {
            self.observe_store(&decided);
            self.count(checks, &decided, false, now_ms);
            return decided;
        }
        // Empty (no allocation) unless a check is sharded.
        let picks: Vec<Option<usize>> = if checks.iter().any(|c| c.shards.len() > 1) {
            checks.iter().map(Check::pick).collect()
        } else {
            Vec::new()
        };
        let mut decided = self.call(backend, checks, &picks, 0, now_ms, retry).await;
        if matches!(decided.replay, Replay::CostMismatch { .. }) {
            // The client's fault, answered 422: no decision was made.
            self.observe_store(&decided);
            return decided;
        }
        // A sharded request rejected by its shard tries the next one once
        // (docs/config.md, Shards): one more store call, only on rejection
        // (a rejection records no request id, so the spill may).
        if let ([one], [Some(_)]) = (checks, picks.as_slice())
            && one.cost > 0
            && !decided.by.is_degraded()
            && decided.decisions.first().is_some_and(|d| !d.allowed)
        {
            let spilled = self.call(backend, checks, &picks, 1, now_ms, retry).await;
            if spilled.decisions.len() == 1 {
                let store_ms = match (decided.store_ms, spilled.store_ms) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                };
                decided = Decided {
                    store_ms,
                    ..spilled
                };
            }
        }
        let replayed = decided.replay == Replay::Replayed;
        // Decided without the store, but a check with no failure mode makes
        // its protocol answer an error (fail_closed answers regardless):
        // record the store's fault, not decisions nobody will see.
        let unanswered = decided.by.is_degraded()
            && decided.by != DecidedBy::FailClosed
            && checks.iter().any(|c| c.on_failure.is_none());
        if unanswered {
            self.observe_store(&Decided {
                decisions: Vec::new(),
                by: DecidedBy::Shared,
                error: decided.error.clone(),
                store_ms: decided.store_ms,
                replay: Replay::Fresh,
            });
            return decided;
        }
        self.observe_store(&decided);
        self.count(checks, &decided, replayed, now_ms);
        decided
    }

    /// Checks on several stores, store by store in order; after a
    /// rejection the later stores only peek (cost 0, not counted). Under a
    /// request id each store keeps its own record, so a request rejected
    /// by a later store has its retry charged there only; it reads
    /// replayed when every store replayed it.
    async fn decide_across(&self, checks: &[Check<'_>], id: Option<&RequestId>) -> Decided {
        let mut decisions: Vec<Option<Decision>> = vec![None; checks.len()];
        let mut by = DecidedBy::Shared;
        let mut error = None;
        let mut store_ms: Option<u64> = None;
        let mut rejected = false;
        let mut replayed = id.is_some();
        for store in 0..self.backends.len() {
            let at: Vec<usize> = (0..checks.len())
                .filter(|&i| checks[i].store == store)
                .collect();
            if at.is_empty() {
                continue;
            }
            let group: Vec<Check<'_>> = at
                .iter()
                .map(|&i| match rejected {
                    false => checks[i],
                    true => Check {
                        cost: 0,
                        counters: None,
                        ..checks[i]
                    },
                })
                .collect();
            let decided = self
                .decide_on(store, &group, if rejected { None } else { id })
                .await;
            if matches!(decided.replay, Replay::CostMismatch { .. }) {
                return decided;
            }
            replayed &= decided.replay == Replay::Replayed;
            if decided.decisions.len() != at.len() {
                return Decided {
                    decisions: Vec::new(),
                    store_ms,
                    ..decided
                };
            }
            rejected |= !decided.decisions.iter().all(|d| d.allowed);
            by = worse(by, decided.by);
            error = error.or(decided.error);
            if let Some(ms) = decided.store_ms {
                store_ms = Some(store_ms.unwrap_or(0) + ms);
            }
            for (&i, decision) in at.iter().zip(decided.decisions) {
                decisions[i] = Some(decision);
            }
        }
        Decided {
            decisions: decisions.into_iter().flatten().collect(),
            by,
            error,
            store_ms,
            replay: if replayed {
                Replay::Replayed
            } else {
                Replay::Fresh
            },
        }
    }

    /// One all-or-nothing store call: leased checks under their share,
    /// sharded ones on their pick's shard (`spill` shards further on).
    async fn call(
        &self,
        backend: &Backend,
        checks: &[Check<'_>],
        picks: &[Option<usize>],
        spill: usize,
        now_ms: u64,
        retry: Option<Retry<'_>>,
    ) -> Decided {
        let clock = self.clock.as_ref();
        let pick = |i: usize| picks.get(i).copied().flatten();
        match checks {
            [one] => {
                let share = one.share(now_ms);
                let shard = shard_of(one, pick(0), spill);
                let guarded = one.guarded(
                    share.as_deref(),
                    shard.as_ref().map(|(policy, id)| (*policy, id)),
                );
                backend.decide_all(&[guarded], clock, retry).await
            }
            _ => {
                // Shares and shards only when some check has one: a plain
                // batch allocates its guarded checks and nothing else.
                let shares: Vec<Option<Arc<Policy>>> = if checks.iter().any(|c| c.lease.is_some()) {
                    checks.iter().map(|c| c.share(now_ms)).collect()
                } else {
                    Vec::new()
                };
                let shards: Vec<Option<(&Policy, Identity)>> = if picks.is_empty() {
                    Vec::new()
                } else {
                    checks
                        .iter()
                        .enumerate()
                        .map(|(i, c)| shard_of(c, pick(i), spill))
                        .collect()
                };
                let guarded: Vec<GuardedCheck<'_>> = checks
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        c.guarded(
                            shares.get(i).and_then(Option::as_deref),
                            shards
                                .get(i)
                                .and_then(Option::as_ref)
                                .map(|(policy, id)| (*policy, id)),
                        )
                    })
                    .collect();
                backend.decide_all(&guarded, clock, retry).await
            }
        }
    }

    /// Records each counted check's outcome: its policy's counters, its
    /// hot identity, and degraded or rejected decisions in the log.
    fn count(&self, checks: &[Check<'_>], decided: &Decided, replayed: bool, now_ms: u64) {
        for (check, decision) in checks.iter().zip(&decided.decisions) {
            if decided.by.is_degraded() {
                self.decision_log.degraded(
                    check.policy.name(),
                    check.identity,
                    decided.by.name(),
                    decision.allowed,
                    self.clock.now_ms(),
                );
            }
            let Some(counters) = check.counters else {
                continue;
            };
            counters
                .hot
                .record(check.identity, decision.allowed, now_ms);
            if decision.allowed {
                counters.allowed.inc();
                if replayed {
                    counters.replayed.inc();
                }
            } else {
                counters.rejected.inc();
                if let Some(split) = &counters.split_turned_away
                    && !decided.by.is_degraded()
                {
                    split.inc_by(check.cost);
                }
                self.decision_log
                    .rejected(check.policy.name(), check.identity, now_ms);
            }
        }
    }

    /// A hot identity's decision from its local block (docs/config.md,
    /// `hot_lease`): spent from a live block, or from a block taken now in
    /// one store decision when the identity decides above the threshold
    /// here. `None`: decide on the store as usual (no block, not hot, the
    /// store's circuit not closed, or the block refused).
    async fn decide_by_block(
        &self,
        backend: &Backend,
        check: &Check<'_>,
        hot: &HotLeases,
        now_ms: u64,
    ) -> Option<Decided> {
        if check.cost == 0 {
            return None;
        }
        let local = |decision| Decided {
            decisions: vec![decision],
            by: DecidedBy::Shared,
            error: None,
            store_ms: None,
            replay: Replay::Fresh,
        };
        // Every request counts toward the rate, so a block is sized by what
        // the identity really decides here.
        let rate = hot.observe(check.identity, now_ms);
        if let Some(decision) = hot.spend(check.identity, check.cost, now_ms) {
            self.metrics.hot_lease_local.inc();
            return Some(local(decision));
        }
        if rate < hot.rule.above || !backend.trusted() || !hot.begin_taking(check.identity, now_ms)
        {
            return None;
        }
        let block = hot.rule.block(rate).max(check.cost);
        let whole = tollgate_store::Check {
            policy: check.policy,
            identity: check.identity,
            cost: block,
        };
        let taken = backend.take(whole, &*self.clock).await;
        let store_ms = Some(self.clock.now_ms().saturating_sub(now_ms));
        let (decision, receipt) = match taken {
            Ok((decision, receipt)) if decision.allowed => (decision, receipt),
            Ok(_) => {
                hot.abandon(check.identity);
                return None;
            }
            Err(error) => {
                // The request decides as usual, under its failure mode.
                hot.abandon(check.identity);
                self.observe_store(&Decided {
                    decisions: Vec::new(),
                    by: DecidedBy::Shared,
                    error: Some(error),
                    store_ms,
                    replay: Replay::Fresh,
                });
                return None;
            }
        };
        self.metrics.hot_lease_blocks.inc();
        let decision = hot.keep(
            check.identity,
            block,
            check.cost,
            (&decision, receipt),
            now_ms,
        );
        Some(Decided {
            store_ms,
            ..local(decision)
        })
    }

    /// Gives back what ended hot-lease blocks left unspent (docs/config.md,
    /// `hot_lease`), for every policy of `live`: one store call a block,
    /// each bounded by the store's timeout. `stopping`: every block ends
    /// now. Counted as returned, or lost where the store did not take them.
    ///
    /// Type-erased: the store calls' futures are deep, and the server's
    /// future, which awaits this one, would otherwise nest them all.
    pub fn give_back_unspent<'a>(
        &'a self,
        live: &'a LiveConfig,
        stopping: bool,
    ) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(self.give_back_all(live, stopping))
    }

    async fn give_back_all(&self, live: &LiveConfig, stopping: bool) {
        let now_ms = self.clock.now_ms();
        for policy in &live.policies {
            let Some(hot) = &policy.hot_leases else {
                continue;
            };
            let unspent = if stopping {
                hot.take_all_unspent()
            } else {
                hot.take_unspent(now_ms)
            };
            let Some(backend) = self.backends.get(policy.serve.store) else {
                unspent.iter().for_each(|u| hot.given_back(u.units, 0));
                continue;
            };
            for u in unspent {
                let check = tollgate_store::Check {
                    policy: &policy.serve.policy,
                    identity: &u.identity,
                    cost: u.units,
                };
                let given = match backend.give_back(check, u.taken, &*self.clock).await {
                    Ok(given) => given,
                    Err(error) => {
                        tracing::debug!(policy = policy.serve.policy.name(), %error, "a hot-lease give-back failed: its units are lost");
                        0
                    }
                };
                hot.given_back(u.units, given);
            }
        }
    }

    /// A store's latency, its errors, and decisions made without it.
    fn observe_store(&self, decided: &Decided) {
        if let Some(ms) = decided.store_ms {
            self.metrics.store_seconds.observe(ms as f64 / 1000.0);
        }
        if let Some(error) = &decided.error {
            self.metrics
                .store_errors
                .get_or_create(&ErrorLabels {
                    kind: error_kind(error),
                })
                .inc();
        }
        if decided.by.is_degraded() {
            let allowed = decided.decisions.iter().all(|d| d.allowed);
            self.metrics
                .degraded
                .get_or_create(&DegradedLabels {
                    path: decided.by.name(),
                    outcome: if allowed { "allowed" } else { "rejected" },
                })
                .inc();
            if self.degraded_log.should_log(self.clock.now_ms()) {
                tracing::warn!(
                    path = decided.by.name(),
                    error = decided.error.as_ref().map(ToString::to_string),
                    "deciding without the shared store (logged at most every {} s)",
                    DEGRADED_LOG_EVERY_MS / 1000
                );
            }
        }
    }

    /// Forgets `policy`'s state for `identity` on `store` — an operator's
    /// reset: the identity starts afresh, on every shard when `shards`
    /// names them. Whether there was a state.
    pub async fn forget(
        &self,
        store: usize,
        policy: &Policy,
        shards: &[Policy],
        identity: &Identity,
    ) -> Result<bool, StoreError> {
        let Some(backend) = self.backends.get(store) else {
            return Err(StoreError::Config(format!("no store {store}")));
        };
        if shards.is_empty() {
            return backend.forget(policy, identity).await;
        }
        let mut existed = false;
        for (index, shard) in shards.iter().enumerate() {
            let id = u16::try_from(index).unwrap_or(u16::MAX);
            existed |= backend.forget(shard, &identity.shard(id)).await?;
        }
        Ok(existed)
    }

    /// Renews `lease` with its ledger on store `ledger` (the global one):
    /// one bounded script call; the grant is spent from now for a term.
    pub async fn renew(&self, lease: &Lease, ledger: usize) {
        let sent_ms = self.clock.now_ms();
        let ask = lease.begin(sent_ms);
        let answer = match self.backends.get(ledger) {
            Some(backend) => backend.lease(&ask).await,
            None => Err(StoreError::Config(format!("no store {ledger}"))),
        };
        if let Err(e) = &answer {
            tracing::debug!(policy = ask.policy, error = %e, "a lease renewal failed");
        }
        lease.settle(sent_ms, self.clock.now_ms(), &answer);
    }

    /// The clock decisions are dated by.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Periodic upkeep: expire idle keys (Redis expires its own by TTL).
    pub fn sweep(&self) {
        for backend in &self.backends {
            backend.sweep();
        }
    }

    /// Refreshes the store gauges (at scrape time): keys and evictions
    /// summed over the stores, the worst circuit of the shared ones.
    pub fn maintain_gauges(&self) {
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let (mut keys, mut evictions, mut circuit) = (0u64, 0u64, 0i64);
        for backend in &self.backends {
            let (k, e, c) = backend.gauges();
            keys += k;
            evictions += e;
            circuit = circuit.max(c);
        }
        self.metrics.store_keys.set(gauge(keys));
        self.metrics.store_evictions.set(gauge(evictions));
        self.metrics.circuit_state.set(circuit);
        let (mut local, mut calls) = (0u64, 0u64);
        for backend in &self.backends {
            let (l, c) = backend.shield();
            local += l;
            calls += c;
        }
        self.metrics.rejected_cache_answers.set(gauge(local));
        self.metrics.store_script_calls.set(gauge(calls));
    }

    /// Whether every store answers right now (a bounded ping each),
    /// recorded in `tollgate_store_up`.
    pub async fn store_answers(&self) -> Result<(), StoreError> {
        let mut answered = Ok(());
        for backend in &self.backends {
            answered = answered.and(backend.ping().await);
        }
        self.metrics.store_up.set(i64::from(answered.is_ok()));
        answered
    }
}

/// The shard `spill` places after `pick`: its policy and identity.
fn shard_of<'c>(
    check: &Check<'c>,
    pick: Option<usize>,
    spill: usize,
) -> Option<(&'c Policy, Identity)> {
    let base = pick?;
    let index = (base + spill) % check.shards.len();
    let id = u16::try_from(index).ok()?;
    Some((check.shards.get(index)?, check.identity.shard(id)))
}

/// The more degraded of two ways of deciding, for a request decided on
/// several stores: what its answer must say.
fn worse(a: DecidedBy, b: DecidedBy) -> DecidedBy {
    let rank = |d: DecidedBy| match d {
        DecidedBy::Shared => 0,
        DecidedBy::FailOpen => 1,
        DecidedBy::Local => 2,
        DecidedBy::FailClosed => 3,
    };
    if rank(b) > rank(a) { b } else { a }
}

/// A store error's kind, the label of `tollgate_store_errors_total`.
fn error_kind(error: &StoreError) -> &'static str {
    match error {
        StoreError::Timeout { .. } => "timeout",
        StoreError::Unavailable(_) => "unavailable",
        StoreError::Protocol(_) => "protocol",
        StoreError::Config(_) => "config",
    }
}
