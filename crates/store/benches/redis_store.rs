//! The Redis store against its ceilings, in one run, on one local Redis
//! that the bench starts (a real redis-server on a free port):
//!
//! - `redis-benchmark` INCR: what one Redis core does with the cheapest write;
//! - `redis-benchmark` EVALSHA of each tollgate script (random keys of
//!   100,000): the ceiling of one script call per decision;
//! - `one EVALSHA per decision`: a plain redis-rs client over one
//!   multiplexed connection, 64 concurrent tasks: the usual Redis limiter;
//! - `RedisStore`: the store's own `decide`, 64 concurrent tasks, batched
//!   (default `in_flight` 2, then 1, 4 and 8), and with batching off
//!   (`max_keys: 1`) for comparison;
//! - `MEMORY USAGE` bytes per key of each algorithm (keys
//!   `tollgate:api:<algorithm>:{uNNNNN}`).
//!
//! Run: `cargo bench -p tollgate-store --bench redis_store`
//! (`TOLLGATE_BENCH_DECISIONS` sets the decisions per contender, default 300,000.)

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use tokio::task::JoinSet;
use tollgate_core::{Identity, Limits, Policy, Rate, Window};
use tollgate_store::{BatchConfig, Check, RedisConfig, RedisStore, Store, lua_source};
use tollgate_testkit::RedisServer;

const TASKS: usize = 64;
const KEYS: u64 = 100_000;

fn main() {
    let decisions: u64 = std::env::var("TOLLGATE_BENCH_DECISIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300_000);
    let server =
        RedisServer::start().expect("redis-server starts (apt-get install -y redis-server)");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run(&server, decisions));
}

async fn run(server: &RedisServer, decisions: u64) {
    let client = redis::Client::open(server.url()).expect("a client");
    let manager = ConnectionManager::new(client).await.expect("connects");
    let shas = script_ceilings(server, &manager).await;

    println!(
        "# decisions through Rust: {TASKS} tasks, {decisions} decisions, gcra, keys of {KEYS}"
    );
    let (rate, p99) = one_evalsha_per_decision(&manager, &shas[1].1, decisions).await;
    println!("one EVALSHA per decision            {rate:>10.0} /s  p99 {p99:>6} µs");
    flush(&manager).await;
    let batched = store(server, BatchConfig::default()).await;
    let (store_rate, p99) = store_decisions(&batched, decisions).await;
    let per_call = decisions as f64 / batched.batched_calls().max(1) as f64;
    println!(
        "RedisStore (batched)                {store_rate:>10.0} /s  p99 {p99:>6} µs  {per_call:>5.1} decisions/call"
    );
    flush(&manager).await;
    let unbatched = store(
        server,
        BatchConfig {
            max_keys: 1,
            in_flight: 1_024,
            ..BatchConfig::default()
        },
    )
    .await;
    let (rate, p99) = store_decisions(&unbatched, decisions).await;
    println!("RedisStore (batching off)           {rate:>10.0} /s  p99 {p99:>6} µs");
    for in_flight in [1, 4, 8] {
        flush(&manager).await;
        let other = store(
            server,
            BatchConfig {
                in_flight,
                ..BatchConfig::default()
            },
        )
        .await;
        let (rate, p99) = store_decisions(&other, decisions).await;
        let per_call = decisions as f64 / other.batched_calls().max(1) as f64;
        println!(
            "RedisStore (in_flight {in_flight})             {rate:>10.0} /s  p99 {p99:>6} µs  {per_call:>5.1} decisions/call"
        );
    }
    let gcra_ceiling = redis_benchmark(
        server.port(),
        300_000,
        &[
            "EVALSHA",
            shas[1].1.as_str(),
            "1",
            "tollgate:api:gcra:{u__rand_int__}",
            "",
            "1000",
            "gcra",
            "1",
            "20",
            "1",
            "200",
            "0",
        ],
    );
    println!(
        "RedisStore / EVALSHA gcra ceiling   {:>10.2}x",
        store_rate / gcra_ceiling
    );
    flush(&manager).await;
    memory_per_key(&batched, &manager).await;
}

