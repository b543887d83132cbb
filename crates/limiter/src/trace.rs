//! Trace capture: sampled requests as `tollgate replay`'s input lines
//! (`{"t_ms","policy","key","cost"}`; `{"t_ms","checks":[…]}` for a
//! request of several checks; `"refund": true` for a refund), handed to a
//! writer over a bounded
//! queue. A full queue drops the line and counts it: capture never slows
//! or blocks a decision. Keys are the keyed hash of the identity's
//! encoding, as the hot identity series name it, so a capture never holds
//! who was asking, and two identities are never one key.

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

    /// One request's counted checks, decided at `now_ms` (wall clock), if
    /// sampled: one `policy`/`key`/`cost` line for one check; for several,
    /// one `checks` line, so replay decides them together, all or nothing,
    /// as `serve` did.
    pub(crate) fn record(&self, now_ms: u64, checks: &[(&str, &Identity, u64)]) {
        let line = match checks {
            [] => return,
            [(policy, identity, cost)] => {
                let Some(key) = self.key(identity) else {
                    return;
                };
                serde_json::json!({"t_ms": now_ms, "policy": policy, "key": key, "cost": cost})
            }
            several => {
                let mut items = Vec::with_capacity(several.len());
                for (policy, identity, cost) in several {
                    let Some(key) = self.key(identity) else {
                        return;
                    };
                    items.push(serde_json::json!({"policy": policy, "key": key, "cost": cost}));
                }
                serde_json::json!({"t_ms": now_ms, "checks": items})
            }
        };
        self.send(line);
    }

    /// A refund of `cost` units at `now_ms`, if sampled: a `refund` line,
    /// so replay gives them back where `serve` did.
    pub(crate) fn record_refund(&self, now_ms: u64, policy: &str, identity: &Identity, cost: u64) {
        let Some(key) = self.key(identity) else {
            return;
        };
        self.send(serde_json::json!({
            "t_ms": now_ms,
            "policy": policy,
            "key": key,
            "cost": cost,
            "refund": true,
        }));
    }

    /// The keyed hash of the identity's encoding (the bytes its store key
    /// holds, so two budgets are two keys in the trace); `None` when not
    /// hashing (nothing is captured raw).
    fn key(&self, identity: &Identity) -> Option<String> {
        let HotSeries::Hashed(_) = &self.identity else {
            return None;
        };
        self.identity.label(identity)
    }

    /// Hands a sampled line to the writer, or counts it dropped.
    fn send(&self, line: serde_json::Value) {
        if !self.sampler.take() {
            return;
        }
        match self.lines.try_send(line.to_string()) {
            Ok(()) => {
                self.captured.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.dropped.inc();
            }
        }
    }
}
