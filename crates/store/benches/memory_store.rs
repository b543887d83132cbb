//! The memory store against its baselines, in one run, on the same workloads:
//! governor's keyed rate limiter (GCRA over a DashMap) and limitador's
//! in-memory storage (a fixed window over a moka cache).
//!
//! Workloads: one hot key, or 1,000,000 keys pre-populated and picked by a
//! cheap PRNG; on one thread, or two threads sharing the limiter. Keys are
//! strings formatted once up front; each contender keys by the same bytes.
//!
//! Contenders, each reported per decision:
//! - simulated clock — the bench moves a shared manual clock 32 ms every 64
//!   decisions of each thread (0.5 ms per decision), so tollgate and governor
//!   see the same times and, single-threaded, make the same decisions (checked
//!   at start-up): `tollgate_gcra`, `tollgate_token_bucket`,
//!   `tollgate_fixed_window`, `governor_gcra` (its default SipHash), and
//!   `governor_gcra_foldhash` (given the hasher tollgate uses); and
//!   `tollgate_gcra_async`, the same store through the async `Store::decide`.
//! - production clock — each contender reads its own clock, as deployed:
//!   `tollgate_gcra_system_clock` and `tollgate_fixed_window_system_clock`
//!   (`SystemClock`), `governor_gcra_quanta_clock` (its default clock),
//!   `limitador_fixed_window` (it reads `SystemTime` itself; its clock cannot
//!   be injected, so it has no simulated-clock variant).
//!
//! Policies: gcra and token_bucket, capacity 100 refilled 1 per ms; governor
//! the same quota (burst 100, one cell per ms); fixed windows 1,000 per
//! second, tollgate's and limitador's alike. The share of decisions admitted
//! is printed after each benchmark.
//!
//! Run: `cargo bench -p tollgate-store --bench memory_store`

use std::collections::HashMap;
use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use governor::clock::{Clock as GovernorClock, DefaultClock, FakeRelativeClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter as Governor};
use limitador::RateLimiter as Limitador;
use limitador::limit::{Context as LimitadorContext, Expression, Limit, Namespace};
use tollgate_core::{Clock, Identity, Limits, ManualClock, Policy, Rate, SystemClock, Window};
use tollgate_store::{
    Check, MemoryStore, MemoryStoreConfig, RequestDigest, RequestId, Retry, Store,
};

const MANY_KEYS: usize = 1_000_000;
/// Each thread moves the simulated clock `TICK_MS` every `TICK` decisions.
const TICK: u64 = 64;
const TICK_MS: u64 = 32;
/// A realistic Unix time in ms for the simulated clocks to start at.
const START_MS: u64 = 1_767_225_600_000;
const CAPACITY: u32 = 100;
const WINDOW_LIMIT: u64 = 1_000;

/// One rate limiter under test. `decide` asks about the key at `index`.
trait Contender: Sync {
    fn decide(&self, index: usize) -> bool;
    /// Moves a simulated clock; real clocks ignore it.
    fn advance(&self, _by_ms: u64) {}
}

/// The string every contender keys by, formatted once up front.
fn key_name(index: usize) -> String {
    format!("tenant-{index}")
}

fn gcra_rate() -> Rate {
    Rate::new(u64::from(CAPACITY), 1, 1).expect("100 refilled 1 per ms is a valid rate")
}

fn window() -> Window {
    Window::new(WINDOW_LIMIT, 1_000).expect("1,000 per second is a valid window")
}

struct Tollgate {
    store: MemoryStore,
    policy: Policy,
    identities: Vec<Identity>,
    clock: Option<Arc<ManualClock>>,
}

impl Tollgate {
    fn simulated(limits: Limits, keys: usize) -> Self {
        let clock = Arc::new(ManualClock::new(START_MS));
        Self::new(
            limits,
            keys,
            Arc::clone(&clock) as Arc<dyn Clock>,
            Some(clock),
        )
    }

    fn system_clock(limits: Limits, keys: usize) -> Self {
        Self::new(limits, keys, Arc::new(SystemClock), None)
    }

    fn new(
        limits: Limits,
        keys: usize,
        clock: Arc<dyn Clock>,
        manual: Option<Arc<ManualClock>>,
    ) -> Self {
        // Room for every key: the bench measures decisions, not eviction.
        let config = MemoryStoreConfig {
            max_keys: 2 * keys.max(1024),
            ..MemoryStoreConfig::default()
        };
        Self {
            store: MemoryStore::new(clock, config),
            policy: Policy::new("bench", limits),
            identities: (0..keys).map(|i| Identity::value(&key_name(i))).collect(),
            clock: manual,
        }
    }

