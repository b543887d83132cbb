//! nginx's own access logs, written by the real nginx in front of the
//! example tollgate, made traces by `tollgate trace --from nginx-combined`
//! and replayed through the example's config: replay decides as `serve`
//! did (the login limit's sixth attempt refused), the keys are hashed, and
//! a log_format with quoted fields after combined's carries the export
//! cost a plain `combined` log cannot.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

use crate::harness::*;
use crate::support::tollgate_fed;

/// `tollgate ARGS...` with the example's variables, `stdin` fed in: its
/// exit code, stdout and stderr.
pub fn tollgate(args: &[&str], stdin: &[u8]) -> (Option<i32>, String, String) {
    tollgate_fed(args, example_env("nginx-tollgate.yaml"), stdin)
}

/// The log at `path` made a trace by the example's config: the trace, and
/// the count `trace` printed.
fn trace_of(path: &Path, extra: &[&str]) -> (String, String) {
    let config = example("nginx-tollgate.yaml");
    let mut args = vec![
        "trace",
        "--from",
        "nginx-combined",
        "--identity",
        "field:remote_addr",
        "--config",
        config.to_str().expect("a UTF-8 path"),
    ];
    args.extend_from_slice(extra);
    let log = std::fs::read(path).expect("nginx's access log");
    let (code, trace, stderr) = tollgate(&args, &log);
    assert_eq!(code, Some(0), "{stderr}");
    (trace, stderr)
}

/// The trace replayed through the example's config: each decision's
/// `allowed`, and the summary.
fn replay(trace: &str) -> (Vec<bool>, String) {
    let config = example("nginx-tollgate.yaml");
    let (code, decisions, summary) = tollgate(
        &[
            "replay",
            "--config",
            config.to_str().expect("a UTF-8 path"),
            "--summary",
        ],
        trace.as_bytes(),
    );
    assert_eq!(code, Some(0), "{summary}");
    let allowed = decisions
        .lines()
        .map(|line| {
            let decision: serde_json::Value = serde_json::from_str(line).expect("a decision");
            decision["allowed"].as_bool().expect("allowed")
        })
        .collect();
    (allowed, summary)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_access_logs_replay_as_tollgate_decided() {
    let stack = Stack::start().await;
    let nginx = SocketAddr::from((Ipv4Addr::LOCALHOST, stack.nginx.port));
    let mut statuses = Vec::new();
    for ip in [[127, 0, 0, 40]; 6].into_iter().chain([[127, 0, 0, 41]; 3]) {
        statuses.push(raw(ip, nginx, &post("/login", "")).await.0);
    }
    let key = "X-API-Key: sk_live_nginx_trace\r\n";
    statuses.push(
        raw([127, 0, 0, 42], nginx, &get("/api/orders", key))
            .await
            .0,
    );
    let export = format!("{key}X-Export-Rows-Thousands: 7\r\n");
    statuses.push(
        raw([127, 0, 0, 42], nginx, &get("/api/exports", &export))
            .await
            .0,
    );
    statuses.push(raw([127, 0, 0, 43], nginx, &get("/", "")).await.0);
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 200, 429, 200, 200, 200, 200, 200, 200]
    );

    // The example's own log, `combined`: every request, the harness's
    // readiness polls included, which no policy's `match` takes.
    let combined = stack.nginx.log_path("access.log");
    let logged = std::fs::read_to_string(&combined).expect("the access log");
    let polls = logged.matches("/.tollgate-test-ready").count() as u64;
    assert_eq!(logged.lines().count() as u64, 12 + polls, "{logged}");
    let (trace, counted) = trace_of(&combined, &[]);
    assert_eq!(
        counted,
        format!(
            "tollgate: {} lines read, 11 events written, {} matched no policy, 0 bad lines skipped, 0 earlier than the line before (written at its time)\n",
            12 + polls,
            1 + polls
        )
    );
    let events: Vec<serde_json::Value> = trace
        .lines()
        .map(|l| serde_json::from_str(l).expect("an event"))
        .collect();
    // Keys are hashed: no address, no API key, one key per address.
    for raw_value in ["127.0.0.4", "sk_live"] {
        assert!(!trace.contains(raw_value), "{trace}");
    }
    let keys: Vec<&str> = events
        .iter()
        .map(|e| {
            e["key"]
                .as_str()
                .or_else(|| e["checks"][0]["key"].as_str())
                .expect("a key")
        })
        .collect();
    assert!(keys.iter().all(|k| k.starts_with("hash:")), "{keys:?}");
    assert!(keys[..6].iter().all(|k| *k == keys[0]));
    assert!(keys[6..9].iter().all(|k| *k == keys[6]));
    assert_eq!(keys[9], keys[10]);
    let distinct: std::collections::BTreeSet<&str> = keys.iter().copied().collect();
    assert_eq!(distinct.len(), 3);
    // nginx logs whole seconds, in order.
    let times: Vec<u64> = events
        .iter()
        .map(|e| e["t_ms"].as_u64().expect("t_ms"))
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]) && times.iter().all(|t| t % 1000 == 0));
    // /api/exports is the API and an export: one line of two checks, the
    // export at its default cost (combined does not log the header).
    assert_eq!(
        events[10]["checks"],
        serde_json::json!([
            {"policy": "api", "key": keys[10], "cost": 1},
            {"policy": "exports", "key": keys[10], "cost": 1},
        ])
    );
    let (allowed, summary) = replay(&trace);
    assert_eq!(
        allowed,
        [
            true, true, true, true, true, false, true, true, true, true, true, true
        ]
    );
    assert_eq!(
        summary,
        "api: offered 2 (cost 2), admitted 2 (cost 2), rejected 0 (cost 0)\n\
         exports: offered 1 (cost 1), admitted 1 (cost 1), rejected 0 (cost 0)\n\
         login: offered 9 (cost 9), admitted 8 (cost 8), rejected 1 (cost 1)\n"
    );

    traced_log_costs_what_serve_charged(&stack.nginx.log_path("traced.log"));
}

