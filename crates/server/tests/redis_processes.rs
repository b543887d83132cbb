//! Several `tollgate serve` processes sharing one Redis (standalone or a
//! 3-master Cluster) admit exactly the limit between them.

mod support;

use std::sync::Arc;

use support::TollgateProcess;
use tollgate_testkit::{RedisCluster, RedisServer};

fn config(store: &str, capacity: u64) -> String {
    format!(
        "server: {{watch_interval_ms: 0}}\nstore:\n  redis:\n    timeout: 10s\n{store}\npolicies:\n  - name: shared\n    algorithm: gcra\n    capacity: {capacity}\n    refill: {{ tokens: 1, per: 1h }}\n  - name: window\n    algorithm: sliding_window\n    limit: {capacity}\n    window: 1h\n"
    )
}

// The store timeout is generous: these tests are about exactness under
// contention on a shared, loaded machine, not latency.

/// Requests in flight at once from the test's one address: below
/// `server.max_connections_per_peer` (1,024) with room for the previous
/// burst's connections, which the servers may not have seen close yet.
const IN_FLIGHT: usize = 600;

/// `requests` /v1/check calls spread over `processes`, all on one key and
/// `IN_FLIGHT` at a time; returns how many were admitted.
async fn hammer(processes: &[TollgateProcess], policy: &str, requests: usize) -> usize {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(IN_FLIGHT)
        .build()
        .expect("client");
    let body = Arc::new(format!(r#"{{"policy":"{policy}","key":"one-key"}}"#));
    let in_flight = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..requests {
        let url = format!("{}/v1/check", processes[i % processes.len()].base);
        let (client, body) = (client.clone(), Arc::clone(&body));
        let permit = Arc::clone(&in_flight);
        tasks.spawn(async move {
            let _permit = permit.acquire_owned().await.expect("semaphore");
            let r = client
                .post(url)
                .body(body.as_str().to_owned())
                .send()
                .await
                .expect("request");
            let status = r.status();
            let v: serde_json::Value = r.json().await.expect("json");
            assert_eq!(status, 200, "{v}");
            v["allowed"] == true
        });
    }
    let mut admitted = 0;
    while let Some(ok) = tasks.join_next().await {
        admitted += usize::from(ok.expect("task"));
    }
    admitted
}

fn three(config_text: &str, dir: &tempfile::TempDir) -> Vec<TollgateProcess> {
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, config_text).expect("write");
    (0..3).map(|_| TollgateProcess::spawn(&path, &[])).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_processes_on_one_redis_admit_exactly_the_capacity() {
    let redis = RedisServer::start().expect("redis-server");
    let dir = tempfile::tempdir().expect("dir");
    let store = format!("    url: {}", redis.url());
    let processes = three(&config(&store, 1), &dir);
    assert_eq!(hammer(&processes, "shared", 300).await, 1);
    assert_eq!(hammer(&processes, "window", 300).await, 1);
    drop(processes);
    let dir = tempfile::tempdir().expect("dir");
    let processes = three(
        &config(&store.replace("url", "prefix: big\n    url"), 1000),
        &dir,
    );
    assert_eq!(hammer(&processes, "shared", 3000).await, 1000);
    assert_eq!(hammer(&processes, "window", 3000).await, 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_processes_on_a_redis_cluster_admit_exactly_the_capacity() {
    let cluster = RedisCluster::start(3).expect("redis cluster");
    let nodes = cluster
        .urls()
        .iter()
        .map(|u| format!("      - {u}"))
        .collect::<Vec<_>>()
        .join("\n");
    let store = format!("    cluster:\n{nodes}");
    let dir = tempfile::tempdir().expect("dir");
    let processes = three(&config(&store, 1), &dir);
    assert_eq!(hammer(&processes, "shared", 300).await, 1);
    drop(processes);
    let dir = tempfile::tempdir().expect("dir");
    let processes = three(
        &config(
            &store.replace("cluster:", "prefix: big\n    cluster:"),
            1000,
        ),
        &dir,
    );
    assert_eq!(hammer(&processes, "shared", 3000).await, 1000);
    assert_eq!(hammer(&processes, "window", 3000).await, 1000);
}
