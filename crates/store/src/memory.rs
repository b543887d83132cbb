//! The embedded memory store: the default for everyone who starts tollgate
//! without Redis, so it must be fast and it must be bounded.
//!
//! State lives in a fixed number of shards, each a `hashbrown::HashTable`
//! behind its own mutex, hashed with a randomly seeded foldhash (keys are
//! chosen by clients, so the seed keeps them from aiming at one shard).
//! A single check locks one shard. An all-or-nothing decision locks every
//! shard it touches in ascending order, so two such decisions never deadlock
//! and no other decision can slip between their probe and their commit.
//! (A general concurrent map such as DashMap offers no ordered multi-shard
//! lock, which is why the shards are our own.)
//!
//! Bounds: a key's state expires once it is back to full (buckets) or empty
//! (windows), which the decision's `reset_after_ms` states exactly; expired
//! keys are swept when a shard fills and by [`MemoryStore::sweep`]. Whether
//! a state has come to rest is judged on the monotonic clock as well as
//! the wall clock (memory/eviction.rs, `Now`): on the wall clock alone, one
//! stepped an hour forward and back would see every state at rest, and the
//! sweep would hand every exhausted identity a fresh quota. When a
//! shard is full of live keys it evicts a state that is not limiting, the
//! least consumed first, counted in [`MemoryStore::evictions`]; it never
//! evicts a limiting state, so fresh identities cannot reset a limit. A
//! shard holding only limiting states refuses a new key
//! ([`StoreError::Full`], counted in [`MemoryStore::refusals`]), which the
//! policy's failure mode answers (memory/eviction.rs, memory/full.rs).
//!
//! Request ids (crate::request_id) are kept in each shard beside its
//! states, keyed like them, under the same lock, with their own expiry;
//! each id counts as a key toward `max_keys`. A slot of state stays two
//! cache lines, and a store that never sees an id pays nothing for them.
//! A full shard forgets an id (the oldest of a sample) before it evicts
//! any state: a forgotten id costs a retry a second charge, an evicted
//! state gives its identity a fresh quota. Ids never push a state out.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::HashTable;
use parking_lot::{Mutex, MutexGuard};
use tollgate_core::{Algorithm, Clock, Decision, Identity, Intent, PermitId, Policy, State, Taken};

use crate::check::Check;
use crate::check::{self, same_key};
use crate::error::StoreError;
use crate::permit::{self, Minter};

mod contract;
mod eviction;
mod full;
mod identity;
mod permits;
mod records;
use eviction::{Marks, Now, sweep_table};
use identity::IdentityBytes;
use records::Records;

/// How a memory store is sized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStoreConfig {
    /// The most keys kept at once; beyond it a state that is not limiting
    /// is evicted, and a new key finding only limiting ones is refused.
    pub max_keys: usize,
    /// Number of independently locked shards (rounded up to a power of two).
    pub shards: usize,
}

impl Default for MemoryStoreConfig {
    fn default() -> Self {
        Self {
            max_keys: 1_000_000,
            shards: 128,
        }
    }
}

/// Bits at the top of a hash that hashbrown keeps in a slot's control byte.
const TAG_BITS: u32 = 7;

/// Aligned to a cache line, so a slot spans exactly two lines.
#[repr(align(64))]
struct Slot {
    hash: u64,
    policy: Arc<str>,
    algorithm: Algorithm,
    identity: IdentityBytes,
    /// Always `Some` while stored; an `Option` so the core decides in place.
    state: Option<State>,
    /// When the state is back to full or empty (on the monotonic clock):
    /// forgetting it is unobservable.
    expires_at_ms: u64,
    /// For how long before then it is not limiting (memory/eviction.rs);
    /// flat fields, not a `Marks`, so the slot stays two lines.
    open_before_rest_ms: u32,
    /// The share of its limit spent at its last decision, of `u8::MAX`.
    consumed: u8,
    /// How far the wall clock was ahead of the monotonic clock at its last
    /// decision, beyond where it was when the store was made (ms, clamped):
    /// a wall clock since stepped back rests the state no sooner than the
    /// wall says (memory/eviction.rs, [`Now`]).
    lead_ms: i16,
}