/// The same requests in a log_format with the export cost and the host
/// quoted after combined's fields: the export costs what serve charged.
fn traced_log_costs_what_serve_charged(traced: &Path) {
    let (trace, _) = trace_of(
        traced,
        &["--nginx-fields", "http_x_export_rows_thousands,host"],
    );
    let last: serde_json::Value =
        serde_json::from_str(trace.lines().last().expect("events")).expect("an event");
    assert_eq!(last["checks"][1]["cost"], 7, "{trace}");
    let (allowed, summary) = replay(&trace);
    assert_eq!(allowed.iter().filter(|a| !**a).count(), 1);
    assert!(
        summary.contains("exports: offered 1 (cost 7), admitted 1 (cost 7), rejected 0 (cost 0)\n"),
        "{summary}"
    );
    plain_combined_reads_each_extra_field_as_a_bad_line(traced);
}

/// Read as plain combined, the extra fields are a bad line each, named by
/// number; skipped on request, with exit 3.
fn plain_combined_reads_each_extra_field_as_a_bad_line(traced: &Path) {
    let log = std::fs::read(traced).expect("the traced log");
    let config = example("nginx-tollgate.yaml");
    let (code, trace, stderr) = tollgate(
        &[
            "trace",
            "--from",
            "nginx-combined",
            "--identity",
            "field:remote_addr",
            "--config",
            config.to_str().expect("a UTF-8 path"),
            "--on-bad-line",
            "skip",
        ],
        &log,
    );
    assert_eq!((code, trace.as_str()), (Some(3), ""), "{stderr}");
    let lines = log.iter().filter(|b| **b == b'\n').count();
    let reported: Vec<&str> = stderr.lines().collect();
    assert_eq!(reported.len(), lines + 1, "{stderr}");
    let logged = String::from_utf8(log.clone()).expect("UTF-8");
    for (i, (line, logged)) in reported.iter().zip(logged.lines()).enumerate() {
        let host = if logged.contains("/.tollgate-test-ready") {
            "ready"
        } else {
            "shop.example"
        };
        let rows = if logged.contains("/api/exports") {
            "7"
        } else {
            "-"
        };
        assert_eq!(
            *line,
            format!(
                "tollgate: line {}: {} bytes more after the last field (8 fields named: pass --nginx-fields for quoted fields after combined's) (skipped)",
                i + 1,
                format!("\"{rows}\" \"{host}\"").len()
            )
        );
    }
    assert_eq!(
        reported[lines],
        format!(
            "tollgate: {lines} lines read, 0 events written, 0 matched no policy, {lines} bad lines skipped, 0 earlier than the line before (written at its time)"
        )
    );
}