/// Loads each script and prints redis-benchmark's rate of INCR and of
/// each script's EVALSHA; each script's name and SHA.
async fn script_ceilings(
    server: &RedisServer,
    manager: &ConnectionManager,
) -> Vec<(&'static str, String)> {
    let scripts = [
        // Parameters, then the scale field: gcra's tag 0 writes the
        // integer form, as a store whose registry gave that tag does.
        (
            "token_bucket",
            lua_source::TOKEN_BUCKET,
            ["20", "1", "200", ""],
        ),
        ("gcra", lua_source::GCRA, ["20", "1", "200", "0"]),
        (
            "fixed_window",
            lua_source::FIXED_WINDOW,
            ["100", "1000", "0", ""],
        ),
        (
            "sliding_window",
            lua_source::SLIDING_WINDOW,
            ["100", "1000", "0", ""],
        ),
        (
            "sliding_log",
            lua_source::SLIDING_LOG,
            ["100", "1000", "0", ""],
        ),
    ];
    let mut shas = Vec::new();
    for (name, body, _) in &scripts {
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(*body)
            .query_async(&mut manager.clone())
            .await
            .expect("SCRIPT LOAD");
        shas.push((*name, sha));
    }

    println!("# redis-benchmark: -c {TASKS}, random keys of {KEYS}");
    let incr = redis_benchmark(server.port(), 1_000_000, &["-t", "incr"]);
    println!("INCR                                {incr:>10.0} /s");
    for ((name, sha), (_, _, params)) in shas.iter().zip(&scripts) {
        let key = format!("tollgate:api:{name}:{{u__rand_int__}}");
        let mut args = vec![
            "EVALSHA",
            sha.as_str(),
            "1",
            key.as_str(),
            "",
            "1000",
            name,
            "1",
        ];
        args.extend(params.iter().copied());
        let rate = redis_benchmark(server.port(), 300_000, &args);
        println!("EVALSHA {name:<28}{rate:>10.0} /s");
    }
    flush(manager).await;
    shas
}

async fn store(server: &RedisServer, batch: BatchConfig) -> RedisStore {
    let mut config = RedisConfig::standalone(server.url());
    config.batch = batch;
    config.timeout_ms = 10_000;
    RedisStore::connect(&config).await.expect("connects")
}

async fn flush(manager: &ConnectionManager) {
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut manager.clone())
        .await
        .expect("FLUSHALL");
}

/// `redis-benchmark ... -q`: requests per second.
fn redis_benchmark(port: u16, requests: u64, args: &[&str]) -> f64 {
    let output = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &TASKS.to_string(), "-n", &requests.to_string()])
        .args(["-r", &KEYS.to_string(), "-q"])
        .args(args)
        .output()
        .expect("redis-benchmark runs (apt-get install -y redis-server)");
    let text = String::from_utf8_lossy(&output.stdout);
    // The last "N requests per second" of the progress output.
    text.rsplit("requests per second")
        .nth(1)
        .and_then(|before| before.rsplit([' ', ':', '\r']).find(|w| !w.is_empty()))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("redis-benchmark said: {text}"))
}

/// The usual Redis limiter: one EVALSHA per decision, concurrent callers
/// sharing one multiplexed connection.
#[allow(clippy::disallowed_methods, reason = "a benchmark measures wall time")]
async fn one_evalsha_per_decision(
    manager: &ConnectionManager,
    sha: &str,
    decisions: u64,
) -> (f64, u64) {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for task in 0..TASKS {
        let (mut manager, next, sha) = (manager.clone(), next.clone(), sha.to_owned());
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            let mut rng = task as u64 * 7_919 + 1;
            while next.fetch_add(1, Ordering::Relaxed) < decisions {
                rng = xorshift(rng);
                let key = format!("tollgate:api:gcra:{{u{}}}", rng % KEYS);
                let t = Instant::now();
                let reply: Vec<i64> = redis::cmd("EVALSHA")
                    .arg(&sha)
                    .arg(1)
                    .arg(key)
                    .arg("")
                    .arg(1000)
                    .arg("gcra")
                    .arg(1)
                    .arg(20)
                    .arg(1)
                    .arg(200)
                    .arg(0)
                    .query_async(&mut manager)
                    .await
                    .expect("EVALSHA");
                std::hint::black_box(reply);
                latencies.push(micros(t.elapsed()));
            }
            latencies
        });
    }
    finish(tasks, started, decisions).await
}