// Two cache lines per key. Should a state grow past this, shrink
// INLINE_IDENTITY or accept a third line knowingly.
const _: () = assert!(
    std::mem::size_of::<Slot>() <= 128,
    "a memory store slot outgrew two cache lines"
);

impl Slot {
    fn is(&self, hash: u64, check: &Check<'_>) -> bool {
        self.hash == hash
            && self.algorithm == check.policy.algorithm()
            // A policy's name is shared, so the pointer almost always answers.
            && (Arc::ptr_eq(&self.policy, check.policy.name_arc())
                || *self.policy == *check.policy.name())
            && self.identity.is(check.identity.as_bytes())
    }
}

/// A shard aligned to its own cache lines so neighbours do not contend.
#[repr(align(128))]
struct Shard(Mutex<Table>);

/// One shard's states, and its request ids (each counts as a key toward
/// the bound).
#[derive(Default)]
struct Table {
    slots: HashTable<Slot>,
    records: HashTable<Records>,
    ids: usize,
    /// The next states to evict, as the last pass over the shard listed
    /// them (memory/eviction.rs); popped from the end.
    victims: Vec<u64>,
    /// Calls to make room since that pass.
    since_sweep: usize,
    /// Until then the shard holds only limiting states, as that pass
    /// found (0: not known to be full).
    full_until_ms: u64,
}

impl Table {
    fn held(&self) -> usize {
        self.slots.len() + self.ids
    }

    /// Forgets the ids recorded with `check`'s key.
    fn forget_ids(&mut self, hash: u64, check: &Check<'_>) {
        if let Ok(entry) = self.records.find_entry(hash, |r| r.is(hash, check)) {
            let (records, _) = entry.remove();
            self.ids -= records.ids.len();
        }
    }
}

type Guards<'a> = Vec<(usize, MutexGuard<'a, Table>)>;

/// The bounded, sharded in-process store; see the module notes for why it
/// is shaped this way.
pub struct MemoryStore {
    shards: Box<[Shard]>,
    /// How far a hash shifted past its tag is shifted right to name a
    /// shard ([`MemoryStore::shard_index`]).
    shard_shift: u32,
    max_per_shard: usize,
    hasher: foldhash::fast::RandomState,
    clock: Arc<dyn Clock>,
    /// The wall time minus the monotonic time when the store was made.
    base_lead_ms: i64,
    evictions: AtomicU64,
    refusals: AtomicU64,
    /// Names the permits of concurrency acquires (crate::permit).
    minter: Minter,
    /// The budgets of `local` policies' identities that found no room
    /// (memory/full.rs); none in an overflow store itself.
    overflow: Option<Box<MemoryStore>>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("shards", &self.shards.len())
            .field("max_per_shard", &self.max_per_shard)
            .finish_non_exhaustive()
    }
}

impl MemoryStore {
    /// `clock` is the store's notion of time: every decision reads it, so a
    /// [`ManualClock`](tollgate_core::ManualClock) makes a store deterministic.
    pub fn new(clock: Arc<dyn Clock>, config: MemoryStoreConfig) -> Self {
        let overflow = Self::bare(Arc::clone(&clock), full::OVERFLOW);
        Self {
            overflow: Some(Box::new(overflow)),
            ..Self::bare(clock, config)
        }
    }

    fn bare(clock: Arc<dyn Clock>, config: MemoryStoreConfig) -> Self {
        let shard_count = config.shards.clamp(1, 1 << 16).next_power_of_two();
        let max_per_shard = config.max_keys.div_ceil(shard_count).max(1);
        Self {
            shards: (0..shard_count)
                .map(|_| Shard(Mutex::new(Table::default())))
                .collect(),
            shard_shift: 64 - shard_count.trailing_zeros().max(1),
            max_per_shard,
            hasher: foldhash::fast::RandomState::default(),
            base_lead_ms: Now::lead_of(&*clock, 0),
            clock,
            evictions: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
            minter: Minter::default(),
            overflow: None,
        }
    }

