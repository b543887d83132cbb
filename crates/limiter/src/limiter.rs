//! The limiter: every door's checks are decided here, and only here. A
//! door (HTTP `/v1/check`, forward auth, Envoy's RLS, replay, a Rust
//! service) turns its input into [`Check`]s built from [`Plan`]s and the
//! [`Decided`] back into its own answer; the limiter calls each check's
//! store under its plan's failure mode, scope, lease, shards, hot lease
//! and request ids, and records what happened — store latency, store
//! errors by kind, degraded decisions, each plan's outcomes, hot
//! identities — so every decision lands in the same metrics whatever door
//! it came in by.

use std::sync::{Arc, Mutex, OnceLock};

use tollgate_core::{Clock, Decision, Identity, Policy};
use tollgate_store::{
    DecidedBy, GuardedCheck, GuardedDecisions, Replay, RequestDigest, RequestHasher, RequestId,
    Retry, StoreError,
};

use crate::backend::Backend;
use crate::carry;
use crate::decision_log::{DecisionLog, LOG_INTERVAL_MS};
use crate::metrics::{DegradedLabels, LimiterMetrics, PolicyCounters};
use crate::plan::{Check, carried_checks, carried_keys};
use crate::sampled_log::{DecisionSampling, SampledLog};
use crate::spans;
use crate::stores::{StoreName, StoreWatch};
use crate::trace::TraceSink;

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

/// The stores, the clock and the decision metrics.
pub struct Limiter {
    /// In the config's store order: the cheapest first (local, regional,
    /// global), which is the order a request spanning several is decided.
    pub(crate) backends: Vec<Backend>,
    /// Each store's name, series handles and failures, as `backends`.
    pub(crate) stores: Vec<StoreWatch>,
    pub(crate) metrics: Arc<LimiterMetrics>,
    pub(crate) clock: Arc<dyn Clock>,
    degraded_log: LogLimiter,
    /// Rejections and degraded decisions at debug, per policy, rate-limited.
    decision_log: DecisionLog,
    /// Every sampled decision at debug (`server.decision_log`).
    pub(crate) sampled_log: SampledLog,
    /// Sampled decisions as replay lines (`server.trace`), set once at start.
    trace: OnceLock<TraceSink>,
}

impl Limiter {
    /// `backends` in the config's store order (a [`Plan`](crate::Plan)'s
    /// store indexes them); `clock` tells both times: decisions are dated
    /// by its wall clock, lease terms and latencies run on its monotonic one.
    /// Each store is named by the role a single-store config gives it:
    /// `local` for memory, `global` for Redis.
    pub fn new(
        backends: Vec<Backend>,
        metrics: Arc<LimiterMetrics>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let named = backends
            .into_iter()
            .map(|backend| {
                let (role, what) = match backend.is_shared() {
                    true => ("global", "redis"),
                    false => ("local", "memory"),
                };
                let name = StoreName {
                    role: role.to_owned(),
                    region: None,
                    what: what.to_owned(),
                };
                (name, backend)
            })
            .collect();
        Self::named(named, metrics, clock)
    }

    /// [`Limiter::new`] with each store named as the config names it
    /// (role, region): its series, log lines and readiness field.
    pub fn named(
        backends: Vec<(StoreName, Backend)>,
        metrics: Arc<LimiterMetrics>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let stores = backends
            .iter()
            .map(|(name, backend)| metrics.stores.watch(name.clone(), backend.is_shared()))
            .collect();
        Self {
            backends: backends.into_iter().map(|(_, backend)| backend).collect(),
            stores,
            metrics,
            clock,
            degraded_log: LogLimiter::default(),
            decision_log: DecisionLog::default(),
            sampled_log: SampledLog::default(),
            trace: OnceLock::new(),
        }
    }

    /// How decisions are sampled into the per-decision debug log from the
    /// next one on (a config load sets it; off until then).
    pub fn set_decision_sampling(&self, sampling: DecisionSampling) {
        self.sampled_log.set(sampling);
    }

    /// `identity` as a log line names it: the keyed hash of its encoding
    /// (as the hot identity series name it), raw only when those are raw
    /// (escaped and bounded), `-` without an identity key. Every log line
    /// that names an identity names it so.
    pub fn log_name(&self, identity: &Identity) -> String {
        self.sampled_log.name(identity)
    }

    /// Captures sampled decisions into `sink` from now on (once: a capture
    /// is opened at start and kept).
    pub fn set_trace(&self, sink: TraceSink) {
        let _ = self.trace.set(sink);
    }

