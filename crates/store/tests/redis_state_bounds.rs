//! Fattening a key's state (issue 23): every decision's Redis work must be
//! bounded whatever a client sends. A sliding log holds at most
//! LOG_MAX_ENTRIES entries and its Lua decides exactly as the core on long
//! logs too; the other algorithms' states are a fixed number of integers.
//! Real redis-server processes, the memory store as the reference.

mod redis_support;

use std::collections::VecDeque;

use redis_support::{Reference, Rng, Topology};
use tollgate_core::{
    Identity, LOG_MAX_ENTRIES, Limits, LogState, Policy, Rate, State, Taken, Window,
};
use tollgate_store::{Check, RedisStore};

fn log(limit: u64, window_ms: u64) -> Limits {
    Limits::SlidingLog(Window::new(limit, window_ms).expect("a window"))
}

/// The one state key of `algorithm` on a standalone server, and its value.
fn state_of(topology: &Topology, algorithm: &str) -> (String, String) {
    let port = topology.ports()[0];
    let pattern = format!("*:{algorithm}:{{*");
    let keys = tollgate_testkit::cli(port, &["--scan", "--pattern", &pattern]).expect("scan");
    let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let value = tollgate_testkit::cli(port, &["get", keys[0]]).expect("get");
    (keys[0].to_owned(), value.trim_end_matches('\n').to_owned())
}

/// Entries in a sliding_log state string ("last;age:cost;age:cost...").
fn log_entries(state: &str) -> usize {
    state.matches(';').count()
}

/// The most entries of any log under `pattern`, each within the bound.
fn longest_log(topology: &Topology, pattern: &str, at: &str) -> usize {
    let port = topology.ports()[0];
    let keys = tollgate_testkit::cli(port, &["--scan", "--pattern", pattern]).expect("scan");
    let mut longest = 0;
    for key in keys.lines().filter(|k| !k.is_empty()) {
        let value = tollgate_testkit::cli(port, &["get", key]).expect("get");
        let n = log_entries(&value);
        assert!(n <= LOG_MAX_ENTRIES, "{at}: {key} holds {n} entries");
        longest = longest.max(n);
    }
    longest
}

/// Long logs (up to the 10,000 limit) amid takes, give-backs, peeks and a
/// clock stepping back: the Lua and the core answer alike at every step,
/// and no state in Redis ever holds more than LOG_MAX_ENTRIES entries.
#[tokio::test]
async fn long_sliding_logs_decide_in_lua_exactly_as_in_the_core_and_stay_bounded() {
    let topology = Topology::standalone();
    let policies = [
        log(10_000, 3_600_000),
        log(500, 60_000),
        log(300, 1_000),
        log(2_000, 100),
        log(90, 64),
    ];
    let mut longest = 0;
    for seed in 0..3u64 {
        let fat = Policy::new("fat", policies[seed as usize % 2]);
        let other = Policy::new(format!("p{seed}"), policies[2 + seed as usize]);
        longest = longest.max(long_trace(&topology, seed, &fat, &other).await);
    }
    // The traces did fill logs past the exact part.
    assert!(longest > 64, "longest log {longest}");
}

