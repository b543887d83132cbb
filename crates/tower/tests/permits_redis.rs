//! Two instances of the example app (examples/axum_app.rs), each its own
//! process, on one real redis-server share a tenant's concurrency limit;
//! one killed with SIGKILL while it holds permits leaves them held until
//! their leases end by the store's clock (Redis `TIME`), and then they come
//! back: not before, and not never.

mod support;

#[allow(dead_code)]
#[path = "../examples/axum_app.rs"]
mod axum_app;

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use support::write_config;
use tokio::task::JoinSet;
use tollgate_core::{Identity, SystemClock};
use tollgate_limiter::{Check, Decider, Plan};
use tollgate_testkit::RedisServer;
use tollgate_tower::Configured;

/// Where [`app_instance`] finds the example's arguments.
const APP_ARGS: &str = "TOLLGATE_TEST_AXUM_APP_ARGS";

/// A permit's lease in the test's config, in ms.
const LEASE_MS: u64 = 5_000;

/// Not a test of its own: the process [`Instance::start`] runs as one
/// instance of the example app, its arguments in [`APP_ARGS`]. Run without
/// them (as every test run runs it), it does nothing.
#[test]
fn app_instance() {
    let Ok(given) = std::env::var(APP_ARGS) else {
        return;
    };
    let args = axum_app::args(given.split(' ').map(str::to_owned)).expect("app arguments");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    if let Err(error) = runtime.block_on(axum_app::run(args)) {
        panic!("the app stopped: {error}");
    }
}

/// One instance of the example app: this test binary run as
/// [`app_instance`], on a port of its choosing.
struct Instance {
    child: Child,
    base: String,
}