    /// Decides one check now; the synchronous heart of [`Store::decide`](crate::Store::decide).
    /// [`StoreError::Full`] when its key is new and its shard holds only
    /// limiting states: nothing is stored then.
    // Inlined where it is called (the contract's `decide`), so the decision
    // is handed back in registers rather than through a `Result` in memory.
    #[inline]
    pub fn decide_now(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        self.decide_at(check, || self.now())
    }

    /// Both times now: the wall time decides, the monotonic time rests.
    fn now(&self) -> Now {
        let (wall, mono) = self.clock.now_and_monotonic_ms();
        self.at(wall, mono)
    }

    /// The wall time `wall` and monotonic time `mono` (ms) as this store
    /// judges them.
    fn at(&self, wall: u64, mono: u64) -> Now {
        Now {
            wall,
            mono,
            lead: Now::lead(wall, mono, self.base_lead_ms),
        }
    }

    /// Whether `clock` is this store's own (the same instance): its
    /// reading, made once by a caller that also times the decision, may
    /// then be handed to [`MemoryStore::decide_guarded_at`] instead of
    /// the store reading the clock again.
    pub fn keeps_time_by(&self, clock: &Arc<dyn Clock>) -> bool {
        Arc::ptr_eq(&self.clock, clock)
    }

    /// Decides `check` now and says where its units came from, so the ones
    /// never used can be given back ([`MemoryStore::give_back`]).
    pub fn take(&self, check: Check<'_>) -> Result<(Decision, Taken), StoreError> {
        let now = self.now();
        let decision = self.decide_at(check, || now)?;
        Ok((decision, Taken::new(now.wall, &decision)))
    }

    /// Gives back up to `check.cost` units of a [`MemoryStore::take`] never
    /// used, as far as the state can take them back exactly
    /// ([`Limits::give_back`](tollgate_core::Limits::give_back)); returns
    /// how many went back. The key keeps its expiry (no earlier than needed).
    pub fn give_back(&self, check: Check<'_>, taken: Taken) -> u64 {
        let now = self.now();
        let hash = self.hash(&check);
        let mut table = self.shard(hash).0.lock();
        let limits = check.policy.limits();
        let Some(slot) = table.slots.find_mut(hash, |s| s.is(hash, &check)) else {
            return 0;
        };
        let given = limits.give_back(&mut slot.state, now.wall, check.cost, taken);
        // It may have stopped limiting: its marks as a peek now reads it.
        if given > 0
            && let Some(state) = &slot.state
        {
            let peek = limits.decide_with(&mut Some(state.clone()), now.wall, 0, Intent::Probe);
            let expires_at_ms = slot.expires_at_ms;
            slot.mark(Marks::of(limits, state, now, &peek, None).expiring_at(expires_at_ms));
            table.full_until_ms = 0;
        }
        given
    }

    /// Decides `check` at the time `now` reads, once its key is hashed.
    // Read after the hash (the key's bytes are loading) and before the
    // lock and the lookup, not first: measured both ways against reading
    // it first, this place was the best of the three on the real clock
    // and no worse on the simulated one (docs/benchmarks.md, "The fourth
    // pass"); why is not established without hardware counters.
    #[inline(always)]
    fn decide_at(
        &self,
        check: Check<'_>,
        now: impl FnOnce() -> Now,
    ) -> Result<Decision, StoreError> {
        let hash = self.hash(&check);
        let now = now();
        let permit = self.minter.one(&check);
        let mut table = self.shard(hash).0.lock();
        let table = &mut *table;
        let limits = check.policy.limits();
        match table.slots.find_entry(hash, |s| s.is(hash, &check)) {
            Ok(mut entry) => {
                let slot = entry.get_mut();
                let decision = limits.decide_permit(
                    &mut slot.state,
                    now.wall,
                    check.cost,
                    Intent::Consume,
                    permit,
                );
                match &slot.state {
                    Some(state) => {
                        slot.mark(Marks::of(limits, state, now, &decision, Some(check.cost)));
                    }
                    None => {
                        entry.remove();
                    }
                }
                Ok(decision)
            }
            Err(_) => self.decide_new(table, hash, check, now, permit),
        }
    }