    fn check(&self, index: usize) -> Check<'_> {
        Check {
            policy: &self.policy,
            identity: &self.identities[index],
            cost: 1,
        }
    }
}

impl Contender for Tollgate {
    fn decide(&self, index: usize) -> bool {
        self.store
            .decide_now(self.check(index))
            .expect("the store has room")
            .allowed
    }
    fn advance(&self, by_ms: u64) {
        if let Some(clock) = &self.clock {
            clock.advance(by_ms);
        }
    }
}

/// The same store with a request id on every decision, each a new one
/// (ids cycle through a pool large enough that the per-identity bound has
/// forgotten an id before it comes round again): what recording costs.
struct TollgateWithIds {
    tollgate: Tollgate,
    ids: Vec<RequestId>,
    next: AtomicUsize,
}

impl TollgateWithIds {
    fn new(tollgate: Tollgate) -> Self {
        Self {
            tollgate,
            ids: (0..4096)
                .map(|i| RequestId::new(&format!("6f1c2b9e-5d7a-4e3b-9a41-0c8d2e7f{i:04}")))
                .collect::<Result<_, _>>()
                .expect("valid ids"),
            next: AtomicUsize::new(0),
        }
    }
}

impl Contender for TollgateWithIds {
    fn decide(&self, index: usize) -> bool {
        let id = &self.ids[self.next.fetch_add(1, Ordering::Relaxed) % self.ids.len()];
        let check = self.tollgate.check(index);
        let retry = Retry {
            id,
            request: RequestDigest::of(std::slice::from_ref(&check), None),
            window_ms: 60_000,
            max_ids: 64,
        };
        self.tollgate
            .store
            .decide_once_now(std::slice::from_ref(&check), retry)
            .expect("the store has room")
            .decisions
            .first()
            .is_some_and(|d| d.allowed)
    }
    fn advance(&self, by_ms: u64) {
        self.tollgate.advance(by_ms);
    }
}

/// The same store through the async `Store::decide`, polled once: the memory
/// store's future is ready at once, so this measures what the async seam adds.
struct TollgateAsync(Tollgate);

impl Contender for TollgateAsync {
    fn decide(&self, index: usize) -> bool {
        let mut future = pin!(self.0.store.decide(self.0.check(index)));
        match future
            .as_mut()
            .poll(&mut TaskContext::from_waker(Waker::noop()))
        {
            Poll::Ready(decision) => decision.expect("the memory store never fails").allowed,
            Poll::Pending => panic!("the memory store's decision is always ready"),
        }
    }
    fn advance(&self, by_ms: u64) {
        self.0.advance(by_ms);
    }
}

fn governor_quota() -> Quota {
    Quota::with_period(Duration::from_millis(1))
        .expect("1 ms is a valid period")
        .allow_burst(NonZeroU32::new(CAPACITY).expect("100 is not zero"))
}

struct GovernorKeyed<C: GovernorClock, S: BuildHasher + Clone = RandomState> {
    limiter: Governor<String, DashMapStateStore<String, S>, C, NoOpMiddleware<C::Instant>>,
    keys: Vec<String>,
    clock: Option<FakeRelativeClock>,
}

impl<S: BuildHasher + Clone + Default> GovernorKeyed<FakeRelativeClock, S> {
    fn simulated(keys: usize) -> Self {
        let clock = FakeRelativeClock::default();
        clock.advance(Duration::from_millis(START_MS));
        let hasher = S::default();
        Self {
            limiter: Governor::dashmap_with_clock_and_hasher(
                governor_quota(),
                clock.clone(),
                hasher,
            ),
            keys: (0..keys).map(key_name).collect(),
            clock: Some(clock),
        }
    }
}

impl GovernorKeyed<DefaultClock> {
    /// `governor::DefaultKeyedRateLimiter<String>`, as `RateLimiter::keyed` builds it.
    fn default_clock(keys: usize) -> Self {
        Self {
            limiter: Governor::keyed(governor_quota()),
            keys: (0..keys).map(key_name).collect(),
            clock: None,
        }
    }
}