impl Instance {
    fn start(config: &Path) -> Self {
        let exe = std::env::current_exe().expect("the test binary");
        let mut child = Command::new(exe)
            .args(["app_instance", "--exact", "--nocapture", "--test-threads=1"])
            .env(
                APP_ARGS,
                format!("--config {} --listen 127.0.0.1:0", config.display()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the app starts");
        let stdout = child.stdout.take().expect("its stdout");
        let mut lines = BufReader::new(stdout).lines();
        let base = lines
            .by_ref()
            .map_while(Result::ok)
            // libtest's `test app_instance ... ` comes first, on the same line.
            .find_map(|line| {
                let (_, base) = line.split_once("listening on ")?;
                Some(base.to_owned())
            })
            .expect("the app listens");
        // Read on, so the app never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Self { child, base }
    }

    /// `POST /reports?{query}` as `tenant`.
    fn report(
        &self,
        tenant: &str,
        query: &str,
    ) -> impl Future<Output = reqwest::Result<reqwest::Response>> + use<> {
        reqwest::Client::new()
            .post(format!("{}/reports?{query}", self.base))
            .header("X-Tenant", tenant)
            .send()
    }

    /// Reports this instance is making now.
    async fn making(&self) -> u64 {
        let said: serde_json::Value = reqwest::get(format!("{}/reports/in_flight", self.base))
            .await
            .expect("answered")
            .json()
            .await
            .expect("json");
        said["now"].as_u64().expect("a count")
    }

    /// Waits, a generous while at most, until this instance makes `now`
    /// reports, and says how many it makes.
    async fn until_making(&self, now: u64) -> u64 {
        for _ in 0..1_000 {
            if self.making().await == now {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.making().await
    }

    /// SIGKILL: nothing of it runs after, no release, no goodbye.
    fn kill(&mut self) {
        self.child.kill().expect("killed");
        self.child.wait().expect("reaped");
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(redis_url: &str) -> String {
    format!(
        r#"
store:
  redis: {{ url: "{redis_url}" }}
policies:
  - name: reports
    algorithm: concurrency
    limit: 3
    lease: {LEASE_MS}ms
    match: {{ methods: [POST], path: /reports }}
    identity: [{{ header: X-Tenant }}]
    on_store_failure: fail_closed
"#
    )
}

/// The store's clock: Redis `TIME`, in ms.
fn store_ms(redis: &RedisServer) -> u64 {
    let time = redis.cli(&["TIME"]).expect("TIME");
    let mut parts = time
        .split_whitespace()
        .map(|p| p.parse::<u64>().expect("a number"));
    let (seconds, micros) = (parts.next().expect("seconds"), parts.next().expect("µs"));
    seconds * 1_000 + micros / 1_000
}

/// How many permits `identity` could take now: taken one by one until one
/// is refused, then all given back.
async fn free_permits<D: Decider>(decider: &D, plan: &Plan, identity: &Identity) -> u64 {
    let mut taken = Vec::new();
    while taken.len() < 100 {
        let decided = decider.decide(&[Check::new(plan, identity, 1)]).await;
        match decided.decisions.first().and_then(|d| d.permit) {
            Some(permit) => taken.push(permit),
            None => break,
        }
    }
    for permit in &taken {
        let released = decider.release(plan, identity, *permit).await;
        assert!(matches!(released, Ok(true)), "{released:?}");
    }
    taken.len() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_a_limit_and_a_killed_holders_permits_come_back_when_their_leases_end()
{
    let redis = RedisServer::start().expect("redis-server starts");
    let path = write_config(redis.dir(), &config(&redis.url()));
    let mut a = Instance::start(&path);
    let b = Instance::start(&path);
    // The test's own view of the store: the same config, a third limiter.
    let configured = Configured::load(&path, Arc::new(SystemClock))
        .await
        .expect("config loads");
    let rules = configured.rules();
    let plan = rules.first().expect("the reports rule").plan();
    let acme = Identity::composite([("x-tenant", "acme")]).expect("identity");
    let limiter = configured.limiter();

    // Before the first of a's permits is taken.
    let started = store_ms(&redis);
    let mut on_a = JoinSet::new();
    for _ in 0..2 {
        on_a.spawn(a.report("acme", "ms=60000"));
    }
    assert_eq!(a.until_making(2).await, 2);
    let mut on_b = JoinSet::new();
    on_b.spawn(b.report("acme", "ms=60000"));
    assert_eq!(b.until_making(1).await, 1);

    // One limit for both: a fourth report is refused by either.
    for instance in [&a, &b] {
        let refused = instance.report("acme", "ms=0").await.expect("answered");
        assert_eq!(refused.status(), 429);
        assert!(!refused.headers().contains_key("tollgate-degraded"));
    }
    assert_eq!(free_permits(limiter, plan, &acme).await, 0);
    // b's client leaves: its permit is back for everyone.
    on_b.abort_all();
    assert_eq!(b.until_making(0).await, 0);
    let mut free = 0;
    for _ in 0..1_000 {
        free = free_permits(limiter, plan, &acme).await;
        if free == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(free, 1);
    on_a.spawn(a.report("acme", "ms=60000"));
    assert_eq!(a.until_making(3).await, 3);
    // After the last of a's permits was taken.
    let taken = store_ms(&redis);
    assert_eq!(free_permits(limiter, plan, &acme).await, 0);

    a.kill();
    let refused = b.report("acme", "ms=0").await.expect("answered");
    assert_eq!(refused.status(), 429);
    // a's permits expire between started + lease and taken + lease on the
    // store's clock: held before the first, free after the last.
    let mut back = None;
    for _ in 0..5_000 {
        let before = store_ms(&redis);
        let free = free_permits(limiter, plan, &acme).await;
        let after = store_ms(&redis);
        if after < started + LEASE_MS {
            assert_eq!(
                free,
                0,
                "a lease ended {} ms early",
                started + LEASE_MS - after
            );
        }
        if before > taken + LEASE_MS {
            back = Some(free);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        back,
        Some(3),
        "every permit of the killed instance came back"
    );
    let admitted = b.report("acme", "ms=0").await.expect("answered");
    assert_eq!(admitted.status(), 200);
    drop(on_a);
}
