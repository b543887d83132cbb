//! `/metrics` as scrapers expect it, read from a real `tollgate serve`:
//! since-start counts are counters named `_total`, the build and the
//! process are described, HTTP requests are counted by route template and
//! status, and series that would describe nothing (a memory-only server's
//! circuit and store latency, a scope's region without regions) are not
//! exported.

mod support;

use support::{TollgateProcess, metric, metrics_text};
use tollgate_testkit::RedisServer;

/// Each `# TYPE` line: the family name and its type.
fn types(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| (name.to_owned(), kind.to_owned()))
        .collect()
}

fn type_of(text: &str, name: &str) -> Option<String> {
    types(text)
        .into_iter()
        .find_map(|(n, kind)| (n == name).then_some(kind))
}

/// A field of `/proc/PID/stat` (1-based, as proc(5) numbers them).
fn stat_field(pid: u32, n: usize) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after = &stat[stat.rfind(')').expect("a name") + 1..];
    after
        .split_ascii_whitespace()
        .nth(n - 3)
        .expect("field")
        .parse()
        .expect("a number")
}

async fn post(client: &reqwest::Client, base: &str, body: &str) -> u16 {
    client
        .post(format!("{base}/v1/check"))
        .body(body.to_owned())
        .send()
        .await
        .expect("POST")
        .status()
        .as_u16()
}