impl<C: GovernorClock + Sync, S: BuildHasher + Clone + Sync> Contender for GovernorKeyed<C, S>
where
    C::Instant: Sync,
{
    fn decide(&self, index: usize) -> bool {
        self.limiter.check_key(&self.keys[index]).is_ok()
    }
    fn advance(&self, by_ms: u64) {
        if let Some(clock) = &self.clock {
            clock.advance(Duration::from_millis(by_ms));
        }
    }
}

struct LimitadorInMemory {
    limiter: Limitador,
    namespace: Namespace,
    keys: Vec<String>,
}

impl LimitadorInMemory {
    fn new(keys: usize) -> Self {
        let cache_size = 2 * keys.max(1024) as u64;
        let limiter = Limitador::new(cache_size);
        let variable = Expression::parse("key").expect("`key` is a valid expression");
        limiter.add_limit(Limit::new(
            "bench",
            WINDOW_LIMIT,
            1,
            Vec::new(),
            vec![variable],
        ));
        Self {
            limiter,
            namespace: Namespace::from("bench"),
            keys: (0..keys).map(key_name).collect(),
        }
    }
}

impl Contender for LimitadorInMemory {
    fn decide(&self, index: usize) -> bool {
        // Limitador's API takes a request context built from owned strings,
        // so each decision allocates it: the API leaves no other way.
        let values = HashMap::from([("key".to_owned(), self.keys[index].clone())]);
        let context = LimitadorContext::from(values);
        let result = self
            .limiter
            .check_rate_limited_and_update(&self.namespace, &context, 1)
            .expect("in-memory storage does not fail");
        !result.limited
    }
}

/// splitmix64: cheap, and good enough to scatter keys.
struct KeyPicker {
    state: u64,
    keys: u64,
}

impl KeyPicker {
    fn new(seed: u64, keys: usize) -> Self {
        Self {
            state: seed,
            keys: keys as u64,
        }
    }

    #[inline]
    fn next(&mut self) -> usize {
        if self.keys <= 1 {
            return 0;
        }
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        // Multiply-shift maps onto 0..keys without a division.
        ((u128::from(z) * u128::from(self.keys)) >> 64) as usize
    }
}

/// Counts what a benchmark's decisions were, to show the workload it saw.
#[derive(Default)]
struct Tally {
    decided: AtomicU64,
    admitted: AtomicU64,
    seeds: AtomicU64,
}

impl Tally {
    fn report(&self, id: &str) {
        let decided = self.decided.load(Ordering::Relaxed).max(1);
        let admitted = self.admitted.load(Ordering::Relaxed);
        eprintln!(
            "{id}: {:.2}% of {decided} decisions admitted",
            100.0 * admitted as f64 / decided as f64
        );
    }
}

/// One thread's share: `iters` decisions, moving the clock every `TICK`.
fn run<C: Contender>(contender: &C, picker: &mut KeyPicker, iters: u64) -> u64 {
    let mut admitted = 0;
    for i in 0..iters {
        admitted += u64::from(black_box(contender.decide(picker.next())));
        if i % TICK == TICK - 1 {
            contender.advance(TICK_MS);
        }
    }
    admitted
}

/// Wall time for `iters` decisions spread over `threads` threads.
#[allow(clippy::disallowed_methods, reason = "a benchmark measures wall time")]
fn measure<C: Contender>(
    contender: &C,
    keys: usize,
    threads: u64,
    iters: u64,
    tally: &Tally,
) -> Duration {
    let seed = tally.seeds.fetch_add(threads, Ordering::Relaxed);
    let (elapsed, admitted) = if threads == 1 {
        let mut picker = KeyPicker::new(seed, keys);
        let start = Instant::now();
        let admitted = run(contender, &mut picker, iters);
        (start.elapsed(), admitted)
    } else {
        let start_line = Barrier::new(threads as usize + 1);
        let admitted = AtomicU64::new(0);
        let start = std::thread::scope(|scope| {
            for t in 0..threads {
                let share = iters / threads + u64::from(t < iters % threads);
                let (start_line, admitted) = (&start_line, &admitted);
                scope.spawn(move || {
                    let mut picker = KeyPicker::new(seed + t, keys);
                    start_line.wait();
                    admitted.fetch_add(run(contender, &mut picker, share), Ordering::Relaxed);
                });
            }
            start_line.wait();
            Instant::now()
        });
        (start.elapsed(), admitted.into_inner())
    };
    tally.decided.fetch_add(iters, Ordering::Relaxed);
    tally.admitted.fetch_add(admitted, Ordering::Relaxed);
    elapsed
}

