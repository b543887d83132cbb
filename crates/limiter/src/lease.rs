//! A `leased` policy on this instance: the share it may spend now, and the
//! demand it reports when it renews (docs/config.md, Leased shares).
//!
//! The ledger (crates/store/lua/lease.lua, in the global Redis) decides
//! grants on Redis's clock; this side only keeps the durations: a grant is
//! spent from when the renewal was *sent* until a term later, on this
//! instance's monotonic clock, so however Redis's clock and ours disagree,
//! this instance stops before the ledger frees what it granted. A renewal
//! that fails leaves the last grant to run out; then the floor alone is
//! spent. Pure apart from the metrics: time comes in as arguments, every
//! one of them read off the monotonic clock ([`tollgate_core::Clock::monotonic_ms`]),
//! never the wall clock, which an operator or NTP may step.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use tollgate_core::{Policy, split_policy};
use tollgate_store::{LeaseAsk, LeaseGrant, LeaseLimit, StoreError};

use crate::metrics::{LeaseCounters, LimiterMetrics};

/// A `leased` policy's terms (docs/config.md, Leased shares): every region
/// owns a floor; the rest, the spare, is leased by demand from the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leased {
    /// How long a grant may be spent, from when the region asked for it.
    pub term_ms: u64,
    /// How often each instance renews (and reports its demand).
    pub renew_ms: u64,
    /// How long units a region lets go rest before another region may
    /// lease them: the policy's time to forget a use.
    pub rest_ms: u64,
    /// The floors' sum as a percentage of the limit.
    pub floor_percent: u64,
    /// Each region's floor in the policy's units, in `regions:` order.
    pub floors: Vec<(String, u64)>,
    /// The limit minus every floor: what the ledger leases.
    pub spare: u64,
}

impl Leased {
    /// A region's floor.
    pub fn floor_of(&self, region: &str) -> u64 {
        self.floors
            .iter()
            .find(|(r, _)| r == region)
            .map_or(0, |(_, f)| *f)
    }
}

/// This process among its region's instances in a ledger: random, made
/// once per process (a restarted instance is a new one; the ledger forgets
/// the old one's demand after a term).
pub fn instance_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        format!("{:016x}", hasher.finish())
    })
}

/// What this instance may spend until when.
struct Held {
    /// The floor plus the grant.
    units: u64,
    /// On the monotonic clock: the renewal's send time plus the term.
    until_ms: u64,
    policy: Arc<Policy>,
}

/// One leased policy's share on this instance.
pub struct Lease {
    declared: Policy,
    terms: Leased,
    region: String,
    floor: u64,
    floor_policy: Arc<Policy>,
    held: ArcSwap<Held>,
    /// Units asked for since the last renewal (admitted or not).
    demand: AtomicU64,
    /// When the last renewal was sent, and when the next is due.
    last_sent_ms: AtomicU64,
    next_due_ms: AtomicU64,
    counters: LeaseCounters,
}

impl Lease {
    /// A lease holding only the floor until its first renewal (due at once).
    pub fn new(declared: &Policy, terms: &Leased, region: &str, metrics: &LimiterMetrics) -> Self {
        let floor = terms.floor_of(region);
        let floor_policy = Arc::new(share_of(declared, floor).unwrap_or_else(|| declared.clone()));
        let counters = metrics.lease_counters(declared.name(), region);
        counters.share.set(gauge(floor));
        Self {
            declared: declared.clone(),
            terms: terms.clone(),
            region: region.to_owned(),
            floor,
            held: ArcSwap::from_pointee(Held {
                units: floor,
                until_ms: 0,
                policy: Arc::clone(&floor_policy),
            }),
            floor_policy,
            demand: AtomicU64::new(0),
            last_sent_ms: AtomicU64::new(0),
            next_due_ms: AtomicU64::new(0),
            counters,
        }
    }

    /// Whether this lease serves `declared` under `terms` in `region`
    /// (a reload that changed none of them keeps the lease it holds).
    pub fn serves(&self, declared: &Policy, terms: &Leased, region: &str) -> bool {
        self.declared == *declared && self.terms == *terms && self.region == region
    }

    /// The policy to enforce at `now_ms`: the floor plus the grant while
    /// it runs, the floor alone after.
    pub fn share(&self, now_ms: u64) -> Arc<Policy> {
        let held = self.held.load();
        if now_ms < held.until_ms {
            Arc::clone(&held.policy)
        } else {
            Arc::clone(&self.floor_policy)
        }
    }

    /// Units of the limit this instance may spend at `now_ms`.
    pub fn units(&self, now_ms: u64) -> u64 {
        let held = self.held.load();
        if now_ms < held.until_ms {
            held.units
        } else {
            self.floor
        }
    }

