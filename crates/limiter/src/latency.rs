//! A latency histogram observed without a lock, in whole microseconds.
//!
//! prometheus-client's `Histogram` takes a mutex on every observation and
//! adds the value to an `f64` sum; a latency is observed on every decision
//! (and every HTTP request), so that lock sat on the hottest path. Here an
//! observation is two relaxed atomic additions: its bucket's count and the
//! sum in microseconds. The total count is the sum of the buckets, read
//! at scrape time; a scrape racing an observation may see one without the
//! other, which the next scrape settles (Prometheus reads rates, not
//! instants). The exposition is a classic histogram, the same series and
//! `le` labels as prometheus-client writes for these bounds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Latencies in buckets of whole microseconds, exposed in seconds.
/// Clones share their counts (as prometheus-client's metrics do), so one
/// can be registered and another observed.
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    inner: Arc<Counts>,
}

#[derive(Debug)]
struct Counts {
    /// Each bucket's upper bound in µs, ascending; the last bucket (+Inf)
    /// has none.
    bounds_us: Box<[u64]>,
    /// One count a bound, and one for +Inf.
    buckets: Box<[AtomicU64]>,
    sum_us: AtomicU64,
}

impl LatencyHistogram {
    /// `count` buckets from `first_us` µs up, each bound `factor` times the
    /// one before (prometheus-client's `exponential_buckets`, in µs), and
    /// +Inf. Bounds are whole microseconds, rounded to the nearest.
    pub fn exponential(first_us: u64, factor: u64, count: u16) -> Self {
        let bounds_us: Box<[u64]> = std::iter::successors(Some(first_us), |b| {
            b.checked_mul(factor).filter(|next| next > b)
        })
        .take(usize::from(count))
        .collect();
        let buckets = (0..=bounds_us.len()).map(|_| AtomicU64::new(0)).collect();
        Self {
            inner: Arc::new(Counts {
                bounds_us,
                buckets,
                sum_us: AtomicU64::new(0),
            }),
        }
    }

    /// One latency of `us` microseconds: in the first bucket whose bound
    /// is at or above it (+Inf beyond the last).
    pub fn observe_us(&self, us: u64) {
        let counts = &*self.inner;
        let at = counts
            .bounds_us
            .iter()
            .position(|&bound| us <= bound)
            .unwrap_or(counts.bounds_us.len());
        if let Some(bucket) = counts.buckets.get(at) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        counts.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Latencies observed, all buckets.
    pub fn count(&self) -> u64 {
        self.inner
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .sum()
    }

    /// Each bucket's upper bound in seconds (+Inf last) and its own count
    /// (not cumulative), as prometheus-client's encoder takes them.
    fn snapshot(&self) -> Vec<(f64, u64)> {
        let counts = &*self.inner;
        let bounds = counts
            .bounds_us
            .iter()
            .map(|&us| us as f64 / 1_000_000.0)
            .chain(std::iter::once(f64::INFINITY));
        bounds
            .zip(counts.buckets.iter())
            .map(|(bound, n)| (bound, n.load(Ordering::Relaxed)))
            .collect()
    }
}

impl TypedMetric for LatencyHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let buckets = self.snapshot();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = self.inner.sum_us.load(Ordering::Relaxed) as f64 / 1_000_000.0;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
    use prometheus_client::registry::Registry;

    use super::*;

    fn exposition(register: impl FnOnce(&mut Registry)) -> String {
        let mut registry = Registry::default();
        register(&mut registry);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap_or_else(|e| panic!("encode: {e}"));
        text
    }

    /// The same observations give the same exposition as
    /// prometheus-client's own histogram over the same bounds: bucket by
    /// bucket, on a bound and either side of it, and beyond the last.
    #[test]
    fn exposes_what_prometheus_clients_histogram_exposes() {
        let observed = [
            0, 1, 9, 10, 11, 20, 21, 640, 5_242_880, 5_242_881, 60_000_000,
        ];
        let ours = LatencyHistogram::exponential(10, 2, 20);
        let theirs = Histogram::new(exponential_buckets(0.000_01, 2.0, 20));
        for us in observed {
            ours.observe_us(us);
            theirs.observe(us as f64 / 1_000_000.0);
        }
        let ours = exposition(|r| r.register("took", "t", ours.clone()));
        let theirs = exposition(|r| r.register("took", "t", theirs.clone()));
        let sum_line = |text: &str| {
            text.lines()
                .find(|l| l.starts_with("took_sum"))
                .map(str::to_owned)
        };
        // The sums differ only in f64 rounding: ours adds whole µs.
        assert_eq!(sum_line(&ours).as_deref(), Some("took_sum 70.486473"));
        let rest = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|l| !l.starts_with("took_sum"))
                .map(str::to_owned)
                .collect()
        };
        assert_eq!(rest(&ours), rest(&theirs));
        assert!(ours.contains("took_bucket{le=\"0.00001\"} 4\n"), "{ours}");
        assert!(ours.contains("took_bucket{le=\"+Inf\"} 11\n"), "{ours}");
        assert!(ours.contains("took_count 11\n"), "{ours}");
    }

    #[test]
    fn clones_share_their_counts_and_bounds_stop_short_of_overflow() {
        let histogram = LatencyHistogram::exponential(1 << 60, 4, 5);
        let clone = histogram.clone();
        clone.observe_us(u64::MAX);
        histogram.observe_us(1);
        assert_eq!(histogram.count(), 2);
        assert_eq!(histogram.inner.bounds_us.as_ref(), &[1 << 60, 1 << 62]);
    }
}