    /// The trace capture, when one is set.
    pub(crate) fn trace(&self) -> Option<&TraceSink> {
        self.trace.get()
    }

    /// The clock decisions are dated by.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Decides `checks`, and records what the stores did and what each
    /// counted check decided. On one store, all or nothing (one script
    /// call, or one lock): nothing is spent unless every check admits.
    /// Across stores there is no atomic call: the stores are asked in order
    /// (local, regional, global), and once one rejects, the later ones only
    /// peek. What an earlier store spent stays spent, so a request spanning
    /// stores may be rejected having consumed some of another policy's
    /// budget — it never admits more than any policy allows.
    pub async fn decide(&self, checks: &[Check<'_>]) -> Decided {
        self.decide_request(checks, None, None).await
    }

    /// A look at `check`'s state (cost 0), for an answer that is not a
    /// decision — an operator's `GET /v1/state`, what a refund left: not
    /// timed as a decided request, sampled, traced or counted.
    pub async fn peek(&self, check: Check<'_>) -> Decided {
        self.decide_checks(&[check.peek()], None).await
    }

    /// [`Limiter::decide`] under a request id (`Idempotency-Key`): on each
    /// store the id is recorded with the store's first check, under that
    /// check's plan's retry rule (none when it keeps no ids), for the whole
    /// request: every check's policy, identity and cost, and `shape`, what
    /// the door knows of the request beyond its checks (forward auth: its
    /// method and normalized path). A retry of the same request inside the
    /// window is answered from the record, consuming nothing
    /// ([`Replay::Replayed`]); the id sent with any other request is
    /// refused ([`Replay::Mismatch`], no decisions).
    pub async fn decide_request(
        &self,
        checks: &[Check<'_>],
        id: Option<&RequestId>,
        shape: Option<&str>,
    ) -> Decided {
        let started_us = self.clock.monotonic_us();
        // A capture dates a request when its decision began, as replay will.
        let started_ms = self.trace.get().map(|_| self.clock.now_ms());
        // Over every check, whichever store decides it: each store's record
        // answers only the whole request.
        let id = id.map(|id| (id, digest(checks, shape)));
        // The traced path is boxed, so the untraced future is no larger.
        let decided = if spans::spans_on() {
            let decided = self.decide_any(checks, id);
            Box::pin(spans::decide_within(checks, id.map(|(id, _)| id), decided)).await
        } else if checks.iter().any(|c| c.plan.shadow()) {
            Box::pin(self.decide_shadowed(checks, id)).await
        } else {
            self.decide_checks(checks, id).await
        };
        self.record_request(checks, &decided, started_us, started_ms);
        decided
    }

    /// A traced request's checks, shadow-mode ones apart from the enforced.
    async fn decide_any(
        &self,
        checks: &[Check<'_>],
        id: Option<(&RequestId, RequestDigest)>,
    ) -> Decided {
        if checks.iter().any(|c| c.plan.shadow()) {
            Box::pin(self.decide_shadowed(checks, id)).await
        } else {
            self.decide_checks(checks, id).await
        }
    }

    /// Checks on one store in one call, or across stores in order.
    async fn decide_checks(
        &self,
        checks: &[Check<'_>],
        id: Option<(&RequestId, RequestDigest)>,
    ) -> Decided {
        let first = checks.first().map_or(0, |c| c.plan.store());
        if checks.iter().all(|c| c.plan.store() == first) {
            self.decide_on(first, checks, id).await
        } else {
            Box::pin(self.decide_across(checks, id)).await
        }
    }

    /// A request with shadow-mode checks: the enforced ones first, in one
    /// all-or-nothing call under the request id; then the shadow ones in
    /// another, so a shadow rejection never vetoes the enforced spending.
    /// The shadow ones spend their cost only when the enforced ones
    /// admitted a fresh request; otherwise they only peek (cost 0,
    /// uncounted), as enforcing them would have spent nothing of a
    /// rejected request, and a replayed one was charged the first time.
    /// A look's would-be verdict is [`crate::would_allow`]'s.
    async fn decide_shadowed(
        &self,
        checks: &[Check<'_>],
        id: Option<(&RequestId, RequestDigest)>,
    ) -> Decided {
        let (shadow, enforced): (Vec<usize>, Vec<usize>) =
            (0..checks.len()).partition(|&i| checks[i].plan.shadow());
        let mut decisions: Vec<Option<Decision>> = vec![None; checks.len()];
        let mut spend = true;
        let mut first = None;
        if !enforced.is_empty() {
            let group: Vec<Check<'_>> = enforced.iter().map(|&i| checks[i]).collect();
            let decided = self.decide_checks(&group, id).await;
            if decided.replay == Replay::Mismatch || decided.decisions.len() != enforced.len() {
                return decided;
            }
            spend =
                decided.replay != Replay::Replayed && decided.decisions.iter().all(|d| d.allowed);
            first = Some(decided);
        }
        let group: Vec<Check<'_>> = shadow
            .iter()
            .map(|&i| if spend { checks[i] } else { checks[i].peek() })
            .collect();
        let id = if first.is_none() { id } else { None };
        let mut decided = self.decide_checks(&group, id).await;
        if decided.replay == Replay::Mismatch || decided.decisions.len() != shadow.len() {
            return decided;
        }
        for (&i, decision) in shadow.iter().zip(decided.decisions.drain(..)) {
            decisions[i] = Some(decision);
        }
        if let Some(enforced_decided) = first {
            for (&i, decision) in enforced.iter().zip(enforced_decided.decisions) {
                decisions[i] = Some(decision);
            }
            decided.by = worse(enforced_decided.by, decided.by);
            decided.error = enforced_decided.error.or(decided.error);
            decided.replay = enforced_decided.replay;
            decided.store_us = match (enforced_decided.store_us, decided.store_us) {
                (Some(a), Some(b)) => Some(a + b),
                (a, b) => a.or(b),
            };
        }
        decided.decisions = decisions.into_iter().flatten().collect();
        decided
    }

    /// One store's all-or-nothing call, observed and counted.
    pub(crate) async fn decide_on(
        &self,
        store: usize,
        checks: &[Check<'_>],
        id: Option<(&RequestId, RequestDigest)>,
    ) -> Decided {
        let Some(backend) = self.backends.get(store) else {
            return Decided::unanswered(StoreError::Config(format!("no store {store}")));
        };
        let now_ms = self.clock.now_ms();
        let retry =
            id.zip(checks.first().and_then(|c| c.plan.retry()))
                .map(|((id, request), rule)| Retry {
                    id,
                    request,
                    window_ms: rule.window_ms,
                    max_ids: rule.max_ids,
                });
        if let ([one], None) = (checks, retry)
            && let Some(hot) = one.plan.hot_lease()
            && let Some(decided) = Box::pin(self.decide_by_block(backend, one, hot)).await
        {
            self.observe_store(store, &decided);
            self.count(checks, &decided, false, now_ms);
            return decided;
        }
        // Empty (no allocation) unless a check is sharded. Under a request
        // id the first check's shard follows the id, not the turn, so every
        // attempt meets the record its first attempt left there.
        let picks: Vec<Option<usize>> = if checks.iter().any(|c| c.plan.shards().len() > 1) {
            let first_pick = |(i, c): (usize, &Check<'_>)| match (i, retry) {
                (0, Some(retry)) => c.pick_for(retry.id),
                _ => c.pick(),
            };
            checks.iter().enumerate().map(first_pick).collect()
        } else {
            Vec::new()
        };
        let mut decided = if spans::spans_on() {
            let name = self.stores.get(store).map(|watch| &watch.name);
            let call = self.call(backend, checks, &picks, 0, retry);
            Box::pin(spans::store_within(name, call)).await
        } else {
            self.call(backend, checks, &picks, 0, retry).await
        };
        if decided.replay == Replay::Mismatch {
            // The client's fault, answered 422: no decision was made.
            self.observe_store(store, &decided);
            return decided;
        }
        // A sharded request rejected by its shard tries the next one once
        // (docs/config.md, Shards): one more store call, only on rejection
        // (a rejection records no request id, so the spill may).
        if let ([one], [Some(pick)]) = (checks, picks.as_slice())
            && one.cost > 0
            && !decided.by.is_degraded()
            && decided.decisions.first().is_some_and(|d| !d.allowed)
        {
            let spilled = match retry {
                None => self.call(backend, checks, &picks, 1, None).await,
                Some(retry) => self.spill_recorded(backend, one, *pick, retry).await,
            };
            if spilled.decisions.len() == 1 {
                let store_us = match (decided.store_us, spilled.store_us) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                };
                decided = spilled.timed(store_us);
            }
        }
        self.record_store_call(store, checks, decided, now_ms)
    }

    /// A look (cost 0) at a hot identity says what remains as its spends
    /// do: the store's state plus what this instance's block has not spent.
    pub(crate) fn add_unspent_blocks(&self, checks: &[Check<'_>], decided: &mut Decided) {
        if decided.by.is_degraded() {
            return;
        }
        // The clock is read only for a look at a hot identity.
        let mut now_ms = None;
        // By index, not `zip`: this runs on every decision.
        for (i, check) in checks.iter().enumerate() {
            if check.cost > 0 {
                continue;
            }
            if let Some(hot) = check.plan.hot_lease()
                && let Some(decision) = decided.decisions.get_mut(i)
            {
                let now_ms = *now_ms.get_or_insert_with(|| self.clock.monotonic_ms());
                let unspent = hot.unspent(check.identity, now_ms);
                let unspent = i64::try_from(unspent).unwrap_or(i64::MAX);
                decision.remaining = decision.remaining.saturating_add(unspent);
            }
        }
    }

    /// A sharded check under a request id, spilled: spent on the shard
    /// after `pick`, its id recorded on `pick`'s, where the id sends every
    /// attempt first (a cost-0 look there carries the record, all or
    /// nothing with the spending). One decision, the spilled shard's.
    async fn spill_recorded(
        &self,
        backend: &Backend,
        one: &Check<'_>,
        pick: usize,
        retry: Retry<'_>,
    ) -> Decided {
        let (Some(home), Some(next)) = (one.shard(Some(pick), 0), one.shard(Some(pick), 1)) else {
            return self
                .call(backend, &[*one], &[Some(pick)], 1, Some(retry))
                .await;
        };
        let carried = carried_keys(std::slice::from_ref(one), 1, self.clock.monotonic_ms());
        let mut guarded = vec![
            one.peek().guarded(None, Some((home.0, &home.1))),
            one.guarded(None, Some((next.0, &next.1))),
        ];
        guarded.extend(carried_checks(std::slice::from_ref(one), &carried));
        self.metrics.store_requests.inc();
        let mut decided = backend.decide(&guarded, Some(retry)).await;
        if decided.decisions.len() == 2 + carried.len() {
            decided.decisions.remove(0);
            carry::fold(&mut decided.decisions, 1, &carried);
        } else {
            decided.decisions.clear();
        }
        decided
    }

    /// One all-or-nothing store call: leased checks under their share,
    /// sharded ones on their pick's shard (`spill` shards further on), and
    /// each on the shard layouts its plan carries from before a reload
    /// (crate::carry), folded back into its decision.
    async fn call(
        &self,
        backend: &Backend,
        checks: &[Check<'_>],
        picks: &[Option<usize>],
        spill: usize,
        retry: Option<Retry<'_>>,
    ) -> Decided {
        let pick = |i: usize| picks.get(i).copied().flatten();
        self.metrics.store_requests.inc();
        // The clock is read only when a check carries a reload's layouts.
        let carried = if checks.iter().any(|c| c.plan.carries_layouts() > 0) {
            carried_keys(checks, spill, self.clock.monotonic_ms())
        } else {
            Vec::new()
        };
        match checks {
            [one] if carried.is_empty() => {
                let share = one.share(&*self.clock);
                let shard = one.shard(pick(0), spill);
                let guarded = one.guarded(
                    share.as_deref(),
                    shard.as_ref().map(|(policy, id)| (*policy, id)),
                );
                let decided = backend.decide(&[guarded], retry).await;
                note_rejections(checks, &decided);
                decided
            }
            _ => {
                // Shares and shards only when some check has one: a plain
                // batch allocates its guarded checks and nothing else.
                let shares: Vec<Option<Arc<Policy>>> =
                    if checks.iter().any(|c| c.plan.lease().is_some()) {
                        checks.iter().map(|c| c.share(&*self.clock)).collect()
                    } else {
                        Vec::new()
                    };
                let shards: Vec<Option<(&Policy, Identity)>> = if picks.is_empty() {
                    Vec::new()
                } else {
                    checks
                        .iter()
                        .enumerate()
                        .map(|(i, c)| c.shard(pick(i), spill))
                        .collect()
                };
                let mut guarded: Vec<GuardedCheck<'_>> = checks
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
                guarded.extend(carried_checks(checks, &carried));
                let mut decided = backend.decide(&guarded, retry).await;
                carry::fold(&mut decided.decisions, checks.len(), &carried);
                if !shares.is_empty() {
                    note_rejections(checks, &decided);
                }
                decided
            }
        }
    }

    /// Counts what `checks` would get after an earlier store rejected
    /// their request (`decided` is their peek, read as their verdicts).
    pub(crate) fn count_verdicts(&self, checks: &[Check<'_>], decided: &Decided) {
        self.count(checks, decided, false, self.clock.now_ms());
    }

    /// Records each counted check's outcome: its policy's counters, its
    /// hot identity, and degraded or rejected decisions in the log.
    pub(crate) fn count(
        &self,
        checks: &[Check<'_>],
        decided: &Decided,
        replayed: bool,
        now_ms: u64,
    ) {
        // By index, not `zip`: this runs on every decision.
        for (i, check) in checks.iter().enumerate() {
            let Some(decision) = decided.decisions.get(i) else {
                break;
            };
            if decided.by.is_degraded() {
                self.decision_log.degraded(
                    check.plan.policy().name(),
                    || self.sampled_log.name(check.identity),
                    decided.by.name(),
                    decision.allowed,
                    self.clock.now_ms(),
                );
            }
            if let Some(permit) = decision.permit.filter(|_| !replayed) {
                self.metrics.permits.acquired(check.plan.policy(), permit);
            }
            let Some(counters) = check.counters() else {
                continue;
            };
            if let Some(degraded) = counters.degraded.of(decided.by) {
                degraded.inc();
            }
            if check.plan.shadow() {
                count_shadow(counters, decision);
                // A shadow plan's summaries are its own (`/v1/hot` lists
                // its would-be rejections apart from anybody's rejections).
                counters
                    .hot
                    .record(check.identity, decision.allowed, now_ms);
                // A replay is an admission answered from its record, shadow
                // or not: counted as such, so fresh ones can be told apart.
                if replayed && decision.allowed {
                    counters.replayed.inc();
                }
                continue;
            }
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
                self.decision_log.rejected(
                    check.plan.policy().name(),
                    || self.sampled_log.name(check.identity),
                    now_ms,
                );
            }
        }
    }

    /// A store's latency, its errors, and decisions made without it.
    pub(crate) fn observe_store(&self, store: usize, decided: &Decided) {
        if let Some(watch) = self.stores.get(store) {
            if let Some(us) = decided.store_us {
                watch.seconds.observe_us(us);
            }
            match &decided.error {
                Some(error) => {
                    self.metrics.stores.error(watch, error);
                    watch.failed(self.clock.monotonic_ms());
                }
                None if decided.by == DecidedBy::Shared && decided.store_us.is_some() => {
                    watch.answered(&*self.clock);
                }
                None => {}
            }
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
}

/// The more degraded of two ways of deciding, for a request decided on
/// several stores: what its answer must say.
pub(crate) fn worse(a: DecidedBy, b: DecidedBy) -> DecidedBy {
    let rank = |d: DecidedBy| match d {
        DecidedBy::Shared => 0,
        DecidedBy::FailOpen => 1,
        DecidedBy::Local => 2,
        DecidedBy::FailClosed => 3,
    };
    if rank(b) > rank(a) { b } else { a }
}

/// The whole request's digest, as its request id's records hold it.
fn digest(checks: &[Check<'_>], shape: Option<&str>) -> RequestDigest {
    let mut hasher = RequestHasher::new(shape);
    for check in checks {
        hasher.check(
            check.plan.policy().name(),
            check.identity.as_bytes(),
            check.cost,
        );
    }
    hasher.finish()
}

/// Leased checks the shared store turned away ask for more than their
/// floor at their lease's next renewal (a degraded decision says nothing
/// of the share).
fn note_rejections(checks: &[Check<'_>], decided: &Decided) {
    if decided.by != DecidedBy::Shared || decided.decisions.len() != checks.len() {
        return;
    }
    for (check, decision) in checks.iter().zip(&decided.decisions) {
        check.note(decision);
    }
}

/// A shadow-mode check's outcome: `allowed` when it would have admitted,
/// `shadow` when it would have rejected. Not a rejection anybody saw, so
/// the rejection log does not hear of it, and its hot identities are kept
/// apart from the enforced policies' ([`LimiterMetrics::shadow_policy_counters`]).
fn count_shadow(counters: &PolicyCounters, decision: &Decision) {
    if decision.allowed {
        counters.allowed.inc();
    } else if let Some(shadow) = &counters.shadow {
        shadow.inc();
    }
}
