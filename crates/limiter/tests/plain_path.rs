//! A plain request on the memory store is decided without a future
//! (crate::now); the awaited path decides every other. The two must be
//! one limiter to whoever reads it: the same decisions, and the same
//! metrics to the last series (counters, degraded decisions, store
//! errors, the latency histogram, hot identities), through admissions,
//! rejections, batches, a full store answered by each failure mode, and
//! a plan without one.

use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use tollgate_limiter::{
    Backend, Check, Decided, Identity, Limiter, LimiterMetrics, Limits, ManualClock,
    MemoryStoreConfig, OnStoreFailure, Plan, Policy, Rate, Registry,
};

/// How the store keeps time: by the limiter's own clock, which then hands
/// the store the reading it dates the request by, or by a clock of its
/// own that tells the same times (the store reads that itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreClock {
    Limiters,
    Own,
}

/// A limiter over a memory store of two keys in one shard, so the third
/// limiting identity finds it full; its metrics and registry, and the
/// clocks to move (the limiter's, then the store's when it has its own).
fn small_limiter(
    store_clock: StoreClock,
) -> (
    Limiter,
    Arc<LimiterMetrics>,
    Registry,
    Vec<Arc<ManualClock>>,
) {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let mut registry = Registry::default();
    let metrics = Arc::new(LimiterMetrics::register(&mut registry, clock.clone()));
    let config = MemoryStoreConfig {
        max_keys: 2,
        shards: 1,
    };
    let mut clocks = vec![Arc::clone(&clock)];
    let store_clock = match store_clock {
        StoreClock::Limiters => Arc::clone(&clock),
        StoreClock::Own => Arc::new(ManualClock::new(1_000_000)),
    };
    if !Arc::ptr_eq(&store_clock, &clock) {
        clocks.push(Arc::clone(&store_clock));
    }
    let backends = vec![Backend::memory_with(config, store_clock)];
    let limiter = Limiter::new(backends, Arc::clone(&metrics), clock);
    (limiter, metrics, registry, clocks)
}

/// Three a minute, a burst of three, counted per policy.
fn plan(name: &str, mode: Option<OnStoreFailure>, metrics: &LimiterMetrics) -> Plan {
    let rate = Rate::new(3, 3, 60_000).expect("rate");
    let plan = Plan::new(Policy::new(name, Limits::TokenBucket(rate)), 0)
        .with_counters(metrics.policy_counters(name));
    match mode {
        Some(mode) => plan.with_failure_mode(mode),
        None => plan,
    }
}

/// One decision as the test compares it.
type Seen = (Vec<(bool, i64, Option<u64>)>, String, bool);

fn seen(decided: &Decided) -> Seen {
    let decisions = decided
        .decisions
        .iter()
        .map(|d| (d.allowed, d.remaining, d.retry_after_ms))
        .collect();
    (
        decisions,
        decided.by.name().to_owned(),
        decided.error.is_some(),
    )
}

