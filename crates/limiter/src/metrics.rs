//! The limiter's metrics: what every decision records whatever door it
//! came in by — outcomes per policy, decision and store latency, store
//! errors, degraded decisions, the stores' gauges, leases, hot leases and
//! hot identities. Registered into the caller's registry (a server adds
//! its own series beside them); per-policy handles are resolved once per
//! plan, so a decision only increments an atomic.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, PoisonError, RwLock};

use crate::latency::LatencyHistogram;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tollgate_core::{Clock, Identity, SecretHasher};
use tollgate_store::DecidedBy;

use crate::hot::{HOT_IDENTITIES, HOT_WINDOW_MS, HotIdentities, PolicyHot};
use crate::permits::PermitSeries;
use crate::stores::{StoreCollector, StoreSeries};

/// A policy's decisions by outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// The policy's name.
    pub policy: String,
    /// `allowed` or `rejected`.
    pub outcome: &'static str,
}

/// A policy, for counters of what happened to it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    /// The policy's name.
    pub policy: String,
}

/// A policy in this instance's region (leased and split policies).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabels {
    /// The policy's name.
    pub policy: String,
    /// This instance's region.
    pub region: String,
}

/// A renewal's outcome for a leased policy.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseOutcomeLabels {
    /// The policy's name.
    pub policy: String,
    /// This instance's region.
    pub region: String,
    /// What the renewal came to.
    pub outcome: &'static str,
}

/// A decision made without the shared store.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DegradedLabels {
    /// `fail_open`, `fail_closed` or `local`.
    pub path: &'static str,
    /// `allowed` or `rejected`.
    pub outcome: &'static str,
}

/// A policy's decisions made without the shared store, by path.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyPathLabels {
    /// The policy's name.
    pub policy: String,
    /// `fail_open`, `fail_closed` or `local`.
    pub path: &'static str,
}

/// The limiter's series.
pub struct LimiterMetrics {
    decisions: Family<DecisionLabels, Counter>,
    replayed: Family<PolicyLabels, Counter>,
    /// Time to decide one request, store calls included.
    pub decision_seconds: LatencyHistogram,
    /// Requests decided without the shared store, by path and outcome.
    pub degraded: Family<DegradedLabels, Counter>,
    policy_degraded: Family<PolicyPathLabels, Counter>,
    /// Each store's series, labelled by its role.
    pub stores: Arc<StoreSeries>,
    /// Decisions admitted from a hot identity's local block.
    pub hot_lease_local: Counter,
    /// Decisions rejected here while the store cannot grant a hot
    /// identity's block (it refused one until then).
    pub hot_lease_refused_local: Counter,
    /// What the limiter asked of its stores: decisions (one call a request
    /// or batch), hot-lease blocks taken and given back.
    pub store_requests: Counter,
    /// Blocks taken from the store for hot identities.
    pub hot_lease_blocks: Counter,
    /// Units of blocks neither spent nor given back.
    pub hot_lease_lost: Counter,
    /// Units of blocks given back to the store.
    pub hot_lease_returned: Counter,
    split_turned_away: Family<LeaseLabels, Counter>,
    /// The identities behind the most decisions and rejections, per policy.
    pub hot: Arc<HotIdentities>,
    /// Shadow-mode policies' hot identities, their would-be rejections
    /// counted as rejections: apart from `hot`, so neither the hot identity
    /// series nor a reader of `hot` takes them for rejections anybody saw.
    pub shadow_hot: Arc<HotIdentities>,
    /// How the hot identity series name identities; read at each scrape.
    hot_series: Arc<RwLock<HotSeries>>,
    lease: LeaseFamilies,
    /// Concurrency policies' permits, as this process sees them.
    pub(crate) permits: Arc<PermitSeries>,
    clock: Arc<dyn Clock>,
}