/// The process series say what /proc says of the same process: its
/// threads, its start time and its open-files limit.
fn assert_process_series_match_proc(text: &str, pid: u32) {
    assert_eq!(
        metric(text, "process_threads"),
        Some(stat_field(pid, 20) as f64)
    );
    let boot: u64 = std::fs::read_to_string("/proc/stat")
        .expect("/proc/stat")
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .expect("btime")
        .trim()
        .parse()
        .expect("a number");
    assert_eq!(
        metric(text, "process_start_time_seconds"),
        Some(boot as f64 + stat_field(pid, 22) as f64 / 100.0)
    );
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let soft: f64 = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|l| l.split_ascii_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("Max open files");
    assert_eq!(metric(text, "process_max_fds"), Some(soft));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_server_exports_counters_build_process_and_http_series() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(
        &path,
        "server: {watch_interval_ms: 0}\npolicies:\n  - {name: api, algorithm: fixed_window, limit: 2, window: 1h}\n",
    )
    .expect("write config");
    let process = TollgateProcess::spawn(&path, &[]);
    let client = reqwest::Client::new();
    let base = &process.base;
    let statuses = [
        post(&client, base, r#"{"policy":"api","key":"a"}"#).await,
        post(&client, base, r#"{"policy":"api","key":"a"}"#).await,
        post(&client, base, r#"{"policy":"api","key":"a"}"#).await,
        post(&client, base, r#"{"policy":"nope","key":"a"}"#).await,
        client
            .get(format!("{base}/no/such/page?x=1"))
            .send()
            .await
            .expect("GET")
            .status()
            .as_u16(),
    ];
    // /v1/check answers a rejection 200 (`allowed: false`).
    assert_eq!(statuses, [200, 200, 200, 404, 404]);
    let text = metrics_text(&client, base).await;

    for (name, kind) in [
        ("tollgate_build_info", "gauge"),
        ("tollgate_store_evictions", "counter"),
        ("tollgate_store_keys", "gauge"),
        ("tollgate_store_up", "gauge"),
        ("tollgate_http_requests", "counter"),
        ("tollgate_http_request_duration_seconds", "histogram"),
        ("process_cpu_seconds", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_virtual_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_max_fds", "gauge"),
        ("process_threads", "gauge"),
        ("process_start_time_seconds", "gauge"),
    ] {
        assert_eq!(
            type_of(&text, name).as_deref(),
            Some(kind),
            "{name}\n{text}"
        );
    }
    let version = env!("CARGO_PKG_VERSION");
    for (series, value) in [
        (
            format!(r#"tollgate_build_info{{version="{version}"}}"#),
            1.0,
        ),
        (
            r#"tollgate_store_evictions_total{role="local"}"#.to_owned(),
            0.0,
        ),
        (r#"tollgate_store_keys{role="local"}"#.to_owned(), 1.0),
        (r#"tollgate_store_up{role="local"}"#.to_owned(), 1.0),
        // The route template and the status; the scrape itself is counted
        // once it has answered.
        (
            r#"tollgate_http_requests_total{endpoint="/v1/check",status="200"}"#.to_owned(),
            3.0,
        ),
        (
            r#"tollgate_http_requests_total{endpoint="/v1/check",status="404"}"#.to_owned(),
            1.0,
        ),
        (
            r#"tollgate_http_requests_total{endpoint="unmatched",status="404"}"#.to_owned(),
            1.0,
        ),
        (
            r#"tollgate_http_request_duration_seconds_count{endpoint="/v1/check"}"#.to_owned(),
            4.0,
        ),
        (
            r#"tollgate_http_request_duration_seconds_count{endpoint="unmatched"}"#.to_owned(),
            1.0,
        ),
    ] {
        assert_eq!(metric(&text, &series), Some(value), "{series}\n{text}");
    }
    let http_series = text
        .lines()
        .filter(|l| l.starts_with("tollgate_http_requests_total{"))
        .count();
    assert_eq!(http_series, 3, "{text}");
    assert!(
        !text.contains("/no/such/page"),
        "a raw path became a label:\n{text}"
    );

    assert_process_series_match_proc(&text, process.child.id());

    // Renamed since-start counts keep no old name; a memory-only server
    // has no circuit, store latency, errors or cache series, and no
    // regions: no scope_limit.
    for absent in [
        "\ntollgate_store_evictions ",
        "tollgate_rejected_cache_answers",
        "tollgate_store_script_calls",
        "tollgate_store_circuit_state",
        "tollgate_store_call_duration_seconds",
        "tollgate_store_errors",
        "tollgate_scope_limit",
    ] {
        assert!(!text.contains(absent), "{absent} exported:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_server_exports_its_since_start_counts_as_counters() {
    let redis = RedisServer::start().expect("redis-server");
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(
        &path,
        format!(
            "server: {{watch_interval_ms: 0}}\nstore: {{redis: {{url: \"{}\"}}}}\npolicies:\n  - {{name: api, algorithm: fixed_window, limit: 1, window: 1h}}\n",
            redis.url()
        ),
    )
    .expect("write config");
    let process = TollgateProcess::spawn(&path, &[]);
    let client = reqwest::Client::new();
    let base = &process.base;
    // One admitted, one rejected by the store, then answered from the
    // rejected-until cache.
    let statuses = [
        post(&client, base, r#"{"policy":"api","key":"a"}"#).await,
        post(&client, base, r#"{"policy":"api","key":"a"}"#).await,
        post(&client, base, r#"{"policy":"api","key":"a"}"#).await,
    ];
    assert_eq!(statuses, [200, 200, 200]);
    let text = metrics_text(&client, base).await;
    for (name, kind) in [
        ("tollgate_rejected_cache_answers", "counter"),
        ("tollgate_store_script_calls", "counter"),
        ("tollgate_store_evictions", "counter"),
        ("tollgate_store_errors", "counter"),
        ("tollgate_store_circuit_state", "gauge"),
        ("tollgate_store_call_duration_seconds", "histogram"),
    ] {
        assert_eq!(
            type_of(&text, name).as_deref(),
            Some(kind),
            "{name}\n{text}"
        );
    }
    for (series, value) in [
        (
            r#"tollgate_rejected_cache_answers_total{role="global"}"#,
            1.0,
        ),
        (r#"tollgate_store_script_calls_total{role="global"}"#, 2.0),
        (
            r#"tollgate_store_circuit_state{role="global",state="closed"}"#,
            1.0,
        ),
        (
            r#"tollgate_store_circuit_state{role="global",state="open"}"#,
            0.0,
        ),
        (
            r#"tollgate_store_circuit_state{role="global",state="half_open"}"#,
            0.0,
        ),
    ] {
        assert_eq!(metric(&text, series), Some(value), "{series}\n{text}");
    }
}
