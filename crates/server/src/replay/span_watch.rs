//! The most one identity was admitted in any span of a policy's own
//! length (its window, or its bucket's refill period), measured as the
//! trace is decided: what `compare` reports against the policy's bound
//! and a picture draws. Each identity keeps the admissions inside the
//! span that ends at its latest one, so memory is bounded by the
//! identities active within one span times what the bound lets them
//! admit; an identity idle for a span is forgotten.

use std::collections::{HashMap, VecDeque};

use tollgate_core::Identity;

use crate::explain::SpanBound;

/// The most identities followed at once; beyond, the worst span is no
/// longer told exactly, and the watch says so.
pub const MAX_WATCHED: usize = 1_000_000;
/// Admissions between sweeps of the identities idle past a span.
const SWEEP_EVERY: u64 = 65_536;

/// One policy's admissions per identity within its span.
#[derive(Debug)]
pub struct SpanWatch {
    /// How far back an admission still shares a span with the latest:
    /// the span less 1 ms for a window's, the whole span for a bucket's.
    reach_ms: u64,
    identities: HashMap<Vec<u8>, Recent>,
    worst: u64,
    seen: u64,
    /// Identities not followed because [`MAX_WATCHED`] were.
    pub overflowed: u64,
}

#[derive(Debug, Default)]
struct Recent {
    admitted: VecDeque<(u64, u64)>,
    units: u64,
}

impl SpanWatch {
    /// A watch over spans of `bound`'s length.
    pub fn new(bound: &SpanBound) -> Self {
        Self {
            reach_ms: if bound.both_ends {
                bound.span_ms
            } else {
                bound.span_ms.saturating_sub(1)
            },
            identities: HashMap::new(),
            worst: 0,
            seen: 0,
            overflowed: 0,
        }
    }

    /// Counts `cost` units admitted to `identity` at `t_ms`; returns the
    /// units that identity was admitted in the span ending then. A trace's
    /// times run forward: an admission dated before the identity's latest
    /// counts at the latest's time.
    pub fn admit(&mut self, identity: &Identity, t_ms: u64, cost: u64) -> u64 {
        self.seen += 1;
        if self.seen.is_multiple_of(SWEEP_EVERY) {
            self.sweep(t_ms);
        }
        let known = self.identities.contains_key(identity.as_bytes());
        if !known && self.identities.len() >= MAX_WATCHED {
            self.overflowed += 1;
            return 0;
        }
        let recent = match self.identities.get_mut(identity.as_bytes()) {
            Some(recent) => recent,
            None => self
                .identities
                .entry(identity.as_bytes().to_vec())
                .or_default(),
        };
        let t_ms = recent
            .admitted
            .back()
            .map_or(t_ms, |&(last, _)| last.max(t_ms));
        while let Some(&(first, units)) = recent.admitted.front() {
            if first.saturating_add(self.reach_ms) >= t_ms {
                break;
            }
            recent.admitted.pop_front();
            recent.units -= units;
        }
        if cost > 0 {
            recent.admitted.push_back((t_ms, cost));
            recent.units = recent.units.saturating_add(cost);
        }
        self.worst = self.worst.max(recent.units);
        recent.units
    }

    /// The most any identity was admitted in one span so far.
    pub fn worst(&self) -> u64 {
        self.worst
    }

    /// Forgets identities whose latest admission left the span by `now_ms`.
    fn sweep(&mut self, now_ms: u64) {
        let reach = self.reach_ms;
        self.identities.retain(|_, recent| {
            recent
                .admitted
                .back()
                .is_some_and(|&(last, _)| last.saturating_add(reach) >= now_ms)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(span_ms: u64) -> SpanBound {
        SpanBound {
            span_ms,
            both_ends: false,
            at_most: 0,
            per_window: 0,
        }
    }

    #[test]
    fn a_window_span_holds_its_start_not_its_end() {
        let mut watch = SpanWatch::new(&window(1000));
        let a = Identity::value("a");
        assert_eq!(watch.admit(&a, 0, 2), 2);
        assert_eq!(watch.admit(&a, 999, 3), 5);
        // 1000 ms after the first: [1, 1000] no longer holds t = 0.
        assert_eq!(watch.admit(&a, 1000, 1), 4);
        assert_eq!(watch.worst(), 5);
    }

    #[test]
    fn a_bucket_span_holds_both_ends_and_identities_apart() {
        let both = SpanBound {
            both_ends: true,
            ..window(1000)
        };
        let mut watch = SpanWatch::new(&both);
        let (a, b) = (Identity::value("a"), Identity::value("b"));
        assert_eq!(watch.admit(&a, 0, 1), 1);
        assert_eq!(watch.admit(&b, 500, 4), 4);
        assert_eq!(watch.admit(&a, 1000, 1), 2);
        assert_eq!(watch.admit(&a, 1001, 1), 2);
        assert_eq!(watch.worst(), 4);
    }
}
