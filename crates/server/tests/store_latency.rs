//! Store latency is measured in microseconds on the monotonic clock
//! (docs/metrics.md, `tollgate_store_call_duration_seconds`): a call to a
//! real redis-server on loopback takes well under a millisecond, and is
//! observed as what it took, not rounded down to a whole millisecond (which
//! read every such call as exactly 0).

mod support;

use support::{TollgateProcess, check_json, metric, metrics_text};
use tollgate_testkit::RedisServer;

const CALLS: u64 = 50;

/// The histogram's buckets as (upper bound in s, cumulative count).
fn buckets(text: &str, name: &str) -> Vec<(f64, u64)> {
    let prefix = format!("{name}_bucket{{le=\"");
    text.lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .map(|rest| {
            let (le, count) = rest
                .split_once("\",role=\"global\"} ")
                .expect("a bucket line of the global store");
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().expect("a bound")
            };
            (le, count.trim().parse().expect("a count"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_millisecond_store_call_is_observed_in_microseconds_not_as_zero() {
    let redis = RedisServer::start().expect("redis-server");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(
        &path,
        format!(
            "server: {{watch_interval_ms: 0}}\nstore:\n  redis: {{url: \"{}\", rejected_cache: 0}}\npolicies:\n  - {{name: api, algorithm: fixed_window, limit: 1000, window: 1h}}\n",
            redis.url()
        ),
    )
    .expect("write config");
    let process = TollgateProcess::spawn(&path, &[]);
    let client = reqwest::Client::new();
    for i in 0..CALLS {
        let answer = check_json(
            &client,
            &process.base,
            format!(r#"{{"policy":"api","key":"tenant-{i}"}}"#),
        )
        .await;
        assert_eq!(
            (&answer["allowed"], answer.get("degraded")),
            (&serde_json::Value::Bool(true), None),
            "decided by the store: {answer}"
        );
    }

    let text = metrics_text(&client, &process.base).await;
    let name = "tollgate_store_call_duration_seconds";
    assert_eq!(
        metric(&text, &format!("{name}_count{{role=\"global\"}}")),
        Some(CALLS as f64),
        "one store call a decision:\n{text}"
    );
    let buckets = buckets(&text, name);
    let within = |le: f64| {
        buckets
            .iter()
            .find(|(bound, _)| *bound == le)
            .map(|(_, n)| *n)
            .unwrap_or_else(|| panic!("no bucket le={le}: {buckets:?}"))
    };
    // A Redis call takes more than 50 µs (a loopback round trip and a
    // script): none is observed below that, where a call measured in whole
    // milliseconds lands as 0 ...
    assert_eq!(within(0.000_05), 0, "calls observed as 0: {buckets:?}");
    // ... and every call is observed as what it took, to the µs: in whole
    // milliseconds the sum would be a whole number of them, however loaded
    // the machine (a µs sum of 50 calls lands on a whole ms 1 time in 1,000;
    // the bucket above, empty, rules out whole ms on its own whenever a
    // call took under one).
    let sum_us = metric(&text, &format!("{name}_sum{{role=\"global\"}}"))
        .expect("the histogram's sum")
        * 1e6;
    assert!(
        (sum_us - sum_us.round()).abs() < 0.01,
        "the sum is not whole µs: {sum_us}"
    );
    let fraction_of_a_ms = sum_us.round() as u64 % 1_000;
    assert!(
        fraction_of_a_ms != 0 || within(0.001) == 0,
        "calls under a millisecond were observed in whole milliseconds: {buckets:?}, sum {sum_us} µs"
    );
}