/// One seeded trace on `fat` and `other` (one identity); the longest log seen.
async fn long_trace(topology: &Topology, seed: u64, fat: &Policy, other: &Policy) -> usize {
    let mut longest = 0;
    let mut config = topology.config();
    config.prefix = format!("long{seed}");
    let store = topology.store_with(config).await;
    let reference = Reference::new();
    let mut rng = Rng::new(seed);
    let identity = Identity::value("victim");
    let mut takes: Vec<(u64, Taken)> = Vec::new();
    let mut t = 1_700_000_000_000 + rng.below(1_000_000);
    for i in 0..3_000 {
        let policy = if i % 4 == 3 { other } else { fat };
        let w = policy.limits().window_ms();
        match rng.below(1_000) {
            0..=969 => t += rng.below(6),
            970..=994 => t += rng.below(w / 8 + 1),
            995..=997 => t += rng.below(2 * w),
            _ => t = t.saturating_sub(rng.below(w)),
        }
        let limit = policy.limits().limit();
        let cost = match rng.below(100) {
            0..=9 => 0,
            10..=79 => 1,
            80..=96 => 1 + rng.below(40),
            _ => limit + 1,
        };
        let check = Check {
            policy,
            identity: &identity,
            cost,
        };
        let at = format!("seed {seed} step {i}: {policy:?} cost {cost} at {t}");
        match i % 5 {
            0 => {
                let want = reference.take(check, t);
                let got = store.take_at(check, t).await.expect("takes");
                assert_eq!(got, want, "{at}");
                if want.0.allowed && cost > 0 && policy.name() == "fat" {
                    takes.push((cost, want.1));
                }
            }
            1 if !takes.is_empty() => {
                let (taken_cost, taken) = takes.swap_remove(rng.below(takes.len() as u64) as usize);
                let back = Check {
                    policy,
                    identity: &identity,
                    cost: 1 + rng.below(taken_cost),
                };
                let want = reference.give_back(back, taken, t);
                let got = store
                    .give_back_at(back, taken, t)
                    .await
                    .expect("gives back");
                assert_eq!(got, want, "{at}: give back {} of {taken:?}", back.cost);
            }
            _ => {
                let want = reference.decide(check, t);
                let got = store.decide_at(check, t).await.expect("decides");
                assert_eq!(got, want, "{at}");
            }
        }
        if i % 25 == 0 {
            longest = longest.max(longest_log(topology, &format!("long{seed}:*"), &at));
        }
    }
    longest
}

/// A state an earlier version wrote (an exact entry per request, 5,000 of
/// them) is read whole once, answered as the core answers it, and written
/// back coalesced into one entry per bucket end.
#[tokio::test]
async fn an_old_unbounded_log_is_read_once_and_written_back_bounded() {
    let topology = Topology::standalone();
    let store = topology.store().await;
    let policy = Policy::new("fat", log(10_000, 3_600_000));
    let identity = Identity::value("victim");
    let check = |cost| Check {
        policy: &policy,
        identity: &identity,
        cost,
    };
    let t0: u64 = 1_700_000_000_000;
    store.decide_at(check(1), t0).await.expect("decides");
    let (key, _) = state_of(&topology, "sliding_log");
    // The old format: last_ms, then ";age:cost" per request, oldest first.
    let last = t0 + 4_999 * 7;
    let mut old = last.to_string();
    for i in 0..5_000u64 {
        old.push_str(&format!(";{}:1", last - (t0 + i * 7)));
    }
    tollgate_testkit::cli(topology.ports()[0], &["set", &key, &old, "px", "3600000"]).expect("set");
    let mut core = Some(State::SlidingLog(LogState {
        entries: (0..5_000u64)
            .map(|i| (t0 + i * 7, 1))
            .collect::<VecDeque<_>>(),
        counted: 5_000,
        last_ms: last,
    }));
    for (dt, cost) in [(1, 0), (2, 3), (40_000, 1), (120_000, 2)] {
        let want = policy.limits().decide(&mut core, last + dt, cost);
        let got = store
            .decide_at(check(cost), last + dt)
            .await
            .expect("decides");
        assert_eq!(got, want, "at +{dt} cost {cost}");
    }
    let (_, written) = state_of(&topology, "sliding_log");
    let Some(State::SlidingLog(core)) = core else {
        panic!("a log")
    };
    assert_eq!(log_entries(&written), core.entries.len());
    // The 5,000 old entries sit in one bucket (ending at t0 + 43750), and the
    // 3 admitted next in that bucket merge into it; the log is short again,
    // so later admissions are logged at their own ms.
    assert_eq!(
        core.entries.iter().copied().collect::<Vec<_>>(),
        vec![
            (t0 + 43_750, 5_003),
            (last + 40_000, 1),
            (last + 120_000, 2)
        ]
    );
}

