//! The rejected-until cache: once the store rejects `cost` for a key with
//! `retry_after_ms = R`, the same (key, limits, cost) is rejected for at
//! least R from then on, because every other instance can only consume.
//! Until then it is answered here, with no round trip.
//!
//! Exactness: the window is measured from when the request was *sent*,
//! which is no later than when Redis decided, so the local answer never
//! outlives the true one. The `retry_after_ms` and `reset_after_ms` shown
//! count down from when the answer *arrived*, so they are never early;
//! `remaining` repeats the store's answer.
//!
//! A hot-lease give-back (another instance's) can add room meanwhile: then
//! the cache may reject what the store would admit, never the reverse; an
//! instance's own give-back forgets the key's entries.
//!
//! A peek (cost 0) is never answered here: it is always admitted, so never
//! remembered, and a cached rejection could not answer it exactly. Its
//! `remaining` and `reset_after_ms` count what other instances consumed
//! since, and it advances the key's `last_seen` (docs/design.md §3). What
//! keeps a flood of peeks cheap is the store's bounded work per call (a
//! sliding_log parses at most `LOG_MAX_ENTRIES` entries).
//!
//! A concurrency key is never cached: a release (any instance's) frees a
//! permit before its lease ends, so its rejection is only an upper bound.
//!
//! Entries are keyed by the policy's parameters too, so a changed limit
//! misses at once. The map is bounded: full shards drop expired entries,
//! and when none has expired the new entry is simply not cached.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hashbrown::{Equivalent, HashMap};
use parking_lot::Mutex;
use tokio::time::Instant;
use tollgate_core::{Algorithm, Decision};

use super::script::Item;

const SHARDS: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Entry {
    key: Box<[u8]>,
    algorithm: Algorithm,
    params: [u64; 3],
    cost: u64,
}

/// An [`Entry`] borrowed from an item: looks up without copying the key.
/// Its fields hash exactly as `Entry`'s (a boxed slice hashes as the slice).
#[derive(Hash)]
struct Lookup<'a> {
    key: &'a [u8],
    algorithm: Algorithm,
    params: [u64; 3],
    cost: u64,
}

impl Equivalent<Entry> for Lookup<'_> {
    fn equivalent(&self, entry: &Entry) -> bool {
        *self.key == *entry.key
            && self.algorithm == entry.algorithm
            && self.params == entry.params
            && self.cost == entry.cost
    }
}

#[derive(Debug, Clone, Copy)]
struct Rejection {
    /// Rejected for certain until then (from when the request was sent).
    until: Instant,
    /// When the answer arrived: the countdown of retry and reset starts here.
    answered: Instant,
    decision: Decision,
}

type Shard = Mutex<HashMap<Entry, Rejection, foldhash::fast::RandomState>>;

pub struct RejectedCache {
    shards: Box<[Shard]>,
    per_shard: usize,
    hasher: foldhash::fast::RandomState,
    /// Entries held: while zero, a lookup costs no lock.
    held: AtomicUsize,
}

impl RejectedCache {
    /// A cache of at most `capacity` entries; 0 caches nothing.
    pub fn new(capacity: usize) -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::with_hasher(Default::default())))
                .collect(),
            per_shard: capacity.div_ceil(SHARDS),
            hasher: Default::default(),
            held: AtomicUsize::new(0),
        }
    }

    /// The local answer for `item` at `now`, while its rejection holds.
    pub fn get(&self, item: &Item, now: Instant) -> Option<Decision> {
        if self.held.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let lookup = lookup(item);
        let mut shard = self.shard(&lookup).lock();
        let rejection = *shard.get(&lookup)?;
        if now >= rejection.until {
            if shard.remove(&lookup).is_some() {
                self.held.fetch_sub(1, Ordering::Relaxed);
            }
            return None;
        }
        let waited = ms(now.saturating_duration_since(rejection.answered));
        let mut decision = rejection.decision;
        decision.retry_after_ms = decision
            .retry_after_ms
            .map(|r| r.saturating_sub(waited).max(1));
        decision.reset_after_ms = decision.reset_after_ms.saturating_sub(waited);
        Some(decision)
    }

    /// Remembers a rejection with a finite wait; `sent` is when the request
    /// left, `answered` when the decision came back.
    pub fn remember(&self, item: &Item, decision: &Decision, sent: Instant, answered: Instant) {
        let Some(retry) = decision.retry_after_ms else {
            return;
        };
        if decision.allowed
            || retry == 0
            || self.per_shard == 0
            || item.algorithm == Algorithm::Concurrency
        {
            return;
        }
        let until = sent + Duration::from_millis(retry);
        if until <= answered {
            return;
        }
        let lookup = lookup(item);
        let mut shard = self.shard(&lookup).lock();
        if shard.len() >= self.per_shard && !shard.contains_key(&lookup) {
            let before = shard.len();
            shard.retain(|_, r| r.until > answered);
            self.held.fetch_sub(before - shard.len(), Ordering::Relaxed);
            if shard.len() >= self.per_shard {
                return;
            }
        }
        let rejection = Rejection {
            until,
            answered,
            decision: *decision,
        };
        if shard.insert(entry(item), rejection).is_none() {
            self.held.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Forgets every rejection of `key`, whatever its cost (an operator reset
    /// the identity). Rare: a scan of every shard.
    pub fn forget(&self, key: &[u8]) {
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let before = shard.len();
            shard.retain(|entry, _| *entry.key != *key);
            self.held.fetch_sub(before - shard.len(), Ordering::Relaxed);
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    fn shard(&self, lookup: &Lookup<'_>) -> &Shard {
        // The same hash picks the shard (top bits) and the bucket in it.
        let hash = self.hasher.hash_one(lookup);
        &self.shards[(hash >> 60) as usize % SHARDS]
    }
}

fn lookup(item: &Item) -> Lookup<'_> {
    Lookup {
        key: &item.key,
        algorithm: item.algorithm,
        params: item.params,
        cost: item.cost,
    }
}

fn entry(item: &Item) -> Entry {
    Entry {
        key: item.key.as_slice().into(),
        algorithm: item.algorithm,
        params: item.params,
        cost: item.cost,
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
