//! Each store by name — its role, and its region when regional — so an
//! operator knows which one to page: the store series (labelled by role),
//! each store's answer to a readiness ping, and one log line when a store
//! that failed answers again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use crate::latency::LatencyHistogram;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use tollgate_core::Clock;
use tollgate_store::{StoreError, StoreStats};

/// A store's labels: `role`, and `region` for a regional store.
pub type StoreLabels = Vec<(&'static str, String)>;

/// Which store: the role the config gives it, the region of a regional
/// store, and what it is (kind and redacted address) for log lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreName {
    /// `local`, `regional` or `global`.
    pub role: String,
    /// The region, for a regional store.
    pub region: Option<String>,
    /// What the store is, never a password (`redis redis://host:6379/0`).
    pub what: String,
}

impl StoreName {
    /// The store's series labels: `role`, and `region` when it has one.
    pub fn labels(&self) -> StoreLabels {
        let mut labels = vec![("role", self.role.clone())];
        if let Some(region) = &self.region {
            labels.push(("region", region.clone()));
        }
        labels
    }
}

impl std::fmt::Display for StoreName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.role)?;
        if let Some(region) = &self.region {
            write!(f, " of region {region}")?;
        }
        write!(f, " ({})", self.what)
    }
}

/// One store's answer to a readiness ping.
#[derive(Debug)]
pub struct StoreHealth {
    /// Which store.
    pub name: StoreName,
    /// Whether it can be down at all (not the memory store).
    pub shared: bool,
    /// What its ping answered.
    pub answer: Result<(), StoreError>,
}

/// A store as the limiter watches it: its series handles (resolved once,
/// so a call increments without a lookup) and its failures since it last
/// answered, for the line saying it is back.
pub(crate) struct StoreWatch {
    pub(crate) name: StoreName,
    pub(crate) seconds: LatencyHistogram,
    labels: StoreLabels,
    failures: AtomicU64,
    down_since_ms: AtomicU64,
}

impl StoreWatch {
    /// A failed call or ping at `now_ms` (monotonic).
    pub(crate) fn failed(&self, now_ms: u64) {
        if self.failures.fetch_add(1, Ordering::Relaxed) == 0 {
            self.down_since_ms.store(now_ms, Ordering::Relaxed);
        }
    }

    /// A call or ping answered: after failures, logged once. The clock
    /// is read only then, not on every call.
    pub(crate) fn answered(&self, clock: &dyn Clock) {
        if self.failures.load(Ordering::Relaxed) == 0 {
            return;
        }
        let now_ms = clock.monotonic_ms();
        let failures = self.failures.swap(0, Ordering::Relaxed);
        if failures == 0 {
            return; // another call logged this recovery
        }
        let down_ms = now_ms.saturating_sub(self.down_since_ms.load(Ordering::Relaxed));
        tracing::info!(
            store = %self.name.role,
            failures,
            down_s = down_ms as f64 / 1000.0,
            "store {} answers again after {failures} failures / down for {:.1} s",
            self.name,
            down_ms as f64 / 1000.0
        );
    }
}

/// Builds the store-call histogram with its buckets (50 µs to ~1.6 s).
#[derive(Clone, Copy)]
struct CallSeconds;

impl MetricConstructor<LatencyHistogram> for CallSeconds {
    fn new_metric(&self) -> LatencyHistogram {
        LatencyHistogram::exponential(50, 2, 16)
    }
}

/// The stores' series, by store. Gauges and since-start counts are read
/// from the stores at scrape time; errors and call latencies are recorded
/// as they happen. A memory-only server exports no circuit, latency or
/// cache series: it has no shared store for them to describe; its errors
/// (`full`) only once one happened.
pub struct StoreSeries {
    stores: RwLock<Vec<StoreRow>>,
    errors: Family<StoreLabels, Counter>,
    /// Whether any store call failed since start.
    any_error: std::sync::atomic::AtomicBool,
    seconds: Family<StoreLabels, LatencyHistogram, CallSeconds>,
}

/// One store's last readings.
struct StoreRow {
    labels: StoreLabels,
    shared: bool,
    up: bool,
    stats: StoreStats,
}

impl std::fmt::Debug for StoreSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreSeries")
    }
}

impl StoreSeries {
    /// No stores yet; [`StoreSeries::watch`] adds each.
    pub(crate) fn new() -> Self {
        Self {
            stores: RwLock::new(Vec::new()),
            errors: Family::default(),
            any_error: std::sync::atomic::AtomicBool::new(false),
            seconds: Family::new_with_constructor(CallSeconds),
        }
    }

    /// Adds the next store (in the limiter's order) and its handles.
    pub(crate) fn watch(&self, name: StoreName, shared: bool) -> StoreWatch {
        let labels = name.labels();
        self.rows().push(StoreRow {
            labels: labels.clone(),
            shared,
            up: true,
            stats: StoreStats::default(),
        });
        StoreWatch {
            seconds: self.seconds.get_or_create(&labels).clone(),
            name,
            labels,
            failures: AtomicU64::new(0),
            down_since_ms: AtomicU64::new(0),
        }
    }

