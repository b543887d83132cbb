//! A `leased` policy on this instance: the share each identity may spend
//! now, and the demand it reports when it renews (docs/config.md, Leased
//! shares).
//!
//! Every identity has its region's floor, spent with no ledger call. An
//! identity the floor turned away gets an entry here (at most
//! [`Leased::max_identities`]) and renews its own grant with the others in
//! one batched call a renewal period; an entry whose demand fits its floor
//! again is dropped once its grant has run out, so identities within their
//! floor cost the ledger nothing. Slots go by demand, not by arrival: past
//! the bound an identity is a challenger (lease/challengers.rs), and at a
//! renewal a challenger that asked for more than [`DISPLACE_RATIO`] times
//! what the least demanding holder asked takes its slot. The holder stops
//! spending its grant here at once, and the ledger frees it a term plus a
//! rest after granting it, as for any grant left to run out. The ledger (crates/store/lua/lease.lua, in the global Redis)
//! decides grants on Redis's clock; this side only keeps the durations: a
//! grant is spent from when the renewal was *sent* until a term later, on
//! this instance's monotonic clock, so however Redis's clock and ours
//! disagree, this instance stops before the ledger frees what it granted.
//! A renewal that fails leaves the last grant to run out; then the floor
//! alone is spent. Pure apart from the metrics: time comes in as
//! arguments, every one of them read off the monotonic clock
//! ([`tollgate_core::Clock::monotonic_ms`]), never the wall clock.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use arc_swap::ArcSwap;
use tollgate_core::{Identity, Policy, split_policy};
use tollgate_store::{LeaseAsk, LeaseGrant, LeaseLimit, LeaseWant, StoreError};

use crate::metrics::{LeaseCounters, LimiterMetrics};

mod challengers;
use challengers::Challengers;

/// Leased identities per policy on one instance when config names none.
pub const DEFAULT_MAX_IDENTITIES: usize = 1_000;

/// A challenger takes a holder's slot only when its demand over the last
/// renewal period is more than this many times the holder's: two tenants
/// of like demand never trade a slot back and forth (the holder keeps it),
/// and after a displacement the loser needs this many times the winner's
/// demand (so this squared times its own) to win the slot back.
pub const DISPLACE_RATIO: u64 = 2;

/// A `leased` policy's terms (docs/config.md, Leased shares): every region
/// owns a floor of each identity's limit; the rest, the spare, is leased
/// by each identity's demand from the ledger.
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
    /// Identities this instance leases for at once; beyond them an
    /// identity spends its floor (the table and the renewals stay bounded).
    pub max_identities: usize,
}

impl Leased {
    /// A region's floor.
    pub fn floor_of(&self, region: &str) -> u64 {
        self.floors
            .iter()
            .find(|(r, _)| r == region)
            .map_or(0, |(_, f)| *f)
    }

    /// Whether `seen` units over `elapsed_ms` fit in `floor` (which gives
    /// `floor` units per rest, the policy's time to forget a use), compared
    /// without dividing: a rate rounded down to the floor would drop an
    /// identity just over it from its renewals every other period.
    fn seen_fits(&self, seen: u64, elapsed_ms: u64, floor: u64) -> bool {
        u128::from(seen) * u128::from(self.rest_ms) <= u128::from(floor) * u128::from(elapsed_ms)
    }