    /// [`MemoryStore::decide_at`] for a key not stored: out of line, so
    /// the stored key's path keeps its registers.
    #[inline(never)]
    fn decide_new(
        &self,
        table: &mut Table,
        hash: u64,
        check: Check<'_>,
        now: Now,
        permit: PermitId,
    ) -> Result<Decision, StoreError> {
        let limits = check.policy.limits();
        let mut state = None;
        let decision =
            limits.decide_permit(&mut state, now.wall, check.cost, Intent::Consume, permit);
        // A peek (cost 0) at an identity never seen stores nothing:
        // a read must not write, and a fresh state decides as an
        // absent one does (twin: decide_each in common.lua).
        if let Some(state) = state.filter(|_| check.cost > 0) {
            let marks = Marks::of(limits, &state, now, &decision, Some(check.cost));
            self.insert(table, hash, &check, state, marks, now, &[])?;
        }
        Ok(decision)
    }

    /// Forgets `policy`'s state for `identity` (an operator's reset): the
    /// identity starts afresh. Returns whether there was a state.
    pub fn forget(&self, policy: &Policy, identity: &Identity) -> bool {
        let check = Check {
            policy,
            identity,
            cost: 0,
        };
        let hash = self.hash(&check);
        let mut table = self.shard(hash).0.lock();
        table.forget_ids(hash, &check);
        match table.slots.find_entry(hash, |s| s.is(hash, &check)) {
            Ok(entry) => {
                entry.remove();
                true
            }
            Err(_) => false,
        }
    }

    /// Decides every check all-or-nothing, now. See [`Store::decide_all`](crate::Store::decide_all).
    /// [`StoreError::Full`] when a new key finds no room: nothing is written.
    pub fn decide_all_now(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        self.decide_all_at(checks, || self.now())
    }

    /// [`MemoryStore::decide_all_now`] at the time `now` reads.
    fn decide_all_at(
        &self,
        checks: &[Check<'_>],
        now: impl FnOnce() -> Now,
    ) -> Result<Vec<Decision>, StoreError> {
        match checks {
            [] => return Ok(Vec::new()),
            [one] => return Ok(vec![self.decide_at(*one, now)?]),
            _ => {}
        }
        let now = now();
        let hashes: Vec<u64> = checks.iter().map(|c| self.hash(c)).collect();
        let permits = self.minter.name(checks);
        let mut guards = self.lock(&hashes);
        self.decide_locked(&mut guards, checks, &hashes, &permits, now)
    }

    /// Locks the shards of `hashes` in ascending order, so no two
    /// all-or-nothing decisions can deadlock.
    fn lock(&self, hashes: &[u64]) -> Guards<'_> {
        let mut shard_ids: Vec<usize> = hashes.iter().map(|&h| self.shard_index(h)).collect();
        shard_ids.sort_unstable();
        shard_ids.dedup();
        shard_ids
            .iter()
            .map(|&i| (i, self.shards[i].0.lock()))
            .collect()
    }