    /// Counts a failed call of `store` by its error's kind.
    pub(crate) fn error(&self, store: &StoreWatch, error: &StoreError) {
        let mut labels = store.labels.clone();
        labels.push(("kind", error.kind().to_owned()));
        self.errors.get_or_create(&labels).inc();
        self.any_error
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The readings of the `index`th store.
    pub(crate) fn read(&self, index: usize, stats: StoreStats) {
        if let Some(row) = self.rows().get_mut(index) {
            row.stats = stats;
        }
    }

    /// The `index`th store's answer to its readiness ping.
    pub(crate) fn set_up(&self, index: usize, up: bool) {
        if let Some(row) = self.rows().get_mut(index) {
            row.up = up;
        }
    }

    /// Every store's last readings, in the limiter's order: what the
    /// store series say at a scrape (refreshed by
    /// [`crate::Limiter::maintain_gauges`], as a scrape refreshes them).
    pub fn readings(&self) -> Vec<StoreReading> {
        let rows = self.stores.read().unwrap_or_else(PoisonError::into_inner);
        rows.iter()
            .map(|row| StoreReading {
                labels: row.labels.clone(),
                shared: row.shared,
                up: row.up,
                circuit: row.shared.then(|| {
                    CIRCUIT_STATES
                        .iter()
                        .find(|(_, n)| *n == row.stats.circuit)
                        .map_or("closed", |(state, _)| *state)
                }),
                keys: row.stats.keys,
            })
            .collect()
    }

    fn rows(&self) -> std::sync::RwLockWriteGuard<'_, Vec<StoreRow>> {
        self.stores.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One store's last readings, as its series state them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreReading {
    /// Its series labels: `role`, and `region` for a regional store.
    pub labels: StoreLabels,
    /// Whether it is a shared store (Redis), which can be down.
    pub shared: bool,
    /// Whether it answered its last readiness ping (`tollgate_store_up`).
    pub up: bool,
    /// A shared store's circuit: `closed`, `open` or `half_open`
    /// (`tollgate_store_circuit_state`); `None` for a memory store.
    pub circuit: Option<&'static str>,
    /// Keys held in this process (`tollgate_store_keys`).
    pub keys: u64,
}

/// Encodes [`StoreSeries`] at each scrape.
#[derive(Debug)]
pub(crate) struct StoreCollector(pub(crate) Arc<StoreSeries>);

/// The circuit states, as the `state` label and [`StoreStats::circuit`]
/// numbers them.
const CIRCUIT_STATES: [(&str, i64); 3] = [("closed", 0), ("open", 1), ("half_open", 2)];

/// A per-store reading: its name, help, type, whether memory stores have
/// it too, and how to read it from a row.
type Reading = (
    &'static str,
    &'static str,
    MetricType,
    bool,
    fn(&StoreRow) -> u64,
);

/// The series read from the stores at scrape time.
const READINGS: [Reading; 5] = [
    (
        "store_up",
        "1 when the store answered its last readiness ping (GET /readyz, and once at start), 0 when it did not",
        MetricType::Gauge,
        true,
        |r| u64::from(r.up),
    ),
    (
        "store_keys",
        "Keys held in this process by the store (the memory store's, or a Redis store's local fallback's)",
        MetricType::Gauge,
        true,
        |r| r.stats.keys,
    ),
    (
        "store_evictions",
        "Live keys the store evicted in this process because it was full, since start",
        MetricType::Counter,
        true,
        |r| r.stats.evictions,
    ),
    (
        "rejected_cache_answers",
        "Decisions answered since start from the rejected-until cache without a store call (exact: the key is rejected until then); beside tollgate_store_script_calls_total, how much the cache shields the store from an abusive client",
        MetricType::Counter,
        false,
        |r| r.stats.answered_locally,
    ),
    (
        "store_script_calls",
        "Script calls made since start, for every purpose: decisions (each may carry a batch of them), hot-lease blocks and give-backs, lease renewals, gcra scale lookups, and a resend after NOSCRIPT",
        MetricType::Counter,
        false,
        |r| r.stats.script_calls,
    ),
];

impl Collector for StoreCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let rows = self.0.stores.read().unwrap_or_else(PoisonError::into_inner);
        let shared: Vec<&StoreRow> = rows.iter().filter(|r| r.shared).collect();
        for (name, help, kind, memory_too, value) in READINGS {
            let rows: Vec<&StoreRow> = rows.iter().filter(|r| memory_too || r.shared).collect();
            if rows.is_empty() {
                continue;
            }
            let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
            for row in rows {
                let mut family = metric.encode_family(&row.labels)?;
                match kind {
                    MetricType::Counter => {
                        family.encode_counter::<NoLabelSet, _, u64>(&value(row), None)?;
                    }
                    _ => family.encode_gauge(&i64::try_from(value(row)).unwrap_or(i64::MAX))?,
                }
            }
        }
        if !shared.is_empty() || self.0.any_error.load(std::sync::atomic::Ordering::Relaxed) {
            let errors = &self.0.errors;
            errors.encode(encoder.encode_descriptor(
                "store_errors",
                "Store calls that failed, by store and kind (timeout, refused, dns, auth, unavailable, protocol, config; full: a full memory store)",
                None,
                errors.metric_type(),
            )?)?;
        }
        if shared.is_empty() {
            return Ok(());
        }
        let mut circuit = encoder.encode_descriptor(
            "store_circuit_state",
            "The shared store's circuit: 1 for its current state (closed, open, half_open), 0 for the others",
            None,
            MetricType::Gauge,
        )?;
        for row in &shared {
            for (state, n) in CIRCUIT_STATES {
                let mut labels = row.labels.clone();
                labels.push(("state", state.to_owned()));
                circuit
                    .encode_family(&labels)?
                    .encode_gauge(&i64::from(row.stats.circuit == n))?;
            }
        }
        let seconds = &self.0.seconds;
        seconds.encode(encoder.encode_descriptor(
            "store_call_duration_seconds",
            "Time of each call to a shared store (Redis), in seconds, measured on the monotonic clock",
            None,
            seconds.metric_type(),
        )?)
    }
}
