//! The per-decision debug log: one structured event per sampled decision
//! under the `tollgate::decision` target, off unless a config asks for it
//! (`server.decision_log`) and the target is enabled at debug. Identities
//! are named as the hot identity series name them (keyed hash unless
//! `hot_identity_metrics: raw`), so turning it on never leaks who is asking.

use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

use tollgate_core::{Decision, Identity};
use tollgate_store::{DecidedBy, GuardedDecisions};

use crate::metrics::HotSeries;
use crate::plan::Check;
use crate::shadow::{shadow_looked, would_allow};
use crate::stores::StoreWatch;

/// The tracing target of the per-decision events.
pub const DECISION_TARGET: &str = "tollgate::decision";

/// A shadow-mode policy's decision that would have admitted: the request
/// went on, and enforcing the policy would not have stopped it.
pub const SHADOW_ALLOWED: &str = "shadow_allowed";
/// A shadow-mode policy's decision that would have rejected: the request
/// went on (the enforced policies decided it), but enforcing this policy
/// would have turned it away. `allowed` is then `false`, as `/v1/check`'s
/// `would_allow` is.
pub const SHADOW_REJECTED: &str = "shadow_rejected";

/// One million: sample rates are kept in parts per million, so
/// `sample_percent: 0.01` is exact.
const PPM: u64 = 1_000_000;

/// How a config samples decisions and names their identities.
#[derive(Clone, Debug, Default)]
pub struct DecisionSampling {
    /// Decisions logged per million (0: none).
    pub per_million: u64,
    /// How the identity is named; `Off` logs `-` (no identity key to hash with).
    pub identity: HotSeries,
}

impl DecisionSampling {
    /// `percent` of decisions (clamped to 0..=100), identities named by `identity`.
    pub fn percent(percent: f64, identity: HotSeries) -> Self {
        Self {
            per_million: per_million(percent),
            identity,
        }
    }
}

/// A logged decision's verdict: an enforced policy's, or a shadow-mode
/// policy's would-be one (`/v1/check`'s `would_allow`).
#[derive(Clone, Copy)]
pub(crate) enum Verdict {
    Enforced(bool),
    Shadow(bool),
}

/// What one decision says besides its check: where and how it was made.
pub(crate) struct Made<'a> {
    pub(crate) store: &'a str,
    pub(crate) degraded: &'a str,
    pub(crate) latency_us: u64,
}

/// An even spread of decisions (every one at 100 %, one in a hundred at
/// 1 %), counted rather than drawn so a rate is exact over any run.
#[derive(Default)]
pub(crate) struct Sampler {
    per_million: AtomicU64,
    seen: AtomicU64,
}

impl Sampler {
    /// From the next decision on, take `percent` (clamped to 0..=100).
    pub(crate) fn set_percent(&self, percent: f64) {
        self.set_per_million(per_million(percent));
    }

    fn set_per_million(&self, per_million: u64) {
        self.per_million
            .store(per_million.min(PPM), Ordering::Relaxed);
    }

    /// Whether the next decision is one to take: cheap when off.
    pub(crate) fn take(&self) -> bool {
        let per_million = self.per_million.load(Ordering::Relaxed);
        if per_million == 0 {
            return false;
        }
        let n = self.seen.fetch_add(1, Ordering::Relaxed) % PPM;
        // The count of taken decisions steps up at this one.
        (n + 1) * per_million / PPM > n * per_million / PPM
    }
}

fn per_million(percent: f64) -> u64 {
    (percent.clamp(0.0, 100.0) * 10_000.0).round() as u64
}

/// The sampled per-decision log and how it names identities.
#[derive(Default)]
pub(crate) struct SampledLog {
    sampler: Sampler,
    identity: RwLock<HotSeries>,
}

impl SampledLog {
    /// From the next decision on, sample as `sampling` says.
    pub(crate) fn set(&self, sampling: DecisionSampling) {
        if let Ok(mut identity) = self.identity.write() {
            *identity = sampling.identity;
        }
        self.sampler.set_per_million(sampling.per_million);
    }

    /// `identity` as every log line names it: the keyed hash of its
    /// encoding (raw only with `hot_identity_metrics: raw`, then escaped
    /// and bounded: [`Identity::label`]), or `-` without an identity key.
    pub(crate) fn name(&self, identity: &Identity) -> String {
        self.identity
            .read()
            .ok()
            .and_then(|series| series.label(identity))
            .unwrap_or_else(|| "-".to_owned())
    }

    /// Whether the next decision is one to log: cheap when off.
    pub(crate) fn take(&self) -> bool {
        tracing::enabled!(target: DECISION_TARGET, tracing::Level::DEBUG) && self.sampler.take()
    }

    /// Logs one sampled decision of `policy` (shadowed or not): `allowed`
    /// is the policy's own verdict, a shadow policy's would-be one.
    pub(crate) fn log(
        &self,
        policy: &str,
        verdict: Verdict,
        identity: &Identity,
        cost: u64,
        decision: &Decision,
        made: &Made<'_>,
    ) {
        let identity = self.name(identity);
        let (outcome, allowed) = match verdict {
            Verdict::Shadow(true) => (SHADOW_ALLOWED, true),
            Verdict::Shadow(false) => (SHADOW_REJECTED, false),
            Verdict::Enforced(true) => ("allowed", true),
            Verdict::Enforced(false) => ("rejected", false),
        };
        tracing::debug!(
            target: DECISION_TARGET,
            policy,
            identity,
            cost,
            outcome,
            allowed,
            remaining = decision.remaining,
            store = made.store,
            degraded = made.degraded,
            latency_us = made.latency_us,
            "decision"
        );
    }

    /// The sampled checks' decisions, one debug event each: `took_us`
    /// the whole request's, a check's store named by its role in `stores`.
    pub(crate) fn log_checks(
        &self,
        checks: &[Check<'_>],
        decided: &GuardedDecisions,
        took_us: u64,
        stores: &[StoreWatch],
    ) {
        // Nothing to look at while the log is off (the common case).
        if !tracing::enabled!(target: DECISION_TARGET, tracing::Level::DEBUG) {
            return;
        }
        let degraded = match decided.by {
            DecidedBy::Shared => "none",
            by => by.name(),
        };
        let looked = shadow_looked(checks, decided);
        for (check, decision) in checks.iter().zip(&decided.decisions) {
            if !check.counted || !self.take() {
                continue;
            }
            let store = stores
                .get(check.plan.store())
                .map_or("", |watch| watch.name.role.as_str());
            let made = Made {
                store,
                degraded,
                latency_us: took_us,
            };
            let verdict = match check.plan.shadow() {
                true => Verdict::Shadow(would_allow(check, decision, looked)),
                false => Verdict::Enforced(decision.allowed),
            };
            let policy = check.plan.policy().name();
            self.log(policy, verdict, check.identity, check.cost, decision, &made);
        }
    }
}
