//! The cost of one decision per algorithm, in the core alone: no store, no
//! lock, no hashing. Each algorithm decides on a state in steady use while
//! time advances 1 ms per decision against a limit of 500 per second, so
//! after the first burst about half the decisions admit and half reject
//! (the setup prints the share it saw).
//!
//! Run: `cargo bench -p tollgate-core --bench algorithms`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tollgate_core::{Limits, Rate, State, Window};

/// Where the simulated clock starts: a realistic Unix time in ms.
const START_MS: u64 = 1_767_225_600_000;
/// Decisions run before measuring, so the state is in steady use.
const WARM_UP_DECISIONS: u64 = 20_000;

fn contenders() -> Vec<(&'static str, Limits)> {
    let rate = Rate::new(500, 500, 1_000).expect("500 per second is a valid rate");
    let window = Window::new(500, 1_000).expect("500 per second is a valid window");
    vec![
        ("token_bucket", Limits::TokenBucket(rate)),
        ("gcra", Limits::Gcra(rate)),
        ("fixed_window", Limits::FixedWindow(window)),
        ("sliding_window", Limits::SlidingWindow(window)),
        ("sliding_log", Limits::SlidingLog(window)),
    ]
}

/// One key's state and its clock, stepping 1 ms per decision.
struct Steady {
    limits: Limits,
    state: Option<State>,
    now_ms: u64,
}

impl Steady {
    fn new(limits: Limits) -> Self {
        let mut steady = Self {
            limits,
            state: None,
            now_ms: START_MS,
        };
        for _ in 0..WARM_UP_DECISIONS {
            steady.decide();
        }
        steady
    }

    #[inline]
    fn decide(&mut self) -> bool {
        self.now_ms += 1;
        let decision =
            black_box(&self.limits).decide(&mut self.state, black_box(self.now_ms), black_box(1));
        black_box(decision).allowed
    }
}

fn algorithms(c: &mut Criterion) {
    let mut group = c.benchmark_group("decide");
    group.throughput(Throughput::Elements(1));
    for (name, limits) in contenders() {
        let mut steady = Steady::new(limits);
        let sample = 100_000;
        let admitted = (0..sample).filter(|_| steady.decide()).count();
        eprintln!(
            "decide/{name}: {:.1}% of decisions admitted in steady use",
            100.0 * admitted as f64 / sample as f64
        );
        group.bench_function(name, |b| b.iter(|| steady.decide()));
    }
    group.finish();
}

criterion_group!(benches, algorithms);
criterion_main!(benches);
