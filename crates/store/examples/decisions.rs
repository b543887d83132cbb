//! N keyed decisions in a loop, for counting instructions with callgrind
//! (the figure that does not move with a loaded machine's noise):
//!
//! ```text
//! cargo build --release -p tollgate-store --example decisions
//! valgrind --tool=callgrind --toggle-collect='*decisions*measured*' \
//!     target/release/examples/decisions tollgate-sim hot 1000000
//! ```
//!
//! Contenders: `tollgate-sim`, `tollgate-sys` (gcra on a `ManualClock` or
//! `SystemClock`), `governor-sim`, `governor-sys` (its keyed limiter on a
//! fake clock or quanta). Workloads: `hot` (one key) or `many` (1,000,000
//! keys, each decided once before measuring). Counts are per run; divide by N.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};
use tollgate_core::{Clock, Identity, Limits, ManualClock, Policy, Rate, SystemClock};
use tollgate_store::{Check, MemoryStore, MemoryStoreConfig};

const START_MS: u64 = 1_767_225_600_000;
const MANY_KEYS: usize = 1_000_000;

/// splitmix64 onto `0..keys`, as the criterion bench picks keys.
fn picker(keys: usize) -> impl FnMut() -> usize {
    let mut state = 0u64;
    move || {
        if keys <= 1 {
            return 0;
        }
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((u128::from(z) * keys as u128) >> 64) as usize
    }
}

/// The loop callgrind counts: `n` decisions, the simulated clock moving
/// 32 ms every 64 of them.
#[inline(never)]
fn measured(n: u64, decide: &mut dyn FnMut(usize) -> bool, advance: &dyn Fn(), keys: usize) -> u64 {
    let mut next = picker(keys);
    let mut admitted = 0;
    for i in 0..n {
        admitted += u64::from(black_box(decide(next())));
        if i % 64 == 63 {
            advance();
        }
    }
    admitted
}

fn tollgate(clock: Arc<dyn Clock>, manual: Option<Arc<ManualClock>>, keys: usize, n: u64) -> u64 {
    let rate = Rate::new(100, 1, 1).expect("a valid rate");
    let config = MemoryStoreConfig {
        max_keys: 2 * keys.max(1024),
        ..MemoryStoreConfig::default()
    };
    let store = MemoryStore::new(clock, config);
    let policy = Policy::new("bench", Limits::Gcra(rate));
    let identities: Vec<Identity> = (0..keys)
        .map(|i| Identity::value(&format!("tenant-{i}")))
        .collect();
    let mut decide = |index: usize| {
        let check = Check {
            policy: &policy,
            identity: &identities[index],
            cost: 1,
        };
        store.decide_now(check).is_ok_and(|d| d.allowed)
    };
    for index in 0..keys {
        black_box(decide(index));
    }
    let advance = || {
        if let Some(clock) = &manual {
            clock.advance(32);
        }
    };
    measured(n, &mut decide, &advance, keys)
}

fn governor_quota() -> Quota {
    Quota::with_period(Duration::from_millis(1))
        .expect("1 ms is a valid period")
        .allow_burst(NonZeroU32::new(100).expect("not zero"))
}

fn governor(simulated: bool, keys: usize, n: u64) -> u64 {
    let names: Vec<String> = (0..keys).map(|i| format!("tenant-{i}")).collect();
    if simulated {
        let clock = FakeRelativeClock::default();
        clock.advance(Duration::from_millis(START_MS));
        let limiter = RateLimiter::dashmap_with_clock(governor_quota(), clock.clone());
        let mut decide = |index: usize| limiter.check_key(&names[index]).is_ok();
        for index in 0..keys {
            black_box(decide(index));
        }
        let advance = || clock.advance(Duration::from_millis(32));
        measured(n, &mut decide, &advance, keys)
    } else {
        let limiter = RateLimiter::keyed(governor_quota());
        let mut decide = |index: usize| limiter.check_key(&names[index]).is_ok();
        for index in 0..keys {
            black_box(decide(index));
        }
        measured(n, &mut decide, &|| {}, keys)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage =
        "usage: decisions <tollgate-sim|tollgate-sys|governor-sim|governor-sys> <hot|many> <n>";
    let (Some(contender), Some(workload), Some(n)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let keys = if workload == "many" { MANY_KEYS } else { 1 };
    let n: u64 = n.parse().unwrap_or(1_000_000);
    let admitted = match contender.as_str() {
        "tollgate-sim" => {
            let clock = Arc::new(ManualClock::new(START_MS));
            tollgate(Arc::clone(&clock) as Arc<dyn Clock>, Some(clock), keys, n)
        }
        "tollgate-sys" => tollgate(Arc::new(SystemClock), None, keys, n),
        "governor-sim" => governor(true, keys, n),
        "governor-sys" => governor(false, keys, n),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    println!("{contender} {workload}: {admitted} of {n} admitted");
}