/// The families of `leased` policies' series.
struct LeaseFamilies {
    share: Family<LeaseLabels, Gauge>,
    unleased: Family<LeaseLabels, Gauge>,
    demand: Family<LeaseLabels, Gauge>,
    outcomes: Family<LeaseOutcomeLabels, Counter>,
    floor_seconds: Family<LeaseLabels, Counter<f64, AtomicU64>>,
    identities: Family<LeaseLabels, Gauge>,
    refused_identities: Family<LeaseLabels, Counter>,
}

/// One leased policy's series on this instance.
#[derive(Clone)]
pub struct LeaseCounters {
    /// The most units of the limit one identity may spend here now: its
    /// floor plus its grant.
    pub share: Gauge,
    /// Units the identities renewed asked for in the last renewal period.
    pub demand: Gauge,
    /// The spare nobody held at the last grants, summed over identities.
    pub unleased: Gauge,
    /// Renewal periods an identity wanting more ended on its floor, in
    /// seconds.
    pub floor_seconds: Counter<f64, AtomicU64>,
    /// Identities holding a lease entry on this instance.
    pub identities: Gauge,
    /// Identities over their floor refused an entry by the bound.
    pub refused_identities: Counter,
    outcomes: Family<LeaseOutcomeLabels, Counter>,
    labels: LeaseLabels,
}

impl LeaseCounters {
    /// The counter of one renewal outcome (granted, renewed, floor,
    /// new_ledger, held_by_others, refused, expired).
    pub fn outcome(&self, outcome: &'static str) -> Counter {
        self.outcomes
            .get_or_create(&LeaseOutcomeLabels {
                policy: self.labels.policy.clone(),
                region: self.labels.region.clone(),
                outcome,
            })
            .clone()
    }
}

/// The counters one policy increments.
#[derive(Clone, Debug)]
pub struct PolicyCounters {
    /// Its admissions.
    pub allowed: Counter,
    /// Its rejections.
    pub rejected: Counter,
    /// Its hot identities' summaries.
    pub hot: Arc<PolicyHot>,
    /// Admissions answered from a request id's record, consuming nothing
    /// (also counted in `allowed`).
    pub replayed: Counter,
    /// Under `split`: units this region's share rejected
    /// (`tollgate_split_turned_away_units`).
    pub split_turned_away: Option<Counter>,
    /// In shadow mode: the rejections it would have made, none enforced
    /// (`outcome="shadow"`); `None` for an enforced policy, which so
    /// exports no such series.
    pub shadow: Option<Counter>,
    /// Its decisions made without the shared store, by path.
    pub degraded: DegradedCounters,
}

/// One policy's decisions made without the shared store
/// (`tollgate_policy_degraded_decisions_total`), one counter a path.
#[derive(Clone, Debug)]
pub struct DegradedCounters {
    /// Admitted unchecked (`fail_open`).
    pub fail_open: Counter,
    /// Rejected unchecked (`fail_closed`).
    pub fail_closed: Counter,
    /// Decided on this instance's fallback (`local`).
    pub local: Counter,
}

impl DegradedCounters {
    /// The counter of the path that decided, if it is a degraded one.
    pub fn of(&self, by: DecidedBy) -> Option<&Counter> {
        match by {
            DecidedBy::FailOpen => Some(&self.fail_open),
            DecidedBy::FailClosed => Some(&self.fail_closed),
            DecidedBy::Local => Some(&self.local),
            DecidedBy::Shared => None,
        }
    }

    /// Every path's count, summed.
    pub fn total(&self) -> u64 {
        self.fail_open.get() + self.fail_closed.get() + self.local.get()
    }
}

/// A counter registered under `name`.
fn counter(registry: &mut Registry, name: &str, help: &str) -> Counter {
    let counter = Counter::default();
    registry.register(name, help, counter.clone());
    counter
}