/// A peek on a long log, or an admission that drops no entry, costs no
/// parse: the entries' ages count from the header's `ref`, which does not
/// move with the key's clock, so the call rewrites the header (`last_ms@
/// ref:count:counted`) and leaves the entries' text as it was (or appends).
#[tokio::test]
async fn a_peek_on_a_long_log_rewrites_its_header_and_not_its_entries() {
    let topology = Topology::standalone();
    let store = topology.store().await;
    let policy = Policy::new("fat", log(10_000, 3_600_000));
    let identity = Identity::value("victim");
    let check = |cost| Check {
        policy: &policy,
        identity: &identity,
        cost,
    };
    let t0: u64 = 1_700_000_000_000; // 30222222·56250 + 12500
    for i in 0..100 {
        assert!(
            store
                .decide_at(check(1), t0 + i * 1_000)
                .await
                .expect("decides")
                .allowed
        );
    }
    let (_, before) = state_of(&topology, "sliding_log");
    let (header, entries) = before.split_once(';').expect("entries");
    // 64 exact entries, then the 36 of t0 + 64 s … 99 s merged at their
    // bucket's end, t0 + 100000; ref is the clock of the call that wrote
    // the whole log (the first), the others appended or merged.
    assert_eq!(header, format!("{}@{t0}:65:100", t0 + 99_000));
    let d = store
        .decide_at(check(0), t0 + 120_000)
        .await
        .expect("peeks");
    assert_eq!(
        (d.allowed, d.remaining, d.reset_after_ms),
        (true, 9_900, 3_580_000)
    );
    let (_, after) = state_of(&topology, "sliding_log");
    assert_eq!(after, format!("{}@{t0}:65:100;{entries}", t0 + 120_000));
}

/// Thousands of decisions of varied costs and times, clocks stepping back
/// and far forward: the state string's length never passes `bound`.
async fn fatten(limits: Limits, algorithm: &str, bound: usize) -> usize {
    let topology = Topology::standalone();
    let store = topology.store().await;
    let policy = Policy::new("fat", limits);
    let identity = Identity::value("victim");
    let mut rng = Rng::new(7);
    let mut t = 1_700_000_000_000u64;
    let mut longest = 0;
    for i in 0..3_000 {
        match rng.below(1_000) {
            0..=899 => t += rng.below(5),
            900..=989 => t += rng.below(100_000),
            990..=997 => t = t.saturating_sub(rng.below(10_000)),
            _ => t += rng.below(10_000_000_000),
        }
        let cost = match rng.below(20) {
            0 => 0,
            1..=17 => 1,
            18 => rng.below(50),
            _ => rng.below(limits.limit() + 3),
        };
        store
            .decide_at(
                Check {
                    policy: &policy,
                    identity: &identity,
                    cost,
                },
                t,
            )
            .await
            .expect("decides");
        if i % 10 == 0 {
            let (_, state) = state_of(&topology, algorithm);
            assert!(
                state.len() <= bound,
                "step {i}: {state:?} is over {bound} bytes"
            );
            longest = longest.max(state.len());
        }
    }
    longest
}

/// Fixed-size states: a few integers, each below 2^53 (16 digits).
#[tokio::test]
async fn fattening_token_bucket_state_is_impossible_it_holds_three_integers() {
    let rate = Rate::new(1_000, 7, 3_000).expect("a rate");
    assert!(fatten(Limits::TokenBucket(rate), "token_bucket", 3 * 16 + 2).await > 0);
}

#[tokio::test]
async fn fattening_gcra_state_is_impossible_it_holds_one_integer_and_a_scale() {
    let rate = Rate::new(1_000, 7, 3_000).expect("a rate");
    assert!(fatten(Limits::Gcra(rate), "gcra", 5 * 16 + 4).await > 0);
}

#[tokio::test]
async fn fattening_fixed_window_state_is_impossible_it_holds_three_integers() {
    let window = Window::new(10_000, 60_000).expect("a window");
    assert!(fatten(Limits::FixedWindow(window), "fixed_window", 3 * 16 + 2).await > 0);
}

#[tokio::test]
async fn fattening_sliding_window_state_is_impossible_it_holds_four_integers() {
    let window = Window::new(10_000, 60_000).expect("a window");
    assert!(fatten(Limits::SlidingWindow(window), "sliding_window", 4 * 16 + 3).await > 0);
}

/// The sliding log's bound in bytes: LOG_MAX_ENTRIES entries of an age
/// (at most W + q, here 7 digits) and a cost (at most L, 5 digits).
#[tokio::test]
async fn fattening_sliding_log_state_is_bounded_by_its_entry_count() {
    let bound = 40 + LOG_MAX_ENTRIES * (1 + 8 + 1 + 5);
    let longest = fatten(log(10_000, 3_600_000), "sliding_log", bound).await;
    assert!(longest > 100, "{longest}");
}

fn _assert_store(_: &RedisStore) {}