    /// The all-or-nothing decision, on shards already locked; `permits`
    /// names what each concurrency check would hold (crate::permit).
    fn decide_locked(
        &self,
        guards: &mut Guards<'_>,
        checks: &[Check<'_>],
        hashes: &[u64],
        permits: &[PermitId],
        now: Now,
    ) -> Result<Vec<Decision>, StoreError> {
        // Decide on copies so nothing is written unless every check admits.
        // Each distinct key has one copy: a key named twice sees its own
        // earlier consumption. `copies[k].0` is the first check naming it.
        let mut copies: Vec<(usize, Option<State>)> = Vec::with_capacity(checks.len());
        let mut copy_of: Vec<usize> = Vec::with_capacity(checks.len());
        for (i, check) in checks.iter().enumerate() {
            let known = copies.iter().position(|&(first, _)| {
                hashes[first] == hashes[i] && same_key(&checks[first], check)
            });
            copy_of.push(known.unwrap_or_else(|| {
                copies.push((i, None));
                copies.len() - 1
            }));
        }
        let load = |guards: &mut [(usize, MutexGuard<'_, Table>)],
                    copies: &mut [(usize, Option<State>)]| {
            for (first, state) in copies.iter_mut() {
                let hash = hashes[*first];
                *state = table_for(guards, self.shard_index(hash))
                    .slots
                    .find(hash, |s| s.is(hash, &checks[*first]))
                    .and_then(|s| s.state.clone());
            }
        };
        let decide = |copies: &mut [(usize, Option<State>)], intent: Intent| -> Vec<Decision> {
            checks
                .iter()
                .zip(&copy_of)
                .enumerate()
                .map(|(i, (c, &k))| {
                    let permit = permit::at(permits, i);
                    c.policy.limits().decide_permit(
                        &mut copies[k].1,
                        now.wall,
                        c.cost,
                        intent,
                        permit,
                    )
                })
                .collect()
        };
        load(guards, &mut copies);
        let mut decisions = decide(&mut copies, Intent::Consume);
        if !decisions.iter().all(|d| d.allowed) {
            // Start again from the stored states, consuming nothing. A check
            // that failed only after an earlier check of this batch consumed
            // from its key keeps that failure, so the batch still reads rejected.
            load(guards, &mut copies);
            let probed = decide(&mut copies, Intent::Probe);
            for (decision, probe) in decisions.iter_mut().zip(probed) {
                if decision.allowed {
                    *decision = probe;
                }
            }
        }
        self.write_back(guards, checks, hashes, copies, &copy_of, &decisions, now)?;
        if !decisions.iter().all(|d| d.allowed) {
            check::mark_never_fits(&check::never_fit_in_batch(checks), &mut decisions);
        }
        Ok(decisions)
    }

    /// Writes each distinct key of a batch back once, its marks from its
    /// last decision; all or nothing: room is made for every new key that
    /// must be kept before anything is written. A new key at rest is kept
    /// only where there is room left (keeping it changes nothing).
    #[allow(clippy::too_many_arguments)]
    fn write_back(
        &self,
        guards: &mut Guards<'_>,
        checks: &[Check<'_>],
        hashes: &[u64],
        copies: Vec<(usize, Option<State>)>,
        copy_of: &[usize],
        decisions: &[Decision],
        now: Now,
    ) -> Result<(), StoreError> {
        let last = |k: usize, first: usize| copy_of.iter().rposition(|&c| c == k).unwrap_or(first);
        let mut wanted: Vec<(usize, usize)> = Vec::new();
        for (k, (first, state)) in copies.iter().enumerate() {
            let hash = hashes[*first];
            let shard = self.shard_index(hash);
            let needs_room = state.as_ref().is_some_and(|state| {
                state.expires_at_ms(now.wall, &decisions[last(k, *first)]) > now.wall
                    && table_for(guards, shard)
                        .slots
                        .find(hash, |s| s.is(hash, &checks[*first]))
                        .is_none()
            });
            if needs_room {
                match wanted.iter_mut().find(|(s, _)| *s == shard) {
                    Some((_, n)) => *n += 1,
                    None => wanted.push((shard, 1)),
                }
            }
        }
        for (shard, n) in wanted {
            let table = table_for(guards, shard);
            while table.held() + n > self.max_per_shard {
                if !self.make_room(table, now, hashes) {
                    return Err(self.refuse());
                }
            }
        }
        let mut at_rest = Vec::new();
        for (k, (first, state)) in copies.into_iter().enumerate() {
            let hash = hashes[first];
            let check = &checks[first];
            let decision = &decisions[last(k, first)];
            let limits = check.policy.limits();
            let table = table_for(guards, self.shard_index(hash));
            match (table.slots.find_entry(hash, |s| s.is(hash, check)), state) {
                (Ok(mut entry), Some(state)) => {
                    let slot = entry.get_mut();
                    slot.mark(Marks::of(limits, &state, now, decision, None));
                    slot.state = Some(state);
                }
                (Ok(entry), None) => {
                    entry.remove();
                }
                (Err(_), Some(state)) if state.expires_at_ms(now.wall, decision) <= now.wall => {
                    at_rest.push((first, state, *decision));
                }
                (Err(_), Some(state)) => {
                    let marks = Marks::of(limits, &state, now, decision, None);
                    self.insert(table, hash, check, state, marks, now, hashes)?;
                }
                (Err(_), None) => {}
            }
        }
        for (first, state, decision) in at_rest {
            let hash = hashes[first];
            let table = table_for(guards, self.shard_index(hash));
            let marks = Marks::of(checks[first].policy.limits(), &state, now, &decision, None);
            self.insert(table, hash, &checks[first], state, marks, now, hashes)?;
        }
        Ok(())
    }

    /// Removes every expired key; returns how many. Call it now and then.
    pub fn sweep(&self) -> usize {
        let now = self.now();
        self.shards
            .iter()
            .map(|shard| sweep_table(&mut shard.0.lock(), now, &[], self.victims_a_pass()))
            .sum()
    }

    /// Keys held right now (a sum over shards, so approximate under load).
    pub fn key_count(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().slots.len()).sum()
    }

    /// Live keys evicted because the store was full (never a limiting one).
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// New keys refused because their shard held only limiting states
    /// ([`StoreError::Full`]); their decisions fell to the failure modes.
    pub fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }

    /// Counts a refusal and says why.
    fn refuse(&self) -> StoreError {
        self.refusals.fetch_add(1, Ordering::Relaxed);
        StoreError::Full {
            max_keys: self.capacity() as u64,
        }
    }

    /// The most keys this store keeps.
    pub fn capacity(&self) -> usize {
        self.max_per_shard * self.shards.len()
    }

    /// The key's hash: the policy's digest of its name and algorithm
    /// (computed once per policy), then the identity's bytes, seeded.
    fn hash(&self, check: &Check<'_>) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        hasher.write_u64(check.policy.key_digest());
        hasher.write(check.identity.as_bytes());
        hasher.finish()
    }

    fn shard_index(&self, hash: u64) -> usize {
        // The table places a slot by the low bits and tags it with the top 7
        // (hashbrown's control byte); the shard takes the bits just below the
        // tag. Were it to take the tag's bits, every slot of a shard would
        // share one tag and each probe would compare every slot it passes.
        ((hash << TAG_BITS) >> self.shard_shift) as usize & (self.shards.len() - 1)
    }

    fn shard(&self, hash: u64) -> &Shard {
        &self.shards[self.shard_index(hash)]
    }

    /// Keeps `state` as `check`'s new key, making room when the shard is
    /// full (never at the cost of `keep`); a state at rest is not worth
    /// room and is dropped instead. [`StoreError::Full`] when there is none.
    #[allow(clippy::too_many_arguments)]
    fn insert(
        &self,
        table: &mut Table,
        hash: u64,
        check: &Check<'_>,
        state: State,
        marks: Marks,
        now: Now,
        keep: &[u64],
    ) -> Result<(), StoreError> {
        if table.held() >= self.max_per_shard {
            if marks.expires_at_ms <= now.mono {
                return Ok(());
            }
            if !self.make_room(table, now, keep) {
                return Err(self.refuse());
            }
        }
        table.slots.insert_unique(
            hash,
            Slot {
                hash,
                policy: Arc::clone(check.policy.name_arc()),
                algorithm: check.policy.algorithm(),
                identity: IdentityBytes::new(check.identity.as_bytes()),
                state: Some(state),
                expires_at_ms: 0,
                open_before_rest_ms: 0,
                consumed: 0,
                lead_ms: 0,
            }
            .marked(marks),
            |s| s.hash,
        );
        // The new state may not be limiting: the shard is no longer known full.
        table.full_until_ms = 0;
        Ok(())
    }
}

fn table_for<'g, 'a>(
    guards: &'g mut [(usize, MutexGuard<'a, Table>)],
    shard: usize,
) -> &'g mut Table {
    let at = guards.partition_point(|(i, _)| *i < shard);
    &mut guards[at].1
}
