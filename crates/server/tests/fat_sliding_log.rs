//! Issue 23, "the limits hold under attack": one identity fattens its
//! sliding_log to the limit's maximum, then floods it with peeks and
//! decisions. A log's parse is bounded (docs/design.md §3), so Redis stays
//! fast, the store's circuit stays closed, and an unrelated `fail_open`
//! login policy keeps its limit exactly. A real `tollgate serve` process
//! over a real redis-server.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;
use support::{TollgateProcess, check_json, metric, metrics_text};
use tollgate_core::LOG_MAX_ENTRIES;
use tollgate_testkit::{RedisServer, cli};

/// A peek or decision flood: 30 peeking clients and 10 deciding ones.
const PEEKERS: usize = 30;
const DECIDERS: usize = 10;
/// Entries an earlier version let the attacker keep (one per request).
const OLD_ENTRIES: u64 = 8_000;
/// Requests the attacker then has admitted, at distinct ms.
const ADMITTED: u64 = 1_000;

fn config(redis_url: &str) -> String {
    format!(
        "server: {{watch_interval_ms: 0}}\n\
         store:\n  redis: {{url: \"{redis_url}\", timeout: 250ms}}\n\
         policies:\n\
         \x20 - {{name: export, algorithm: sliding_log, limit: 10000, window: 1h, on_store_failure: fail_open}}\n\
         \x20 - {{name: login, algorithm: sliding_window, limit: 5, window: 1h, on_store_failure: fail_open}}\n"
    )
}

/// The store's clock (Redis TIME) in ms.
fn redis_ms(port: u16) -> u64 {
    let time = cli(port, &["time"]).expect("TIME");
    let mut parts = time
        .lines()
        .map(|l| l.trim().parse::<u64>().expect("digits"));
    let (s, us) = (parts.next().expect("s"), parts.next().expect("us"));
    s * 1_000 + us / 1_000
}

/// The attacker's one sliding_log key and its state.
fn fat_state(port: u16) -> (String, String) {
    let keys = cli(port, &["--scan", "--pattern", "*:export:sliding_log:*"]).expect("scan");
    let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let state = cli(port, &["get", keys[0]]).expect("get");
    (keys[0].to_owned(), state.trim_end().to_owned())
}

async fn check(client: &reqwest::Client, base: &str, policy: &str, key: &str, cost: u64) -> Value {
    check_json(
        client,
        base,
        format!(r#"{{"policy":"{policy}","key":"{key}","cost":{cost}}}"#),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fat_sliding_log_costs_redis_a_bounded_parse_and_the_breaker_stays_closed_for_a_victims_login()
 {
    let redis = RedisServer::start().expect("redis-server");
    let port = redis.port();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, config(&redis.url())).expect("write config");
    let process = TollgateProcess::spawn(&path, &[]);
    let base = Arc::new(process.base.clone());
    let client = reqwest::Client::new();

    // The fattening. First the log an earlier version kept: one entry per
    // request, 8,000 of them 300 ms apart over the last 40 minutes.
    assert_eq!(
        check(&client, &base, "export", "attacker", 1).await["allowed"],
        true
    );
    let (key, _) = fat_state(port);
    let now = redis_ms(port);
    let mut old = now.to_string();
    for i in (0..OLD_ENTRIES).rev() {
        old.push_str(&format!(";{}:1", i * 300));
    }
    cli(port, &["set", &key, &old, "px", "3700000"]).expect("set");
    // Then a thousand more admitted, at distinct ms, four clients at once.
    let admitted = Arc::new(AtomicU64::new(0));
    let fatteners: Vec<_> = (0..4)
        .map(|_| {
            let (client, base, admitted) = (client.clone(), base.clone(), admitted.clone());
            tokio::spawn(async move {
                for _ in 0..ADMITTED / 4 {
                    let answer = check(&client, &base, "export", "attacker", 1).await;
                    assert_eq!(answer.get("degraded"), None, "{answer}");
                    if answer["allowed"] == true {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
        })
        .collect();
    for f in fatteners {
        f.await.expect("fattener");
    }
    assert_eq!(admitted.load(Ordering::Relaxed), ADMITTED);
    let answer = check(&client, &base, "export", "attacker", 0).await;
    // (The SET replaced the first request's entry.)
    assert_eq!(answer["remaining"], 10_000 - OLD_ENTRIES - ADMITTED);

    // The flood: 40 clients peeking and deciding on the fat log for 3 s,
    // while the victim logs in now and then.
    let stop = Arc::new(AtomicBool::new(false));
    let flood: Vec<_> = (0..PEEKERS + DECIDERS)
        .map(|i| {
            let (client, base, stop) = (client.clone(), base.clone(), stop.clone());
            let cost = u64::from(i >= PEEKERS);
            tokio::spawn(async move {
                let mut calls = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let answer = check(&client, &base, "export", "attacker", cost).await;
                    assert_eq!(answer.get("degraded"), None, "{answer}");
                    calls += 1;
                }
                calls
            })
        })
        .collect();
    let mut victim_admitted = 0;
    for _ in 0..60 {
        let answer = check(&client, &base, "login", "victim", 1).await;
        assert_eq!(answer.get("degraded"), None, "the victim's login: {answer}");
        if answer["allowed"] == true {
            victim_admitted += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut flood_calls = 0;
    for task in flood {
        flood_calls += task.await.expect("flood client");
    }
    assert!(flood_calls > 0);
    assert_eq!(victim_admitted, 5, "the login limit holds");

    let text = metrics_text(&client, &base).await;
    assert_eq!(
        metric(
            &text,
            r#"tollgate_store_circuit_state{role="global",state="closed"}"#
        ),
        Some(1.0),
        "{text}"
    );
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tollgate_store_errors_total{") && !l.ends_with(" 0"))
        .collect();
    assert_eq!(errors, Vec::<&str>::new(), "no store call failed");
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("tollgate_degraded_decisions_total{")),
        "no decision degraded:\n{text}"
    );

    // The fat log's state: a header (`last_ms@ref:count:counted`, at most
    // 40 bytes) and at most LOG_MAX_ENTRIES entries of an age (at most 7
    // digits, or 8 with a sign) and a cost (at most 5 digits).
    let (_, state) = fat_state(port);
    let entries = state.matches(';').count();
    assert!(entries <= LOG_MAX_ENTRIES, "{entries} entries");
    let bound = 40 + LOG_MAX_ENTRIES * (1 + 8 + 1 + 5);
    assert!(state.len() <= bound, "{} bytes, over {bound}", state.len());
    eprintln!(
        "fat log: {entries} entries, {} bytes; {flood_calls} flood calls",
        state.len()
    );
}
