//! The Redis store in operation, on real redis-server processes: many
//! instances on one key admit exactly the limit, every key expires, and
//! decisions survive SCRIPT FLUSH, a restart and a pause.

mod redis_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redis_support::Topology;
use tollgate_core::{Identity, Limits, Policy, Rate, Window};
use tollgate_store::{Check, RedisStore, Store, StoreError};

const INSTANCES: usize = 3;
const CLIENTS: usize = 300;

fn hourly(name: &str, limits: fn(u64) -> Limits, capacity: u64) -> Policy {
    Policy::new(name, limits(capacity))
}

fn bucket(capacity: u64) -> Limits {
    Limits::TokenBucket(Rate::new(capacity, 1, 3_600_000).expect("valid"))
}
fn gcra(capacity: u64) -> Limits {
    Limits::Gcra(Rate::new(capacity, 1, 3_600_000).expect("valid"))
}
fn log(limit: u64) -> Limits {
    Limits::SlidingLog(Window::new(limit, 86_400_000).expect("valid"))
}

/// `requests` decisions of cost 1 on one key from `CLIENTS` tasks spread
/// over `INSTANCES` stores (as many tollgate processes); returns admissions.
async fn admitted(topology: &Topology, policy: Policy, requests: usize) -> u64 {
    let mut stores = Vec::new();
    for _ in 0..INSTANCES {
        stores.push(topology.store().await);
    }
    let policy = Arc::new(policy);
    let identity = Arc::new(Identity::value("one-hot-key"));
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..CLIENTS {
        let store: RedisStore = stores[client % INSTANCES].clone();
        let (policy, identity, admitted) = (policy.clone(), identity.clone(), admitted.clone());
        let share = requests / CLIENTS + usize::from(client < requests % CLIENTS);
        tasks.spawn(async move {
            for _ in 0..share {
                let check = Check {
                    policy: &policy,
                    identity: &identity,
                    cost: 1,
                };
                if store.decide(check).await.expect("decides").allowed {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("a client task");
    }
    admitted.load(Ordering::Relaxed)
}

async fn exactly_the_capacity_is_admitted(topology: Topology) {
    for (i, limits) in [bucket as fn(u64) -> Limits, gcra, log]
        .into_iter()
        .enumerate()
    {
        let one = hourly(&format!("one{i}"), limits, 1);
        assert_eq!(admitted(&topology, one, CLIENTS).await, 1);
        let thousand = hourly(&format!("thousand{i}"), limits, 1_000);
        assert_eq!(admitted(&topology, thousand, 3_000).await, 1_000);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_instances_on_one_key_admit_exactly_the_capacity_on_standalone_redis() {
    exactly_the_capacity_is_admitted(Topology::standalone()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_instances_on_one_key_admit_exactly_the_capacity_on_a_redis_cluster() {
    exactly_the_capacity_is_admitted(Topology::cluster()).await;
}

fn every_algorithm() -> Vec<Policy> {
    let rate = |c, n, p| Rate::new(c, n, p).expect("valid");
    let window = |l, w| Window::new(l, w).expect("valid");
    vec![
        Policy::new("tb", Limits::TokenBucket(rate(5, 1, 1_000))),
        Policy::new("gcra", Limits::Gcra(rate(5, 1, 1_000))),
        Policy::new("fw", Limits::FixedWindow(window(5, 3_000))),
        Policy::new("sw", Limits::SlidingWindow(window(5, 3_000))),
        Policy::new("log", Limits::SlidingLog(window(5, 3_000))),
    ]
}

#[allow(
    clippy::disallowed_methods,
    reason = "Redis expires keys on its own wall clock; the deadline waits for it"
)]
async fn every_key_has_a_ttl_and_idle_identities_disappear(topology: Topology) {
    let mut config = topology.config();
    config.ttl_margin_ms = 2_000;
    let store = topology.store_with(config).await;
    let policies = every_algorithm();
    for i in 0..10 {
        let identity = Identity::value(&format!("user{i}"));
        for policy in &policies {
            for cost in [1, 3, 0] {
                store
                    .decide(Check {
                        policy,
                        identity: &identity,
                        cost,
                    })
                    .await
                    .expect("decides");
            }
        }
        let both: Vec<Check<'_>> = policies
            .iter()
            .map(|policy| Check {
                policy,
                identity: &identity,
                cost: 1,
            })
            .collect();
        store.decide_all(&both).await.expect("decides");
    }
    // PTTL -1 would be a key without a TTL; -2 is one that expired between
    // SCAN and PTTL (a loaded machine is slow), which is fine.
    let keys = topology.keys_with_pttl();
    assert!(!keys.is_empty());
    for (key, pttl) in &keys {
        assert!(*pttl > 0 || *pttl == -2, "{key} has PTTL {pttl}");
        assert!(key.starts_with("tollgate:"), "{key}");
    }
    assert!(keys.iter().any(|(_, pttl)| *pttl > 0), "{keys:?}");
    // Idle: every key goes once its state is back to full or empty.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while topology.state_key_count() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "keys outlived their TTL: {:?}",
            topology.keys_with_pttl()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

fn cli(port: u16, args: &[&str]) -> String {
    tollgate_testkit::cli(port, args)
        .expect("redis-cli runs")
        .trim()
        .to_owned()
}

/// gcra keeps one integer a key, tagged with its scale in the policy's
/// registry; a limit change carries the tokens over through the registry,
/// in instances that never saw the other limit; and a state whose scale the
/// registry lost reads as an empty bucket. Each instance is prepared with
/// its policy (as a server is before it serves), so its first decision is
/// already tagged; an unprepared one writes text states until its
/// background registration lands (tests/far_link.rs).
#[tokio::test]
async fn a_gcra_state_is_one_integer_and_limit_changes_carry_over_through_the_registry() {
    let topology = Topology::standalone();
    let port = topology.ports()[0];
    let t = 1_000_000_000;
    let per_second = |capacity| {
        Policy::new(
            "api",
            Limits::Gcra(Rate::new(capacity, 1, 1_000).expect("valid")),
        )
    };
    let (ten, twenty, thirty) = (per_second(10), per_second(20), per_second(30));
    let tag = |text: &str| tollgate_store::gcra_scale_tag(text);
    let (tag10, tag20, tag30) = (tag("10:1:1000"), tag("20:1:1000"), tag("30:1:1000"));
    assert!(
        tag10 != tag20 && tag10 != tag30,
        "distinct tags for this test"
    );
    let identity = Identity::value("u10000");
    let key = "tollgate:api:gcra:{u10000}";
    let decide = |store: RedisStore, policy: &Policy| {
        let (policy, identity) = (policy.clone(), identity.clone());
        async move {
            store
                .decide_at(
                    Check {
                        policy: &policy,
                        identity: &identity,
                        cost: 1,
                    },
                    t,
                )
                .await
                .expect("decides")
        }
    };
    let prepared = |policy: &Policy| {
        let policy = policy.clone();
        let store = topology.store();
        async move {
            let store = store.await;
            store.prepare(&[&policy]).await.expect("prepared");
            store
        }
    };
    let first = prepared(&ten).await;
    for _ in 0..6 {
        decide(first.clone(), &ten).await;
    }
    // tat = n·now + debt = 10^9 + 6·1000, then the tag.
    assert_eq!(cli(port, &["get", key]), format!("1000006000{tag10:03}"));
    assert_eq!(cli(port, &["object", "encoding", key]), "int");
    assert_eq!(
        cli(port, &["hget", "tollgate:api:gcra:scales", "10:1:1000"]),
        tag10.to_string()
    );
    // Another instance, at 20: the 4 tokens left carry over, 3 after this.
    let second = prepared(&twenty).await;
    let d = decide(second, &twenty).await;
    assert_eq!((d.allowed, d.remaining), (true, 3));
    assert_eq!(cli(port, &["get", key]), format!("1000017000{tag20:03}"));
    // The first instance, still at 10, reads the state written at 20.
    let d = decide(first, &ten).await;
    assert_eq!((d.allowed, d.remaining), (true, 2));
    assert_eq!(cli(port, &["get", key]), format!("1000008000{tag10:03}"));
    // The registry lost: a new limit cannot read the state's scale, so the
    // bucket is taken as empty; a token comes back after 1 s.
    cli(port, &["del", "tollgate:api:gcra:scales"]);
    let third = topology.store().await;
    let d = decide(third, &thirty).await;
    assert_eq!(
        (d.allowed, d.remaining, d.retry_after_ms),
        (false, 0, Some(1_000))
    );
}

#[tokio::test]
async fn every_key_has_a_ttl_and_idle_identities_disappear_on_standalone_redis() {
    every_key_has_a_ttl_and_idle_identities_disappear(Topology::standalone()).await;
}

#[tokio::test]
async fn every_key_has_a_ttl_and_idle_identities_disappear_on_a_redis_cluster() {
    every_key_has_a_ttl_and_idle_identities_disappear(Topology::cluster()).await;
}

fn roomy() -> Policy {
    Policy::new(
        "roomy",
        Limits::TokenBucket(Rate::new(1_000_000, 1, 3_600_000).expect("valid")),
    )
}

async fn decide_n(store: &RedisStore, policy: &Policy, n: usize) -> Result<(), StoreError> {
    for i in 0..n {
        let identity = Identity::value(&format!("k{}", i % 7));
        store
            .decide(Check {
                policy,
                identity: &identity,
                cost: 1,
            })
            .await?;
    }
    Ok(())
}

#[tokio::test]
async fn script_flush_mid_traffic_is_invisible() {
    let topology = Topology::standalone();
    let store = topology.store().await;
    let policy = roomy();
    decide_n(&store, &policy, 50).await.expect("decides");
    let port = topology.ports()[0];
    tollgate_testkit::cli(port, &["script", "flush"]).expect("script flush");
    decide_n(&store, &policy, 50)
        .await
        .expect("decides after SCRIPT FLUSH");
    let all = [Check {
        policy: &policy,
        identity: &Identity::value("k0"),
        cost: 1,
    }];
    tollgate_testkit::cli(port, &["script", "flush"]).expect("script flush");
    store
        .decide_all(&all)
        .await
        .expect("all-or-nothing after SCRIPT FLUSH");
}

/// The connection Redis closed when it died is found closed before a
/// command is queued on it, so the first decision after the restart goes
/// on a fresh connection instead of failing. (A runtime of its own, as a
/// server has: the connection's driver notices the close while this
/// thread waits for the restart.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_costs_no_decision_once_it_answers() {
    let mut topology = Topology::standalone();
    let store = topology.store().await;
    let policy = roomy();
    decide_n(&store, &policy, 50).await.expect("decides");
    for restart in 0..3 {
        if let Topology::Standalone(server) = &mut topology {
            server.restart().expect("restarts on the same port");
        }
        decide_n(&store, &policy, 1)
            .await
            .unwrap_or_else(|e| panic!("the first decision after restart {restart}: {e}"));
        // Scripts were loaded again on the fresh connection.
        decide_n(&store, &policy, 50)
            .await
            .expect("decides after the restart");
    }
}

#[tokio::test]
async fn a_paused_redis_times_out_then_recovers() {
    let topology = Topology::standalone();
    // A short timeout for the paused call; a generous one around it, as
    // the machine may be loaded.
    let mut config = topology.config();
    config.timeout_ms = 300;
    let impatient = RedisStore::connect(&config).await.expect("connects");
    let store = topology.store().await;
    let policy = roomy();
    decide_n(&store, &policy, 5).await.expect("decides");
    let Topology::Standalone(server) = &topology else {
        unreachable!("standalone")
    };
    server.pause().expect("SIGSTOP");
    let err = decide_n(&impatient, &policy, 1)
        .await
        .expect_err("times out");
    assert_eq!(err, StoreError::Timeout { timeout_ms: 300 });
    server.resume().expect("SIGCONT");
    let mut failures = 0;
    while decide_n(&store, &policy, 1).await.is_err() {
        failures += 1;
        assert!(failures < 100, "no decision after SIGCONT");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    decide_n(&store, &policy, 50)
        .await
        .expect("decides after the pause");
}

#[tokio::test]
async fn a_rejected_key_is_answered_locally_until_its_retry_time() {
    let topology = Topology::standalone();
    let store = topology.store().await;
    let policy = hourly("tight", bucket, 1);
    let identity = Identity::value("acme");
    let check = |policy| Check {
        policy,
        identity: &identity,
        cost: 1,
    };
    assert!(store.decide(check(&policy)).await.expect("decides").allowed);
    let rejected = store.decide(check(&policy)).await.expect("decides");
    assert!(!rejected.allowed);
    assert_eq!(store.answered_locally(), 0);
    assert_eq!(store.rejections_cached(), 1);
    let local = store.decide(check(&policy)).await.expect("decides");
    assert_eq!(store.answered_locally(), 1);
    assert!(!local.allowed);
    assert_eq!(
        (local.limit, local.remaining),
        (rejected.limit, rejected.remaining)
    );
    assert!(local.retry_after_ms <= rejected.retry_after_ms && local.retry_after_ms > Some(0));
    // Another cost is another question: it goes to Redis.
    let two = Check {
        policy: &policy,
        identity: &identity,
        cost: 2,
    };
    assert_eq!(
        store.decide(two).await.expect("decides").retry_after_ms,
        None
    );
    assert_eq!(store.answered_locally(), 1);
    // A changed limit misses the cache at once and asks Redis, which
    // carries the empty bucket over: still rejected, no burst minted.
    let raised = hourly("tight", bucket, 5);
    assert!(!store.decide(check(&raised)).await.expect("decides").allowed);
    assert_eq!(store.answered_locally(), 1);
}

#[tokio::test]
async fn a_master_found_through_sentinel_decides() {
    let master = tollgate_testkit::RedisServer::start().expect("redis-server starts");
    let sentinel =
        tollgate_testkit::RedisSentinel::start("tollgate-master", master.port()).expect("sentinel");
    let mut config = tollgate_store::RedisConfig::standalone("unused");
    config.url = None;
    config.sentinel = Some(tollgate_store::SentinelConfig {
        master: "tollgate-master".into(),
        nodes: vec![sentinel.url()],
    });
    config.timeout_ms = 5_000;
    let store = RedisStore::connect(&config).await.expect("connects");
    let policy = hourly("tight", bucket, 2);
    let identity = Identity::value("acme");
    let check = Check {
        policy: &policy,
        identity: &identity,
        cost: 1,
    };
    let admitted: Vec<bool> = [
        store.decide(check).await.expect("decides").allowed,
        store.decide(check).await.expect("decides").allowed,
        store.decide(check).await.expect("decides").allowed,
    ]
    .to_vec();
    assert_eq!(admitted, [true, true, false]);
    // The state lives on the master the sentinel named.
    let key = String::from_utf8(store.key(&policy, &identity)).expect("utf-8");
    assert!(
        master
            .cli(&["pttl", &key])
            .expect("pttl")
            .trim()
            .parse::<i64>()
            .expect("int")
            > 0
    );
}

#[tokio::test]
async fn tls_and_a_password_from_the_config() {
    let certs = std::env::temp_dir().join(format!("tollgate-tls-{}", std::process::id()));
    std::fs::create_dir_all(&certs).expect("a directory");
    let (cert, key) = (certs.join("cert.pem"), certs.join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let tls_port = tollgate_testkit::free_port().expect("a port");
    let (cert, key) = (cert.to_string_lossy(), key.to_string_lossy());
    let server = tollgate_testkit::RedisServer::start_with(&[
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &cert,
        "--tls-auth-clients",
        "no",
        "--requirepass",
        "s3cret",
    ])
    .expect("redis-server with TLS starts");
    // `#insecure`: the certificate is self-signed.
    let mut config =
        tollgate_store::RedisConfig::standalone(format!("rediss://127.0.0.1:{tls_port}/#insecure"));
    config.password = Some("s3cret".into());
    config.timeout_ms = 5_000;
    let store = RedisStore::connect(&config).await.expect("connects");
    let policy = hourly("tight", bucket, 1);
    let identity = Identity::value("acme");
    let check = Check {
        policy: &policy,
        identity: &identity,
        cost: 1,
    };
    assert!(store.decide(check).await.expect("decides over TLS").allowed);
    assert!(!store.decide(check).await.expect("decides over TLS").allowed);
    // Without the password the server refuses.
    config.password = None;
    let refused = RedisStore::connect(&config).await.expect("connects lazily");
    assert!(refused.decide(check).await.is_err());
    drop(server);
    let _ = std::fs::remove_dir_all(&certs);
}

#[tokio::test]
async fn decisions_continue_after_a_sentinel_failover() {
    let mut master = tollgate_testkit::RedisServer::start().expect("master starts");
    let master_port = master.port().to_string();
    let replica =
        tollgate_testkit::RedisServer::start_with(&["--replicaof", "127.0.0.1", &master_port])
            .expect("replica starts");
    let sentinel =
        tollgate_testkit::RedisSentinel::start("failover", master.port()).expect("sentinel");
    let mut config = tollgate_store::RedisConfig::standalone("unused");
    config.url = None;
    config.sentinel = Some(tollgate_store::SentinelConfig {
        master: "failover".into(),
        nodes: vec![sentinel.url()],
    });
    config.timeout_ms = 5_000;
    let store = RedisStore::connect(&config).await.expect("connects");
    let policy = roomy();
    // The sentinel must have seen the replica before the master dies.
    let mut waited = 0;
    while !tollgate_testkit::cli(sentinel.port(), &["sentinel", "replicas", "failover"])
        .expect("sentinel answers")
        .contains(&replica.port().to_string())
    {
        waited += 1;
        assert!(waited < 300, "the sentinel never saw the replica");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    decide_n(&store, &policy, 20)
        .await
        .expect("decides on the master");
    master.kill().expect("SIGKILL the master");
    // Failures while the sentinel notices and promotes (bounded in count).
    let mut failures = 0;
    while let Err(e) = decide_n(&store, &policy, 1).await {
        failures += 1;
        assert!(failures < 300, "no decision after the failover: {e}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    decide_n(&store, &policy, 50)
        .await
        .expect("decides on the promoted replica");
    let role = replica.cli(&["role"]).expect("role");
    assert!(role.starts_with("master"), "{role}");
}
