//! Trace capture: sampled decisions as `tollgate replay`'s input lines
//! (`{"t_ms","policy","key","cost"}`), handed to a writer over a bounded
//! queue. A full queue drops the line and counts it: capture never slows
//! or blocks a decision. Keys are the identity's keyed hash, as the hot
//! identity series name it, so a capture never holds who was asking.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;

use prometheus_client::metrics::counter::Counter;
use tollgate_core::Identity;

use crate::metrics::HotSeries;
use crate::sampled_log::Sampler;

/// Where captured lines go: the writer's queue, with its drop count.
pub struct TraceSink {
    lines: SyncSender<String>,
    dropped: Counter,
    sampler: Sampler,
    identity: HotSeries,
    captured: AtomicU64,
}

impl TraceSink {
    /// Captures `percent` of decisions into `lines` (a bounded queue),
    /// counting in `dropped` what a full queue turned away. `identity` must
    /// hash ([`HotSeries::Hashed`]); any other naming captures nothing.
    pub fn new(
        lines: SyncSender<String>,
        dropped: Counter,
        percent: f64,
        identity: HotSeries,
    ) -> Self {
        let sampler = Sampler::default();
        sampler.set_percent(percent);
        Self {
            lines,
            dropped,
            sampler,
            identity,
            captured: AtomicU64::new(0),
        }
    }

    /// Lines handed to the writer so far.
    pub fn captured(&self) -> u64 {
        self.captured.load(Ordering::Relaxed)
    }

    /// One decision at `now_ms` (wall clock), if sampled.
    pub(crate) fn record(&self, now_ms: u64, policy: &str, identity: &Identity, cost: u64) {
        if !self.sampler.take() {
            return;
        }
        let HotSeries::Hashed(_) = &self.identity else {
            return;
        };
        let Some(key) = self.identity.label(&identity.to_string()) else {
            return;
        };
        let line = serde_json::json!({
            "t_ms": now_ms,
            "policy": policy,
            "key": key,
            "cost": cost,
        })
        .to_string();
        match self.lines.try_send(line) {
            Ok(()) => {
                self.captured.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.dropped.inc();
            }
        }
    }
}