    /// `seen` units over `elapsed_ms` as units a renewal period, rounded
    /// up so that a demand over the floor is reported as over it.
    fn per_renewal(&self, seen: u64, elapsed_ms: u64) -> u64 {
        let elapsed = u128::from(elapsed_ms.max(1));
        let scaled = u128::from(seen) * u128::from(self.renew_ms);
        u64::try_from(scaled.div_ceil(elapsed)).unwrap_or(u64::MAX / 2)
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

/// What one identity may spend until when.
struct Held {
    /// The floor plus the grant.
    units: u64,
    /// On the monotonic clock: the renewal's send time plus the term.
    until_ms: u64,
    policy: Arc<Policy>,
}

/// One leased identity on this instance.
struct Entry {
    held: ArcSwap<Held>,
    /// Units asked for since the last renewal (admitted or not).
    demand: AtomicU64,
    /// When its last renewal was sent (0: never).
    last_sent_ms: AtomicU64,
}

/// One identity a renewal carries, and the demand it reports.
pub struct Wanting {
    /// The identity.
    pub identity: Identity,
    /// Units asked for per renewal period.
    pub demand: u64,
    entry: Arc<Entry>,
}

/// One leased policy's shares on this instance, one entry an identity
/// that needs more than its floor.
pub struct Lease {
    declared: Policy,
    terms: Leased,
    region: String,
    floor: u64,
    floor_policy: Arc<Policy>,
    entries: RwLock<HashMap<Identity, Arc<Entry>>>,
    /// Identities over their floor that found the table full.
    challengers: Challengers,
    /// When the last renewal was sent (0: never).
    last_begin_ms: AtomicU64,
    /// When the next renewal is due.
    next_due_ms: AtomicU64,
    counters: LeaseCounters,
}

impl Lease {
    /// A lease holding only floors until an identity needs more.
    pub fn new(declared: &Policy, terms: &Leased, region: &str, metrics: &LimiterMetrics) -> Self {
        let floor = terms.floor_of(region);
        let floor_policy = Arc::new(share_of(declared, floor).unwrap_or_else(|| declared.clone()));
        let counters = metrics.lease_counters(declared.name(), region);
        counters.share.set(gauge(floor));
        counters.identities.set(0);
        Self {
            declared: declared.clone(),
            terms: terms.clone(),
            region: region.to_owned(),
            floor,
            floor_policy,
            entries: RwLock::new(HashMap::new()),
            challengers: Challengers::default(),
            last_begin_ms: AtomicU64::new(0),
            next_due_ms: AtomicU64::new(0),
            counters,
        }
    }

    /// Whether this lease serves `declared` under `terms` in `region`
    /// (a reload that changed none of them keeps the lease it holds).
    pub fn serves(&self, declared: &Policy, terms: &Leased, region: &str) -> bool {
        self.declared == *declared && self.terms == *terms && self.region == region
    }

    /// The policy to enforce for `identity` at `now_ms`, counting `cost`
    /// as its demand: the floor plus its grant while that runs, the floor
    /// alone after (and for an identity with no entry).
    pub fn share(&self, identity: &Identity, cost: u64, now_ms: u64) -> Arc<Policy> {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        let Some(entry) = entries.get(identity) else {
            self.challengers.count(identity, cost);
            return Arc::clone(&self.floor_policy);
        };
        entry.demand.fetch_add(cost, Ordering::Relaxed);
        let held = entry.held.load();
        if now_ms < held.until_ms {
            Arc::clone(&held.policy)
        } else {
            Arc::clone(&self.floor_policy)
        }
    }

    /// The share `identity` is decided under here at `now_ms`, as
    /// [`Lease::share`] without counting demand (a refund is none).
    pub fn policy_now(&self, identity: &Identity, now_ms: u64) -> Arc<Policy> {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        match entries.get(identity).map(|entry| entry.held.load()) {
            Some(held) if now_ms < held.until_ms => Arc::clone(&held.policy),
            _ => Arc::clone(&self.floor_policy),
        }
    }

    /// Units of the limit `identity` may spend here at `now_ms`.
    pub fn units(&self, identity: &Identity, now_ms: u64) -> u64 {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        entries.get(identity).map_or(self.floor, |entry| {
            let held = entry.held.load();
            if now_ms < held.until_ms {
                held.units
            } else {
                self.floor
            }
        })
    }

    /// `identity` was turned away asking `cost` units: it gets an entry,
    /// so the next renewal asks for its own spare, unless the table is
    /// full (then it spends its floor, counted, and challenges for a slot
    /// at the next renewal).
    pub fn rejected(&self, identity: &Identity, cost: u64) {
        let known = self
            .entries
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(identity);
        if known || cost == 0 {
            return;
        }
        let mut entries = self.entries.write().unwrap_or_else(PoisonError::into_inner);
        if entries.contains_key(identity) {
            return;
        }
        if entries.len() >= self.terms.max_identities {
            drop(entries);
            self.counters.refused_identities.inc();
            self.challengers.enter(identity, cost);
            return;
        }
        entries.insert(
            identity.clone(),
            Arc::new(Entry {
                held: ArcSwap::from_pointee(Held {
                    units: self.floor,
                    until_ms: 0,
                    policy: Arc::clone(&self.floor_policy),
                }),
                demand: AtomicU64::new(cost),
                last_sent_ms: AtomicU64::new(0),
            }),
        );
        self.counters.identities.set(gauge(entries.len() as u64));
    }

    /// Its series on this instance (share, demand, unleased, identities).
    pub fn counters(&self) -> &LeaseCounters {
        &self.counters
    }

    /// The region's floor of each identity's limit, and the policy's
    /// terms (every region's floor, the spare).
    pub fn terms(&self) -> (u64, &Leased) {
        (self.floor, &self.terms)
    }

    /// Identities holding an entry now.
    pub fn identities(&self) -> usize {
        self.entries
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether a renewal is due at `now_ms`.
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

    /// Starts a renewal sent at `sent_ms`: takes each identity's demand
    /// seen since its last one (per renewal period, so instances that
    /// renewed late or early compare fairly), drops the identities whose
    /// demand fits their floor and whose grant has run out, seats the
    /// challengers that earn a slot, and returns those that want more than
    /// their floor. An identity within its floor but still holding a grant
    /// is not renewed: its grant runs out.
    pub fn begin(&self, sent_ms: u64) -> Vec<Wanting> {
        self.schedule(sent_ms);
        let since = self.last_begin_ms.swap(sent_ms, Ordering::Relaxed);
        let mut entries = self.entries.write().unwrap_or_else(PoisonError::into_inner);
        let mut wanting = Vec::new();
        // Every holder kept, and its demand: who a challenger may displace.
        let mut holders: Vec<(Identity, u64)> = Vec::new();
        entries.retain(|identity, entry| {
            let seen = entry.demand.swap(0, Ordering::Relaxed);
            let last = entry.last_sent_ms.swap(sent_ms, Ordering::Relaxed);
            let elapsed = if last == 0 {
                self.terms.renew_ms
            } else {
                sent_ms.saturating_sub(last).max(1)
            };
            let demand = self.terms.per_renewal(seen, elapsed);
            if !self.terms.seen_fits(seen, elapsed, self.floor) {
                holders.push((identity.clone(), demand));
                wanting.push(Wanting {
                    identity: identity.clone(),
                    demand,
                    entry: Arc::clone(entry),
                });
                return true;
            }
            // Within its floor: counted afresh from here, kept only while
            // a grant runs.
            let kept = sent_ms < entry.held.load().until_ms;
            if kept {
                holders.push((identity.clone(), demand));
            }
            kept
        });
        let elapsed = if since == 0 {
            self.terms.renew_ms
        } else {
            sent_ms.saturating_sub(since).max(1)
        };
        self.seat_challengers(&mut entries, &mut wanting, holders, (sent_ms, elapsed));
        let reported = wanting
            .iter()
            .fold(0u64, |sum, w| sum.saturating_add(w.demand));
        self.counters.identities.set(gauge(entries.len() as u64));
        self.counters.demand.set(gauge(reported));
        wanting
    }

    /// Seats this period's challengers, the most demanding first: in a
    /// free slot, or in the least demanding holder's (ties in identity
    /// order) when the challenger asked for more than [`DISPLACE_RATIO`]
    /// times what it asked. A displaced holder leaves the table and the
    /// renewal: from now it spends its floor here, and its grant is left
    /// to the ledger to free. A holder seated this period is not displaced
    /// in it. `elapsed`: the challengers' period, since the last renewal.
    fn seat_challengers(
        &self,
        entries: &mut HashMap<Identity, Arc<Entry>>,
        wanting: &mut Vec<Wanting>,
        mut holders: Vec<(Identity, u64)>,
        (sent_ms, elapsed): (u64, u64),
    ) {
        for (identity, seen) in self.challengers.take() {
            if entries.contains_key(&identity) || self.terms.seen_fits(seen, elapsed, self.floor) {
                continue;
            }
            let demand = self.terms.per_renewal(seen, elapsed);
            if entries.len() >= self.terms.max_identities {
                let least = holders
                    .iter()
                    .enumerate()
                    .min_by(|(_, a), (_, b)| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)))
                    .map(|(at, _)| at);
                let Some(at) = least else { break };
                // The most demanding challenger first: none after it wins.
                if demand <= holders[at].1.saturating_mul(DISPLACE_RATIO) {
                    break;
                }
                let (displaced, _) = holders.swap_remove(at);
                entries.remove(&displaced);
                wanting.retain(|w| w.identity != displaced);
                self.counters.outcome("displaced").inc();
            }
            let entry = Arc::new(Entry {
                held: ArcSwap::from_pointee(Held {
                    units: self.floor,
                    until_ms: 0,
                    policy: Arc::clone(&self.floor_policy),
                }),
                demand: AtomicU64::new(0),
                last_sent_ms: AtomicU64::new(sent_ms),
            });
            entries.insert(identity.clone(), Arc::clone(&entry));
            wanting.push(Wanting {
                identity,
                demand,
                entry,
            });
        }
    }

    /// The ledger call for `wants`, under this policy's terms.
    pub fn ask<'a>(&'a self, wants: &'a [LeaseWant<'a>]) -> LeaseAsk<'a> {
        LeaseAsk {
            policy: self.declared.name(),
            region: &self.region,
            instance: instance_id(),
            spare: self.terms.spare,
            term_ms: self.terms.term_ms,
            rest_ms: self.terms.rest_ms,
            wants,
        }
    }

    /// What the ledger answered a renewal of `part` sent at `sent_ms`,
    /// seen at `now_ms`: each grant replaces what its identity holds, to be
    /// spent until a term after the send; a failure leaves what each holds
    /// to run out.
    pub fn settle(
        &self,
        part: &[Wanting],
        sent_ms: u64,
        now_ms: u64,
        answer: &Result<Vec<LeaseGrant>, StoreError>,
    ) {
        let grants = match answer {
            Ok(grants) if grants.len() == part.len() => Some(grants),
            _ => None,
        };
        let mut unleased = 0u64;
        for (index, wanting) in part.iter().enumerate() {
            let grant = grants.and_then(|g| g.get(index));
            if let Some(grant) = grant {
                unleased = unleased.saturating_add(grant.unleased);
            }
            self.settle_one(&wanting.entry, grant, sent_ms, now_ms);
        }
        if grants.is_some() {
            self.counters.unleased.set(gauge(unleased));
        }
        self.counters.share.set(gauge(self.largest_share(now_ms)));
    }

    /// One identity's answer: a grant, or none (the call failed).
    fn settle_one(&self, entry: &Entry, grant: Option<&LeaseGrant>, sent_ms: u64, now_ms: u64) {
        let held_before = entry.held.load();
        let live_before = now_ms < held_before.until_ms && held_before.units > self.floor;
        match grant {
            Some(grant) => {
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
                entry.held.store(Arc::new(Held {
                    units,
                    until_ms: sent_ms.saturating_add(self.terms.term_ms),
                    policy,
                }));
            }
            None => {
                self.counters.outcome("refused").inc();
                if held_before.units > self.floor && now_ms >= held_before.until_ms {
                    // Ran out unrenewed: back to the floor, counted once.
                    self.counters.outcome("expired").inc();
                    entry.held.store(Arc::new(Held {
                        units: self.floor,
                        until_ms: 0,
                        policy: Arc::clone(&self.floor_policy),
                    }));
                }
            }
        }
        let held = entry.held.load();
        if now_ms >= held.until_ms || held.units <= self.floor {
            // An identity wanting more than its floor, held to it.
            self.counters
                .floor_seconds
                .inc_by(self.terms.renew_ms as f64 / 1000.0);
        }
    }

    /// The most units any identity may spend here at `now_ms` (the floor
    /// when none holds a grant): the `tollgate_lease_share` gauge.
    fn largest_share(&self, now_ms: u64) -> u64 {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        entries
            .values()
            .map(|e| {
                let held = e.held.load();
                if now_ms < held.until_ms {
                    held.units
                } else {
                    self.floor
                }
            })
            .max()
            .unwrap_or(self.floor)
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
