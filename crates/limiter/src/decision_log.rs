//! Rejections and degraded decisions at debug level, so an operator can see
//! who is being limited without a line per request: one line per policy per
//! [`LOG_INTERVAL_MS`] of the limiter's clock, saying how many more there
//! were since the last. Identities print as every log names them (the
//! keyed hash of their encoding, as the hot identity series do; see
//! `SampledLog::name`), never raw: an identity holds client addresses and
//! tenant names, and a client's bytes would forge the line.

use std::collections::HashMap;
use std::sync::Mutex;

/// The one interval every rate-limited log line of the limiter keeps.
pub const LOG_INTERVAL_MS: u64 = 10_000;

/// Per policy: when its last line was written, and how many were held
/// back since.
#[derive(Default)]
pub struct DecisionLog {
    policies: Mutex<HashMap<String, Window>>,
}

#[derive(Clone, Copy)]
struct Window {
    logged_at_ms: u64,
    held_back: u64,
}

impl DecisionLog {
    /// A request `policy` rejected for the identity `named` names, at the
    /// limiter's clock (named only when a line is written).
    pub fn rejected(&self, policy: &str, named: impl FnOnce() -> String, now_ms: u64) {
        if let Some(held_back) = self.due(policy, now_ms) {
            let identity = named();
            tracing::debug!(
                policy,
                identity,
                held_back,
                "rejected (one line per policy every {} s; held_back: rejections and degraded decisions not logged since)",
                LOG_INTERVAL_MS / 1000
            );
        }
    }

    /// A decision for `policy` made without its shared store, `by` saying
    /// how (`fail_open`, `fail_closed`, `local`), admitted or not.
    pub fn degraded(
        &self,
        policy: &str,
        named: impl FnOnce() -> String,
        by: &str,
        allowed: bool,
        now_ms: u64,
    ) {
        if let Some(held_back) = self.due(policy, now_ms) {
            let identity = named();
            tracing::debug!(
                policy,
                identity,
                by,
                allowed,
                held_back,
                "decided without the shared store (one line per policy every {} s)",
                LOG_INTERVAL_MS / 1000
            );
        }
    }

    /// `Some(lines held back since the last)` when `policy` may log now;
    /// otherwise counts one more held back.
    fn due(&self, policy: &str, now_ms: u64) -> Option<u64> {
        // Nothing is logged below debug: skip the lock and the map.
        if !tracing::enabled!(tracing::Level::DEBUG) {
            return None;
        }
        self.due_at(policy, now_ms)
    }

    fn due_at(&self, policy: &str, now_ms: u64) -> Option<u64> {
        let Ok(mut policies) = self.policies.lock() else {
            return None;
        };
        match policies.get_mut(policy) {
            Some(window) if now_ms.saturating_sub(window.logged_at_ms) < LOG_INTERVAL_MS => {
                window.held_back += 1;
                None
            }
            Some(window) => {
                let held_back = window.held_back;
                *window = Window {
                    logged_at_ms: now_ms,
                    held_back: 0,
                };
                Some(held_back)
            }
            None => {
                policies.insert(
                    policy.to_owned(),
                    Window {
                        logged_at_ms: now_ms,
                        held_back: 0,
                    },
                );
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests;