#[allow(clippy::disallowed_methods, reason = "a benchmark measures wall time")]
async fn store_decisions(store: &RedisStore, decisions: u64) -> (f64, u64) {
    let policy = Arc::new(Policy::new(
        "api",
        Limits::Gcra(Rate::new(20, 5, 1_000).expect("valid")),
    ));
    let identities: Arc<Vec<Identity>> = Arc::new(
        (0..KEYS)
            .map(|i| Identity::value(&format!("u{i}")))
            .collect(),
    );
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for task in 0..TASKS {
        let (store, next, policy, identities) = (
            store.clone(),
            next.clone(),
            policy.clone(),
            identities.clone(),
        );
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            let mut rng = task as u64 * 7_919 + 1;
            while next.fetch_add(1, Ordering::Relaxed) < decisions {
                rng = xorshift(rng);
                let check = Check {
                    policy: &policy,
                    identity: &identities[(rng % KEYS) as usize],
                    cost: 1,
                };
                let t = Instant::now();
                let decision = store.decide(check).await.expect("decides");
                std::hint::black_box(decision);
                latencies.push(micros(t.elapsed()));
            }
            latencies
        });
    }
    finish(tasks, started, decisions).await
}

#[allow(clippy::disallowed_methods, reason = "a benchmark measures wall time")]
async fn finish(mut tasks: JoinSet<Vec<u64>>, started: Instant, decisions: u64) -> (f64, u64) {
    let mut latencies = Vec::with_capacity(decisions as usize);
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done.expect("a task"));
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let p99 = latencies
        .get(latencies.len() * 99 / 100)
        .copied()
        .unwrap_or_default();
    (latencies.len() as f64 / elapsed, p99)
}

/// Bytes per key of each algorithm after one admitted decision.
async fn memory_per_key(store: &RedisStore, manager: &ConnectionManager) {
    println!(
        "# MEMORY USAGE per key (1,000 keys tollgate:api:<algorithm>:{{uNNNNN}}, one decision each)"
    );
    let rate = |c, n, p| Rate::new(c, n, p).expect("valid");
    let window = |l, w| Window::new(l, w).expect("valid");
    for limits in [
        Limits::TokenBucket(rate(20, 5, 1_000)),
        Limits::Gcra(rate(20, 5, 1_000)),
        Limits::FixedWindow(window(100, 60_000)),
        Limits::SlidingWindow(window(100, 60_000)),
        Limits::SlidingLog(window(100, 60_000)),
    ] {
        let policy = Policy::new("api", limits);
        let mut total = 0u64;
        let mut sample = String::new();
        for i in 10_000..11_000u64 {
            let identity = Identity::value(&format!("u{i}"));
            store
                .decide(Check {
                    policy: &policy,
                    identity: &identity,
                    cost: 1,
                })
                .await
                .expect("decides");
            let key = store.key(&policy, &identity);
            let bytes: u64 = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(&key[..])
                .arg("SAMPLES")
                .arg(0)
                .query_async(&mut manager.clone())
                .await
                .expect("MEMORY USAGE");
            total += bytes;
            if sample.is_empty() {
                let value: String = redis::cmd("GET")
                    .arg(&key[..])
                    .query_async(&mut manager.clone())
                    .await
                    .expect("GET");
                sample = format!("{} = {value:?}", String::from_utf8_lossy(&key));
            }
        }
        println!(
            "{:<16}{:>6.1} bytes/key   e.g. {sample}",
            policy.algorithm().as_str(),
            total as f64 / 1_000.0
        );
    }
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
