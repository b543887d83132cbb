//! Permits as this process sees them, for the metrics: each admitted
//! acquire it decided (its store's or its `local` failure mode's), until
//! a release through this process frees it or its lease ends on this
//! process's monotonic clock. With Redis shared by several processes,
//! or a release reaching another server (`/v1/release` behind a load
//! balancer), a permit freed elsewhere stays "in use" here until its
//! lease ends, and is then counted expired: the gauge is this process's
//! upper bound on the permits its own acquires hold, never the store's
//! count. Bounded: at most [`MAX_TRACKED`] permits a policy are followed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tollgate_core::{Clock, PermitId, Policy};

/// A concurrency policy, for its permit series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    policy: String,
}

/// The most permits a policy's gauge follows at once; an acquire beyond
/// it is counted, not followed (its release is counted all the same).
pub const MAX_TRACKED: usize = 100_000;

/// One policy's permits in this process's view.
#[derive(Debug)]
struct Held {
    /// Each followed permit and when its lease ends (monotonic ms).
    until: Mutex<HashMap<PermitId, u64>>,
    acquired: Counter,
    released: Counter,
    /// Written by the scrape itself (which drops ended leases before it
    /// reads), so not a registered family: its series would be read first.
    expired: AtomicU64,
}

impl Held {
    /// Drops the permits whose lease ended by `now`, counting them expired.
    fn drop_ended(&self, until: &mut HashMap<PermitId, u64>, now: u64) {
        let before = until.len();
        until.retain(|_, end| *end > now);
        self.expired
            .fetch_add((before - until.len()) as u64, Ordering::Relaxed);
    }

    /// Permits in use and expired so far, as of `now`.
    fn read(&self, now: u64) -> (usize, u64) {
        let mut until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        self.drop_ended(&mut until, now);
        (until.len(), self.expired.load(Ordering::Relaxed))
    }
}

/// The permit series of every concurrency policy: acquired, released and
/// expired counters, and the in-use gauge read at each scrape.
pub struct PermitSeries {
    by_policy: Mutex<HashMap<String, Arc<Held>>>,
    acquired: Family<PolicyLabels, Counter>,
    released: Family<PolicyLabels, Counter>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for PermitSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PermitSeries")
    }
}

impl PermitSeries {
    /// Registers the series in `registry`; `clock`'s monotonic time runs
    /// the leases followed.
    pub(crate) fn register(registry: &mut Registry, clock: Arc<dyn Clock>) -> Arc<Self> {
        let family = |registry: &mut Registry, name: &str, help: &str| {
            let family = Family::<PolicyLabels, Counter>::default();
            registry.register(name, help, family.clone());
            family
        };
        let series = Arc::new(Self {
            by_policy: Mutex::new(HashMap::new()),
            acquired: family(
                registry,
                "permits_acquired",
                "Permits of concurrency policies this process's decisions handed out (a retry answered from its request id's record is not another)",
            ),
            released: family(
                registry,
                "permits_released",
                "Releases through this process that freed a held permit",
            ),
            clock,
        });
        registry.register_collector(Box::new(InUse(Arc::clone(&series))));
        series
    }

    fn held(&self, policy: &str) -> Arc<Held> {
        let mut by_policy = self
            .by_policy
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = by_policy.get(policy) {
            return Arc::clone(held);
        }
        let labels = PolicyLabels {
            policy: policy.to_owned(),
        };
        let held = Arc::new(Held {
            until: Mutex::new(HashMap::new()),
            acquired: self.acquired.get_or_create(&labels).clone(),
            released: self.released.get_or_create(&labels).clone(),
            expired: AtomicU64::new(0),
        });
        by_policy.insert(policy.to_owned(), Arc::clone(&held));
        held
    }

    /// `permit` handed out under `policy` now.
    pub(crate) fn acquired(&self, policy: &Policy, permit: PermitId) {
        let Some(permits) = policy.limits().permits() else {
            return;
        };
        let held = self.held(policy.name());
        held.acquired.inc();
        let now = self.clock.monotonic_ms();
        let mut until = held.until.lock().unwrap_or_else(PoisonError::into_inner);
        if until.len() >= MAX_TRACKED {
            held.drop_ended(&mut until, now);
        }
        if until.len() < MAX_TRACKED {
            until.insert(permit, now.saturating_add(permits.lease_ms()));
        }
    }

    /// A release of `permit` under `policy` answered: `freed` when it was
    /// held. A permit whose lease had ended here first is counted expired.
    pub(crate) fn released(&self, policy: &Policy, permit: PermitId, freed: bool) {
        let held = self.held(policy.name());
        if freed {
            held.released.inc();
        }
        let now = self.clock.monotonic_ms();
        let mut until = held.until.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(end) = until.remove(&permit)
            && end <= now
        {
            held.expired.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `permits_in_use{policy}` and `permits_expired_total{policy}` at each
/// scrape, ended leases dropped first.
#[derive(Debug)]
struct InUse(Arc<PermitSeries>);

impl Collector for InUse {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let held: Vec<(String, Arc<Held>)> = self
            .0
            .by_policy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(policy, held)| (policy.clone(), Arc::clone(held)))
            .collect();
        if held.is_empty() {
            return Ok(());
        }
        let now = self.0.clock.monotonic_ms();
        let read: Vec<(PolicyLabels, (usize, u64))> = held
            .into_iter()
            .map(|(policy, held)| (PolicyLabels { policy }, held.read(now)))
            .collect();
        let mut metric = encoder.encode_descriptor(
            "permits_in_use",
            "Permits this process handed out, not released through it, whose lease has not ended on its clock: with several processes on one store, an upper bound on those its own acquires hold, not the store's count",
            None,
            MetricType::Gauge,
        )?;
        for (labels, (in_use, _)) in &read {
            let in_use = i64::try_from(*in_use).unwrap_or(i64::MAX);
            metric.encode_family(labels)?.encode_gauge(&in_use)?;
        }
        let mut metric = encoder.encode_descriptor(
            "permits_expired",
            "Permits this process handed out that it saw no release of before their lease ended (a holder that died or outlived its lease, or a release made through another process)",
            None,
            MetricType::Counter,
        )?;
        for (labels, (_, expired)) in &read {
            metric
                .encode_family(labels)?
                .encode_counter::<NoLabelSet, _, u64>(expired, None)?;
        }
        Ok(())
    }
}
