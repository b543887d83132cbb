//! A reload that changes a policy's `shards` (1 → 4 → 1) leaves every
//! exhausted identity exhausted, on all five algorithms, through a real
//! `tollgate serve` reloaded by SIGHUP, on the memory store and on a real
//! redis-server (docs/config.md, Shards: a change of `shards`).

mod support;

use std::path::Path;

use serde_json::Value;
use support::{TollgateProcess, check_json, metric, metrics_text};
use tollgate_testkit::RedisServer;

/// Every algorithm at 12 a day (3 a shard over 4): nothing comes back
/// while the test runs.
fn config(store: &str, shards: u16) -> String {
    let mut text = format!("server: {{watch_interval_ms: 0}}\nstore: {store}\npolicies:\n");
    for (name, limits) in [
        (
            "bucket",
            "algorithm: token_bucket, capacity: 12, refill: {tokens: 12, per: 1d}",
        ),
        (
            "gcra",
            "algorithm: gcra, capacity: 12, refill: {tokens: 12, per: 1d}",
        ),
        ("fixed", "algorithm: fixed_window, limit: 12, window: 1d"),
        (
            "sliding",
            "algorithm: sliding_window, limit: 12, window: 1d",
        ),
        ("log", "algorithm: sliding_log, limit: 12, window: 1d"),
    ] {
        text.push_str(&format!(
            "  - {{name: {name}, {limits}, shards: {shards}}}\n"
        ));
    }
    text
}

const POLICIES: [&str; 5] = ["bucket", "gcra", "fixed", "sliding", "log"];

async fn check(client: &reqwest::Client, base: &str, policy: &str, key: &str) -> Value {
    check_json(
        client,
        base,
        format!(r#"{{"policy":"{policy}","key":"{key}"}}"#),
    )
    .await
}

/// Spends `key`'s 12 on every policy: 12 admitted, then a rejection.
async fn exhaust(client: &reqwest::Client, base: &str, key: &str) {
    for policy in POLICIES {
        for i in 0..12 {
            let answer = check(client, base, policy, key).await;
            assert_eq!(answer["allowed"], true, "{policy} {key} unit {i}: {answer}");
        }
        let answer = check(client, base, policy, key).await;
        assert_eq!(answer["allowed"], false, "{policy} {key}: {answer}");
    }
}

/// Every policy rejects `key` with nothing remaining, its limit `limit`.
async fn still_exhausted(client: &reqwest::Client, base: &str, key: &str, limit: u64, when: &str) {
    for policy in POLICIES {
        let answer = check(client, base, policy, key).await;
        assert_eq!(
            (&answer["allowed"], &answer["remaining"], &answer["limit"]),
            (&Value::from(false), &Value::from(0), &Value::from(limit)),
            "{when}: {policy} {key} got a fresh budget: {answer}"
        );
    }
}

/// Rewrites the config with `shards` and reloads it by SIGHUP; waits
/// (bounded) until the server counts the `reloads`th reload.
async fn reload(
    server: &TollgateProcess,
    client: &reqwest::Client,
    path: &Path,
    (store, shards): (&str, u16),
    reloads: f64,
) {
    std::fs::write(path, config(store, shards)).expect("write config");
    server.signal("HUP");
    for _ in 0..500 {
        let text = metrics_text(client, &server.base).await;
        if metric(&text, "tollgate_config_reloads_total") == Some(reloads) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the reload to {shards} shards was not applied");
}

async fn one_four_one(store: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, config(store, 1)).expect("write config");
    let server = TollgateProcess::spawn(&path, &[]);
    let client = reqwest::Client::new();
    let base = server.base.clone();
    exhaust(&client, &base, "tenant-a").await;
    reload(&server, &client, &path, (store, 4), 1.0).await;
    still_exhausted(&client, &base, "tenant-a", 3, "1 → 4").await;
    exhaust(&client, &base, "tenant-b").await;
    reload(&server, &client, &path, (store, 1), 2.0).await;
    still_exhausted(&client, &base, "tenant-a", 12, "1 → 4 → 1").await;
    still_exhausted(&client, &base, "tenant-b", 12, "4 → 1").await;
}

#[tokio::test]
async fn a_shards_reload_gives_no_exhausted_identity_its_budget_back_on_the_memory_store() {
    one_four_one("{memory: {}}").await;
}

#[tokio::test]
async fn a_shards_reload_gives_no_exhausted_identity_its_budget_back_on_redis() {
    let redis = RedisServer::start().expect("redis-server");
    one_four_one(&format!("{{redis: {{url: \"{}\"}}}}", redis.url())).await;
}