/// A family registered under `name`.
fn family<L, M>(registry: &mut Registry, name: &str, help: &str) -> Family<L, M>
where
    L: EncodeLabelSet + Clone + std::hash::Hash + Eq + std::fmt::Debug + Send + Sync + 'static,
    M: Default + prometheus_client::metrics::TypedMetric + std::fmt::Debug + Send + Sync + 'static,
    M: prometheus_client::encoding::EncodeMetric,
{
    let family = Family::<L, M>::default();
    registry.register(name, help, family.clone());
    family
}

impl LimiterMetrics {
    /// Registers the limiter's series in `registry` (whose prefix they
    /// take). `clock` dates the hot identities' windows.
    pub fn register(registry: &mut Registry, clock: Arc<dyn Clock>) -> Self {
        let hot = Arc::new(HotIdentities::default());
        let hot_series = Arc::new(RwLock::new(HotSeries::Off));
        let stores = Arc::new(StoreSeries::new());
        registry.register_collector(Box::new(StoreCollector(Arc::clone(&stores))));
        registry.register_collector(Box::new(HotCollector {
            hot: Arc::clone(&hot),
            series: Arc::clone(&hot_series),
            clock: Arc::clone(&clock),
        }));
        Self {
            decisions: family(
                registry,
                "decisions",
                "Decisions by policy and outcome (allowed, rejected; shadow: a shadow-mode policy's rejection, not enforced)",
            ),
            replayed: family(
                registry,
                "replayed_decisions",
                "Admissions answered from a request id's record (a retry inside its window), consuming nothing; also counted in tollgate_decisions_total",
            ),
            decision_seconds: histogram(
                registry,
                "decision_duration_seconds",
                "Time to decide one request (all its policies), store call included, in seconds",
                // 10 µs to ~5 s.
                LatencyHistogram::exponential(10, 2, 20),
            ),
            hot_lease_local: counter(
                registry,
                "hot_lease_local_decisions",
                "Decisions admitted from a hot identity's local block (hot_lease), without a store call",
            ),
            hot_lease_refused_local: counter(
                registry,
                "hot_lease_local_rejections",
                "Decisions rejected locally for a hot identity whose block the store refused, until the store's own wait for a block has passed (hot_lease), without a store call",
            ),
            store_requests: counter(
                registry,
                "store_requests",
                "Requests the limiter made of its stores: a decision (one per request or batch; a sharded spill is a second), a hot-lease block taken, a block's unspent units given back. A Redis store answers some from its rejected-until cache or a failure mode without a round trip",
            ),
            hot_lease_lost: counter(
                registry,
                "hot_lease_lost_units",
                "Units of the budget taken in a hot identity's block, never spent and not given back (the key's state could not take them back exactly, the store did not answer, or the instance dropped the block): consumed, never admitted",
            ),
            hot_lease_returned: counter(
                registry,
                "hot_lease_returned_units",
                "Units of a hot identity's block never spent and given back to the key's state when the block ended (hot_lease)",
            ),
            hot_lease_blocks: counter(
                registry,
                "hot_lease_blocks",
                "Blocks of a hot identity's budget taken from the store, one decision each (hot_lease)",
            ),
            split_turned_away: family(
                registry,
                "split_turned_away_units",
                "Units a split policy's share for this region rejected (not while degraded): demand above the region's share, which a global scope would have admitted as far as the other regions left their shares unused — the capacity split strands, as this region's demand meets it",
            ),
            degraded: family(
                registry,
                "degraded_decisions",
                "Requests decided without the shared store, by path (fail_open, fail_closed, local) and outcome",
            ),
            policy_degraded: family(
                registry,
                "policy_degraded_decisions",
                "Each policy's checks decided without the shared store, by policy and path (fail_open, fail_closed, local); a request of several policies counts once in each",
            ),
            lease: LeaseFamilies::register(registry),
            permits: PermitSeries::register(registry, Arc::clone(&clock)),
            stores,
            hot,
            shadow_hot: Arc::new(HotIdentities::default()),
            hot_series,
            clock,
        }
    }

