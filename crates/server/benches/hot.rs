//! What finding hot identities by traffic costs a decision: one stripe's
//! lock and a scan of its few candidates (crates/server/src/hot.rs), beside
//! the counter increment every decision already pays, in the same run.
//!
//!   cargo bench -p tollgate --bench hot

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use prometheus_client::metrics::counter::Counter;
use tollgate_core::Identity;
use tollgate_limiter::HotIdentities;

fn record(c: &mut Criterion) {
    let hot = HotIdentities::default();
    let policy = hot.policy("api", 0);
    let one = Identity::value("tenant-hot");
    let many: Vec<Identity> = (0..4096)
        .map(|i| Identity::value(&format!("tenant-{i}")))
        .collect();
    let counter = Counter::<u64>::default();
    let mut group = c.benchmark_group("hot");
    group.bench_function("baseline: the decision counter", |b| {
        b.iter(|| black_box(&counter).inc());
    });
    group.bench_function("record: one hot identity", |b| {
        b.iter(|| policy.record(black_box(&one), true, 1_000));
    });
    let mut i = 0;
    group.bench_function("record: 4,096 identities in turn", |b| {
        b.iter(|| {
            i = (i + 1) % many.len();
            policy.record(black_box(&many[i]), i % 8 != 0, 1_000);
        });
    });
    group.finish();
}

criterion_group!(benches, record);
criterion_main!(benches);