/// One workload: how many keys, how many threads.
#[derive(Clone, Copy)]
struct Workload {
    name: &'static str,
    keys: usize,
    threads: u64,
}

const WORKLOADS: [Workload; 4] = [
    Workload {
        name: "hot_key/1_thread",
        keys: 1,
        threads: 1,
    },
    Workload {
        name: "hot_key/2_threads",
        keys: 1,
        threads: 2,
    },
    Workload {
        name: "1m_keys/1_thread",
        keys: MANY_KEYS,
        threads: 1,
    },
    Workload {
        name: "1m_keys/2_threads",
        keys: MANY_KEYS,
        threads: 2,
    },
];

/// Benchmarks one contender on one workload. It is built only when the
/// filter selects it, since a million keys take a while to set up.
fn bench<C: Contender>(
    group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    workload: Workload,
    name: &str,
    build: impl FnOnce(usize) -> C,
) {
    let mut build = Some(build);
    let mut contender = None;
    let tally = Tally::default();
    group.bench_function(name, |b| {
        let contender = contender.get_or_insert_with(|| {
            let build = build.take().expect("built once");
            let contender = build(workload.keys);
            // Every key holds state before measuring, as in a store in steady use.
            for index in 0..workload.keys {
                black_box(contender.decide(index));
            }
            contender
        });
        b.iter_custom(|iters| measure(contender, workload.keys, workload.threads, iters, &tally));
    });
    if contender.is_some() {
        tally.report(&format!("{}/{name}", workload.name));
    }
}

/// Single-threaded on simulated clocks, tollgate gcra and governor must make
/// the same decisions: the quotas are equivalent, and the workload is the same.
fn check_equivalent_quotas() {
    let tollgate = Tollgate::simulated(Limits::Gcra(gcra_rate()), 1);
    let governor = GovernorKeyed::<_, RandomState>::simulated(1);
    let mut picker = KeyPicker::new(0, 1);
    for i in 0..100_000u64 {
        let index = picker.next();
        assert_eq!(
            tollgate.decide(index),
            governor.decide(index),
            "decision {i} differs between tollgate gcra and governor"
        );
        if i % TICK == TICK - 1 {
            tollgate.advance(TICK_MS);
            governor.advance(TICK_MS);
        }
    }
}

fn memory_store(c: &mut Criterion) {
    check_equivalent_quotas();
    let gcra = Limits::Gcra(gcra_rate());
    let token_bucket = Limits::TokenBucket(gcra_rate());
    let fixed_window = Limits::FixedWindow(window());
    for workload in WORKLOADS {
        let mut group = c.benchmark_group(workload.name);
        group.throughput(Throughput::Elements(1));
        let g = &mut group;
        bench(g, workload, "tollgate_gcra", |k| {
            Tollgate::simulated(gcra, k)
        });
        if workload.keys == 1 && workload.threads == 1 {
            let build = |k| TollgateAsync(Tollgate::simulated(gcra, k));
            bench(g, workload, "tollgate_gcra_async", build);
        }
        let build = |k| TollgateWithIds::new(Tollgate::simulated(gcra, k));
        bench(g, workload, "tollgate_gcra_request_ids", build);
        let build = |k| Tollgate::simulated(token_bucket, k);
        bench(g, workload, "tollgate_token_bucket", build);
        let build = |k| Tollgate::simulated(fixed_window, k);
        bench(g, workload, "tollgate_fixed_window", build);
        let build = GovernorKeyed::<_, RandomState>::simulated;
        bench(g, workload, "governor_gcra", build);
        let build = GovernorKeyed::<_, foldhash::quality::RandomState>::simulated;
        bench(g, workload, "governor_gcra_foldhash", build);
        let build = |k| Tollgate::system_clock(gcra, k);
        bench(g, workload, "tollgate_gcra_system_clock", build);
        let build = |k| Tollgate::system_clock(fixed_window, k);
        bench(g, workload, "tollgate_fixed_window_system_clock", build);
        let build = GovernorKeyed::default_clock;
        bench(g, workload, "governor_gcra_quanta_clock", build);
        bench(
            g,
            workload,
            "limitador_fixed_window",
            LimitadorInMemory::new,
        );
        group.finish();
    }
}

criterion_group!(benches, memory_store);
criterion_main!(benches);