    /// How the `hot_identity_*` series name identities from the next
    /// scrape on ([`HotSeries::Off`] until set). A config load sets it, so a
    /// reload can change it.
    pub fn set_hot_series(&self, series: HotSeries) {
        *self
            .hot_series
            .write()
            .unwrap_or_else(PoisonError::into_inner) = series;
    }

    /// A leased policy's series in `region`.
    pub fn lease_counters(&self, policy: &str, region: &str) -> LeaseCounters {
        let labels = LeaseLabels {
            policy: policy.to_owned(),
            region: region.to_owned(),
        };
        LeaseCounters {
            share: self.lease.share.get_or_create(&labels).clone(),
            demand: self.lease.demand.get_or_create(&labels).clone(),
            unleased: self.lease.unleased.get_or_create(&labels).clone(),
            floor_seconds: self.lease.floor_seconds.get_or_create(&labels).clone(),
            identities: self.lease.identities.get_or_create(&labels).clone(),
            refused_identities: self.lease.refused_identities.get_or_create(&labels).clone(),
            outcomes: self.lease.outcomes.clone(),
            labels,
        }
    }

    /// The counters `policy`'s decisions increment.
    pub fn policy_counters(&self, policy: &str) -> PolicyCounters {
        let get = |outcome| {
            self.decisions
                .get_or_create(&DecisionLabels {
                    policy: policy.to_owned(),
                    outcome,
                })
                .clone()
        };
        PolicyCounters {
            allowed: get("allowed"),
            rejected: get("rejected"),
            hot: self.hot.policy(policy, self.clock.now_ms()),
            replayed: self
                .replayed
                .get_or_create(&PolicyLabels {
                    policy: policy.to_owned(),
                })
                .clone(),
            split_turned_away: None,
            shadow: None,
            degraded: self.degraded_counters(policy),
        }
    }

    /// `policy`'s counts of decisions made without the shared store.
    fn degraded_counters(&self, policy: &str) -> DegradedCounters {
        let get = |path| {
            self.policy_degraded
                .get_or_create(&PolicyPathLabels {
                    policy: policy.to_owned(),
                    path,
                })
                .clone()
        };
        DegradedCounters {
            fail_open: get("fail_open"),
            fail_closed: get("fail_closed"),
            local: get("local"),
        }
    }

    /// A split policy's count of units its region's share rejected here.
    pub fn split_turned_away(&self, policy: &str, region: &str) -> Counter {
        self.split_turned_away
            .get_or_create(&LeaseLabels {
                policy: policy.to_owned(),
                region: region.to_owned(),
            })
            .clone()
    }
}

/// `histogram` registered under `name`.
fn histogram(
    registry: &mut Registry,
    name: &str,
    help: &str,
    histogram: LatencyHistogram,
) -> LatencyHistogram {
    registry.register(name, help, histogram.clone());
    histogram
}