/// The scenario, each request decided now (`now`) or awaited, on a store
/// keeping time by `store_clock`; what each answered, and the registry's
/// exposition after.
async fn play(now: bool, store_clock: StoreClock) -> (Vec<Seen>, String) {
    let (limiter, metrics, registry, clocks) = small_limiter(store_clock);
    let open = plan("open", Some(OnStoreFailure::FailOpen), &metrics);
    let closed = plan("closed", Some(OnStoreFailure::FailClosed), &metrics);
    let bare = plan("bare", None, &metrics);
    let id = Identity::value;
    let (acme, bob, carol, dave, erin, frank) = (
        id("acme"),
        id("bob"),
        id("carol"),
        id("dave"),
        id("erin"),
        id("frank"),
    );
    let requests: Vec<Vec<Check<'_>>> = vec![
        // Three admitted, the fourth rejected: acme now limits.
        vec![Check::new(&open, &acme, 1)],
        vec![Check::new(&open, &acme, 1)],
        vec![Check::new(&open, &acme, 1)],
        vec![Check::new(&open, &acme, 1)],
        // A batch one check of which refuses: nothing spent.
        vec![Check::new(&closed, &acme, 1), Check::new(&open, &acme, 1)],
        // Bob spends one of three: kept, but not limiting.
        vec![Check::new(&closed, &bob, 1)],
        // Carol spends all three, evicting bob: the store now holds only
        // limiting states.
        vec![Check::new(&open, &carol, 3)],
        // Full: each plan's failure mode answers, a plan without one is
        // left unanswered.
        vec![Check::new(&closed, &dave, 1)],
        vec![Check::new(&open, &erin, 1)],
        vec![Check::new(&bare, &frank, 1)],
        // A batch a full store refuses, by the strictest mode.
        vec![Check::new(&open, &erin, 1), Check::new(&closed, &dave, 1)],
        // 20 s on (below): acme has one unit back, its last.
        vec![Check::new(&open, &acme, 1)],
    ];
    let mut answers = Vec::new();
    for (at, checks) in requests.iter().enumerate() {
        if at == requests.len() - 1 {
            for clock in &clocks {
                clock.advance(20_000);
            }
        }
        let decided = if now {
            limiter
                .decide_now(checks, None, None)
                .expect("a memory-only request is decided now")
        } else {
            limiter.decide(checks).await
        };
        answers.push(seen(&decided));
    }
    let mut text = String::new();
    encode(&mut text, &registry).expect("the registry encodes");
    // A family's series come in its map's order, which differs between
    // two registries: compared as sorted lines.
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    (answers, lines.join("\n"))
}

#[tokio::test]
async fn a_plain_request_decided_now_answers_and_counts_as_the_awaited_path() {
    let (now, now_metrics) = play(true, StoreClock::Limiters).await;
    let (awaited, awaited_metrics) = play(false, StoreClock::Limiters).await;
    assert_eq!(now, awaited);
    assert_eq!(now_metrics, awaited_metrics);
    // A store on a clock of its own reads it itself: the same again.
    let (own, own_metrics) = play(true, StoreClock::Own).await;
    assert_eq!(own, awaited);
    assert_eq!(own_metrics, awaited_metrics);
    // And the scenario meant what it says.
    let verdicts: Vec<(bool, &str)> = now
        .iter()
        .map(|(d, by, _)| (d.iter().all(|d| d.0) && !d.is_empty(), by.as_str()))
        .collect();
    assert_eq!(
        verdicts,
        vec![
            (true, "shared"),
            (true, "shared"),
            (true, "shared"),
            (false, "shared"),
            (false, "shared"),
            (true, "shared"),
            (true, "shared"),
            (false, "fail_closed"),
            (true, "fail_open"),
            (false, "fail_open"),
            (false, "fail_closed"),
            (true, "shared"),
        ]
    );
    // Acme's last unit, dated by the time the limiter read.
    assert_eq!(now[11].0, vec![(true, 0, Some(0))]);
    // The plan without a failure mode was left without a decision.
    assert_eq!(now[9].0, Vec::new());
    // Counted as the scenario says: acme's three and carol, erin admitted
    // open and (in the batch a full store refused) by fail_open's answer;
    // the plan without a failure mode counted no verdict.
    for series in [
        "store_requests_total 12",
        "decision_duration_seconds_count 12",
        r#"decisions_total{policy="open",outcome="allowed"} 7"#,
        r#"decisions_total{policy="open",outcome="rejected"} 2"#,
        r#"decisions_total{policy="closed",outcome="allowed"} 2"#,
        r#"decisions_total{policy="closed",outcome="rejected"} 2"#,
        r#"decisions_total{policy="bare",outcome="allowed"} 0"#,
        r#"policy_degraded_decisions_total{policy="closed",path="fail_closed"} 2"#,
        r#"policy_degraded_decisions_total{policy="open",path="fail_open"} 1"#,
        r#"store_errors_total{role="local",kind="full"} 4"#,
    ] {
        assert!(
            now_metrics.lines().any(|l| l == series),
            "{series} in\n{now_metrics}"
        );
    }
}