    /// Counts `cost` units asked for, admitted or not: the demand the next
    /// renewal reports.
    pub fn record_demand(&self, cost: u64) {
        self.demand.fetch_add(cost, Ordering::Relaxed);
    }

    /// Whether a renewal is due at `now_ms`, and when the next one is.
    pub fn due(&self, now_ms: u64) -> bool {
        now_ms >= self.next_due_ms.load(Ordering::Relaxed)
    }

    /// When the next renewal is due, on the monotonic clock.
    pub fn next_due_ms(&self) -> u64 {
        self.next_due_ms.load(Ordering::Relaxed)
    }

    /// Marks the renewal due at `now_ms` as under way: the next is due a
    /// renewal period later.
    pub fn schedule(&self, now_ms: u64) {
        self.next_due_ms.store(
            now_ms.saturating_add(self.terms.renew_ms),
            Ordering::Relaxed,
        );
    }

    /// Starts a renewal sent at `sent_ms`: takes the demand seen since the
    /// last one (per renewal period, so instances that renewed late or
    /// early compare fairly) and schedules the next.
    pub fn begin(&self, sent_ms: u64) -> LeaseAsk<'_> {
        let seen = self.demand.swap(0, Ordering::Relaxed);
        let last = self.last_sent_ms.swap(sent_ms, Ordering::Relaxed);
        let elapsed = sent_ms.saturating_sub(last).max(1);
        let demand = if last == 0 {
            seen
        } else {
            u64::try_from(u128::from(seen) * u128::from(self.terms.renew_ms) / u128::from(elapsed))
                .unwrap_or(u64::MAX / 2)
        };
        self.counters.demand.set(gauge(demand));
        self.schedule(sent_ms);
        LeaseAsk {
            policy: self.declared.name(),
            region: &self.region,
            instance: instance_id(),
            demand,
            spare: self.terms.spare,
            term_ms: self.terms.term_ms,
            rest_ms: self.terms.rest_ms,
        }
    }

    /// What the ledger answered a renewal sent at `sent_ms`, seen at
    /// `now_ms`: a grant replaces what is held, to be spent until a term
    /// after the send; a failure leaves what is held to run out.
    pub fn settle(&self, sent_ms: u64, now_ms: u64, answer: &Result<LeaseGrant, StoreError>) {
        let held_before = self.held.load();
        let live_before = now_ms < held_before.until_ms && held_before.units > self.floor;
        match answer {
            Ok(grant) => {
                let units = self
                    .floor
                    .saturating_add(grant.units)
                    .min(self.declared.limits().limit());
                let outcome = match (grant.units, live_before) {
                    (0, _) => match grant.limit {
                        LeaseLimit::NewLedger => "new_ledger",
                        _ => "floor",
                    },
                    (_, false) => "granted",
                    (_, true) => "renewed",
                };
                self.counters.outcome(outcome).inc();
                self.counters.unleased.set(gauge(grant.unleased));
                if grant.limit == LeaseLimit::HeldByOthers {
                    self.counters.outcome("held_by_others").inc();
                }
                let policy = if units == held_before.units {
                    Arc::clone(&held_before.policy)
                } else {
                    // Load checked every share can be made; were one not,
                    // the floor is what is safe to spend.
                    share_of(&self.declared, units)
                        .map_or_else(|| Arc::clone(&self.floor_policy), Arc::new)
                };
                self.held.store(Arc::new(Held {
                    units,
                    until_ms: sent_ms.saturating_add(self.terms.term_ms),
                    policy,
                }));
            }
            Err(_) => {
                self.counters.outcome("refused").inc();
                if held_before.units > self.floor && now_ms >= held_before.until_ms {
                    // Ran out unrenewed: back to the floor, counted once.
                    self.counters.outcome("expired").inc();
                    self.held.store(Arc::new(Held {
                        units: self.floor,
                        until_ms: 0,
                        policy: Arc::clone(&self.floor_policy),
                    }));
                }
            }
        }
        let units = self.units(now_ms);
        self.counters.share.set(gauge(units));
        if units <= self.floor {
            self.counters
                .floor_seconds
                .inc_by(self.terms.renew_ms as f64 / 1000.0);
        }
    }
}

/// `declared` scaled to `units` of its limit (capacity and refill alike);
/// `None` for 0 units (load refuses a floor of 0) or a scale that does not
/// fit (load refuses those too).
pub fn share_of(declared: &Policy, units: u64) -> Option<Policy> {
    let limit = declared.limits().limit();
    if units >= limit {
        return Some(declared.clone());
    }
    split_policy(declared, &[units, limit - units], 0)
}

fn gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