impl LeaseFamilies {
    fn register(registry: &mut Registry) -> Self {
        Self {
            share: family(
                registry,
                "lease_share",
                "The most units of a leased policy's limit one identity may spend on this instance now (its region's floor plus its grant)",
            ),
            unleased: family(
                registry,
                "lease_unleased",
                "Units of a leased policy's spare that no region held at this instance's last grants, summed over the identities renewed: capacity stranded until demand claims it (or resting between regions)",
            ),
            demand: family(
                registry,
                "lease_demand",
                "Units of a leased policy this instance was asked for in its last renewal period by the identities it renewed (what it reports to the ledger)",
            ),
            outcomes: family(
                registry,
                "lease_renewals",
                "Identities' lease renewals by outcome: granted, renewed, floor (granted nothing), new_ledger, held_by_others (less than demand earned), refused (the ledger could not be asked), expired (a grant ran out unrenewed)",
            ),
            floor_seconds: family(
                registry,
                "lease_floor_seconds",
                "Time identities wanting more than their floor spent on it alone, in seconds, counted per identity and renewal period",
            ),
            identities: family(
                registry,
                "lease_identities",
                "Identities of a leased policy holding a lease entry on this instance (needing more than their floor, or holding a grant)",
            ),
            refused_identities: family(
                registry,
                "lease_identities_refused",
                "Times an identity over its floor found this instance's lease table full (leased.identities) and spent its floor alone",
            ),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HotLabels {
    policy: String,
    identity: String,
}

/// How the `hot_identity_*` series name an identity in their `identity`
/// label. Identities hold client addresses, tenant names, emails: a
/// metrics reader (often a wider audience than `/v1/hot`'s admin token)
/// sees them raw only when an operator asks for it.
#[derive(Clone, Debug, Default)]
pub enum HotSeries {
    /// No hot identity series.
    #[default]
    Off,
    /// `hash:` and a keyed hash of the identity's encoding: which
    /// identities are hot and how hot, stable across instances sharing the
    /// key, but not who they are.
    Hashed(SecretHasher),
    /// The identity as `/v1/hot` shows it ([`Identity::label`]).
    Raw,
}

impl HotSeries {
    /// How `identity` is named (a metric's `identity` label, a log field,
    /// a trace's key), or `None` when the series are off. Always from the
    /// injective encoding, the bytes the store keys by: two identities are
    /// never one name, whatever their display forms share.
    pub fn label(&self, identity: &Identity) -> Option<String> {
        match self {
            HotSeries::Off => None,
            HotSeries::Hashed(hasher) => Some(format!("hash:{}", hasher.hash(identity.as_bytes()))),
            HotSeries::Raw => Some(identity.label()),
        }
    }
}

/// Reports the hot identities' last whole window at each scrape.
struct HotCollector {
    hot: Arc<HotIdentities>,
    series: Arc<RwLock<HotSeries>>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for HotCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HotCollector")
    }
}

impl Collector for HotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let series = self
            .series
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if matches!(series, HotSeries::Off) {
            return Ok(());
        }
        let report = self.hot.report(self.clock.now_ms());
        for (name, what) in [
            ("hot_identity_decisions", "Decisions"),
            ("hot_identity_rejections", "Rejections"),
        ] {
            let help = format!(
                "{what} in the last whole {} s window of the {} identities behind each policy's most {} (upper bounds: the Space-Saving algorithm never under-counts)",
                HOT_WINDOW_MS / 1000,
                HOT_IDENTITIES,
                what.to_lowercase()
            );
            let mut metric = encoder.encode_descriptor(name, &help, None, MetricType::Gauge)?;
            // By policy, then most first.
            for (policy, hot) in &report {
                let list = if name == "hot_identity_decisions" {
                    &hot.decisions
                } else {
                    &hot.rejections
                };
                // Only the last whole window: a series per scrape would
                // otherwise rise and reset within each window.
                for (identity, n) in list {
                    let Some(identity) = series.label(identity) else {
                        continue;
                    };
                    let labels = HotLabels {
                        policy: policy.clone(),
                        identity,
                    };
                    metric
                        .encode_family(&labels)?
                        .encode_gauge(&i64::try_from(*n).unwrap_or(i64::MAX))?;
                }
            }
        }
        Ok(())
    }
}

impl LimiterMetrics {
    /// A shadow-mode policy's count of the rejections it would have made
    /// (`tollgate_decisions_total{outcome="shadow"}`).
    pub fn shadow_counter(&self, policy: &str) -> Counter {
        self.decisions
            .get_or_create(&DecisionLabels {
                policy: policy.to_owned(),
                outcome: "shadow",
            })
            .clone()
    }

    /// The counters a shadow-mode policy's decisions increment: its
    /// would-be rejections under `outcome="shadow"`, its hot identities in
    /// [`LimiterMetrics::shadow_hot`].
    pub fn shadow_policy_counters(&self, policy: &str) -> PolicyCounters {
        PolicyCounters {
            shadow: Some(self.shadow_counter(policy)),
            hot: self.shadow_hot.policy(policy, self.clock.now_ms()),
            ..self.policy_counters(policy)
        }
    }
}
