//! What this process remembers of the remote tollgate's rejections: a
//! policy and identity rejected for a cost stays rejected for that cost or
//! more until its retry time (nothing else arriving can bring it sooner),
//! so asking again before then is a round trip whose answer is known.
//! Bounded; dated by the injected clock's wall time.

use std::collections::HashMap;
use std::sync::Mutex;

use tollgate_core::{Decision, Identity};

/// One rejection: until when, for what cost, and its figures.
#[derive(Clone, Copy)]
struct Until {
    until_ms: u64,
    at_ms: u64,
    cost: u64,
    decision: Decision,
}

/// Rejections by policy name and identity, at most `max` of them.
pub(crate) struct RejectedUntil {
    entries: Mutex<HashMap<(String, Identity), Until, foldhash::fast::RandomState>>,
    max: usize,
}

impl RejectedUntil {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            entries: Mutex::new(HashMap::default()),
            max,
        }
    }

    /// The rejection `policy` gave `identity` for `cost` or less, as it
    /// stands at `now_ms`, while it still holds.
    pub(crate) fn get(
        &self,
        policy: &str,
        identity: &Identity,
        cost: u64,
        now_ms: u64,
    ) -> Option<Decision> {
        if self.max == 0 {
            return None;
        }
        let entries = self.entries.lock().ok()?;
        // A borrowed key would need a second map type; the lookup owns one.
        let until = entries.get(&(policy.to_owned(), identity.clone()))?;
        if now_ms >= until.until_ms || cost < until.cost {
            return None;
        }
        let waited = now_ms.saturating_sub(until.at_ms);
        Some(Decision {
            retry_after_ms: Some(until.until_ms - now_ms),
            reset_after_ms: until.decision.reset_after_ms.saturating_sub(waited),
            ..until.decision
        })
    }

    /// Remembers `decision` when it is a rejection with a retry time, and
    /// forgets an admission's earlier rejection. When full, expired entries
    /// go first; if none has, the new one is not kept.
    pub(crate) fn note(
        &self,
        policy: &str,
        identity: &Identity,
        cost: u64,
        decision: &Decision,
        now_ms: u64,
    ) {
        if self.max == 0 {
            return;
        }
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        let key = (policy.to_owned(), identity.clone());
        let retry_ms = match decision.retry_after_ms {
            Some(ms) if !decision.allowed && ms > 0 => ms,
            _ => {
                entries.remove(&key);
                return;
            }
        };
        if entries.len() >= self.max && !entries.contains_key(&key) {
            entries.retain(|_, u| u.until_ms > now_ms);
            if entries.len() >= self.max {
                return;
            }
        }
        entries.insert(
            key,
            Until {
                until_ms: now_ms.saturating_add(retry_ms),
                at_ms: now_ms,
                cost,
                decision: *decision,
            },
        );
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.lock().map_or(0, |e| e.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(retry_ms: u64) -> Decision {
        Decision {
            allowed: false,
            limit: 5,
            remaining: 0,
            retry_after_ms: Some(retry_ms),
            reset_after_ms: 4_000,
            permit: None,
        }
    }

    #[test]
    fn a_rejection_holds_until_its_retry_time_for_its_cost_or_more() {
        let cache = RejectedUntil::new(10);
        let acme = Identity::value("acme");
        cache.note("p", &acme, 2, &rejected(800), 1_000);
        let held = cache.get("p", &acme, 2, 1_300).expect("test value");
        assert_eq!(held.retry_after_ms, Some(500));
        assert_eq!(held.reset_after_ms, 3_700);
        assert!(cache.get("p", &acme, 3, 1_300).is_some());
        assert!(cache.get("p", &acme, 1, 1_300).is_none());
        assert!(cache.get("q", &acme, 2, 1_300).is_none());
        assert!(cache.get("p", &acme, 2, 1_800).is_none());
    }

    #[test]
    fn an_admission_forgets_the_rejection_and_the_cache_stays_bounded() {
        let cache = RejectedUntil::new(2);
        let (a, b, c) = (
            Identity::value("a"),
            Identity::value("b"),
            Identity::value("c"),
        );
        cache.note("p", &a, 1, &rejected(100), 0);
        cache.note("p", &b, 1, &rejected(500), 0);
        cache.note("p", &c, 1, &rejected(500), 50);
        assert_eq!(cache.len(), 2);
        assert!(cache.get("p", &c, 1, 50).is_none());
        // a expired at 100: room for c.
        cache.note("p", &c, 1, &rejected(500), 150);
        assert!(cache.get("p", &c, 1, 150).is_some());
        let admitted = Decision {
            allowed: true,
            retry_after_ms: Some(0),
            ..rejected(0)
        };
        cache.note("p", &c, 1, &admitted, 200);
        assert!(cache.get("p", &c, 1, 200).is_none());
    }
}
