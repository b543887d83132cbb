//! The benchmark of leases that follow identities (docs/benchmarks.md,
//! Per-identity leases): `leased` beside `global` and `split` in one run,
//! on the setup of identity_leases.rs — three regions (eu, us, ap), each a
//! redis-server of its own and a `tollgate serve`, one global redis-server
//! behind a delay proxy per region (30–80 ms each way, jittered). Three
//! policies of 100 a 1 s window per tenant, one a scope: `leased` (floors
//! 10%: ap 4, eu 3, us 3), `global`, `split` (ap 34, eu 33, us 33).
//!
//! For each scope in turn: two tenants busy in two regions at once, one big
//! tenant beside 200 small ones, the big tenant moving regions; each
//! tenant's admissions tallied per window. Then the ledger's calls a second
//! against the number of hot identities on one instance, beside explain's
//! figure. Load is open: a tenant's checks leave at a fixed rate whatever
//! the answers' latency, so a far store does not slow its own demand.
//!
//! It asserts what is exact (every tenant within its limit in every
//! window, `split` at exactly its share, the leased identities counted)
//! and prints the rest for bench/identity_leases.sh. About 100 s, so
//! ignored by a plain `cargo test`; identity_leases.rs holds the leased
//! scope's guarantees there.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use support::{TollgateProcess, explain_json, metric, metrics_text, wall_ms};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tollgate_testkit::{Delay, DelayProxy, RedisServer};

const REGIONS: [&str; 3] = ["eu", "us", "ap"];
const EU: usize = 0;
const US: usize = 1;
const LIMIT: u64 = 100;
/// "Most of its limit": 90% of it in one window.
const STEADY: u64 = 90;
/// The scopes compared, each a policy of that name.
const SCOPES: [&str; 3] = ["leased", "global", "split"];
/// `split`'s shares over three equal weights, in REGIONS order.
const SPLIT_SHARES: [u64; 3] = [33, 33, 34];
/// A busy tenant's demand: one check every 4 ms (250 a second).
const BUSY_EVERY: Duration = Duration::from_millis(4);
/// The small tenants' demand, all together: one check every 10 ms, each
/// of the 200 one every 2 s, within its floor.
const SMALL_EVERY: Duration = Duration::from_millis(10);
const SMALL_TENANTS: usize = 200;
/// Each hot identity's demand: a check of HOT_COST units every 250 ms, 20
/// a second, over its floor in eu (3 a window) by far, so a keeper running
/// late still sees it over (demand is whole units a renewal period).
const HOT_EVERY_US: u64 = 250_000;
const HOT_COST: u64 = 5;
const HOT: [usize; 4] = [1, 10, 100, 250];
/// Checks in flight a stream at most (250 a second over a 160 ms round
/// trip needs 40; a batch waiting for its lane, more).
const IN_FLIGHT: usize = 256;

fn config(regional: &str, global: &str) -> String {
    let policy = |scope: &str, spelled: &str| {
        format!(
            "  - {{name: {scope}, algorithm: fixed_window, limit: {LIMIT}, window: 1s, \
             on_store_failure: fail_closed, scope: {spelled}}}\n"
        )
    };
    format!(
        r#"server: {{watch_interval_ms: 0}}
regions:
  eu: {{instances: 1}}
  us: {{instances: 1}}
  ap: {{instances: 1}}
stores:
  regional: {{redis: {{url: "{regional}"}}}}
  global: {{redis: {{url: "{global}", timeout: 400ms}}}}
policies:
{}{}{}"#,
        policy(
            "leased",
            "{leased: {term: 1s, renew: 250ms, floor: 10%, identities: 1000}}"
        ),
        policy("global", "global"),
        policy("split", "split"),
    )
}

/// One tenant's admissions in one region in one window, and when (wall
/// ms) its admissions there reached STEADY in that window.
#[derive(Default, Clone, Copy)]
struct Cell {
    admitted: u64,
    steady_at_ms: Option<u64>,
}

/// Admissions per window (its end, in s since the epoch), per tenant and
/// region.
type Tally = Arc<Mutex<BTreeMap<u64, BTreeMap<(String, usize), Cell>>>>;

/// What the driver could not send: no permit free, or no answer.
#[derive(Default)]
struct Shed {
    no_permit: AtomicU64,
    failed: AtomicU64,
}

impl Shed {
    /// Prints what was shed since the last call, as `what`'s.
    fn report(&self, what: &str) {
        let no_permit = self.no_permit.swap(0, Ordering::Relaxed);
        let failed = self.failed.swap(0, Ordering::Relaxed);
        eprintln!("shed\t{what}\t{no_permit}\t{failed}");
    }
}

/// Three regions of real processes and the global redis they share.
struct Regions {
    global: RedisServer,
    bases: Vec<String>,
    explained: Value,
    _held: (Vec<RedisServer>, Vec<DelayProxy>, Vec<TollgateProcess>),
    _dir: tempfile::TempDir,
}

impl Regions {
    fn start() -> Self {
        let global = RedisServer::start().expect("the global redis");
        let global_addr = format!("127.0.0.1:{}", global.port())
            .parse()
            .expect("global address");
        let far = Delay {
            min: Duration::from_millis(30),
            max: Duration::from_millis(80),
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut redises, mut links, mut processes, mut bases) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut explained = Value::Null;
        for region in REGIONS {
            let redis = RedisServer::start().expect("a region's redis");
            let link = DelayProxy::start(global_addr, far).expect("a region's link");
            let path = dir.path().join(format!("{region}.yaml"));
            std::fs::write(&path, config(&redis.url(), &link.url())).expect("write config");
            if region == "eu" {
                explained = explain_json(&path, &["--region", "eu"]);
            }
            let process = TollgateProcess::spawn(&path, &[("TOLLGATE_REGION", region)]);
            bases.push(process.base.clone());
            processes.push(process);
            redises.push(redis);
            links.push(link);
        }
        Self {
            global,
            bases,
            explained,
            _held: (redises, links, processes),
            _dir: dir,
        }
    }

    /// explain's `scope` object of the policy `name`.
    fn scope_explained(&self, name: &str) -> &Value {
        let policies = self.explained["policies"].as_array().expect("policies");
        let policy = policies
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("explain has no policy {name}: {}", self.explained));
        &policy["scope"]
    }
}

/// Where a stream sends its checks: a region's instance and a policy.
#[derive(Clone)]
struct Target {
    base: String,
    policy: &'static str,
    region: usize,
    cost: u64,
}

/// One check of `tenant` at `to`; its units tallied when admitted. False
/// when no answer came.
async fn check_once(client: &reqwest::Client, to: &Target, tenant: &str, tally: &Tally) -> bool {
    let Target {
        base,
        policy,
        region,
        cost,
    } = to;
    let Ok(response) = client
        .post(format!("{base}/v1/check"))
        .body(format!(
            r#"{{"policy":"{policy}","key":"{tenant}","cost":{cost}}}"#
        ))
        .send()
        .await
    else {
        return false;
    };
    let Ok(answer) = response.json::<Value>().await else {
        return false;
    };
    if answer["allowed"] != true {
        return true;
    }
    let now = wall_ms();
    let reset = answer["reset_after_ms"].as_u64().expect("reset_after_ms");
    // The window ends `reset` after the decision, a round trip before now.
    let window = (now + reset + 500) / 1000;
    let mut tally = tally.lock().expect("tally");
    let cell = tally
        .entry(window)
        .or_default()
        .entry((tenant.to_owned(), *region))
        .or_default();
    let before = cell.admitted;
    cell.admitted += cost;
    if before < STEADY && cell.admitted >= STEADY {
        cell.steady_at_ms = Some(now);
    }
    true
}

/// A stream of checks to `to`: one every `every`, round the `tenants` in
/// turn, each in a task of its own while a permit is free (open load,
/// bounded in flight).
fn stream(
    to: Target,
    tenants: Vec<String>,
    every: Duration,
    (tally, shed): (&Tally, &Arc<Shed>),
) -> JoinHandle<()> {
    let client = reqwest::Client::new();
    let (tally, shed) = (Arc::clone(tally), Arc::clone(shed));
    let permits = Arc::new(Semaphore::new(IN_FLIGHT));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        for tenant in tenants.iter().cycle() {
            tick.tick().await;
            let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                shed.no_permit.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let (client, to, tenant) = (client.clone(), to.clone(), tenant.clone());
            let (tally, shed) = (Arc::clone(&tally), Arc::clone(&shed));
            tokio::spawn(async move {
                if !check_once(&client, &to, &tenant, &tally).await {
                    shed.failed.fetch_add(1, Ordering::Relaxed);
                }
                drop(permit);
            });
        }
    })
}

/// The current window's end, as the tally keys it.
fn window_now() -> u64 {
    wall_ms() / 1000 + 1
}

/// Runs `streams` for `seconds`, then stops them; the whole windows they
/// spanned.
async fn phase(streams: Vec<JoinHandle<()>>, seconds: u64) -> std::ops::Range<u64> {
    let first = window_now() + 1;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let last = window_now();
    for stream in streams {
        stream.abort();
    }
    first..last
}

/// What `tenant` was admitted in `region` in each of `windows`.
fn admitted(tally: &Tally, windows: std::ops::Range<u64>, tenant: &str, region: usize) -> Vec<u64> {
    let tally = tally.lock().expect("tally");
    windows
        .map(|w| {
            tally
                .get(&w)
                .and_then(|m| m.get(&(tenant.to_owned(), region)))
                .map_or(0, |c| c.admitted)
        })
        .collect()
}

/// One workload's result for one scope: the busy tenant's admissions in
/// its region per settled window.
struct Measured {
    scope: &'static str,
    workload: &'static str,
    tenant: &'static str,
    region: usize,
    windows: Vec<u64>,
}

/// The tenants a scope's workloads make busy.
const A: &str = "tenant-a";
const B: &str = "tenant-b";
const C: &str = "tenant-c";

/// When a tenant that moved regions had STEADY of its limit in one window
/// of its new region.
struct Converged {
    from_move_ms: u64,
    /// From the start of the first window after the move: under `global`
    /// the window of the move was already spent where the tenant was, so
    /// this is the part a scope adds.
    from_next_window_ms: i64,
}

/// The three workloads under `scope`: two tenants in two regions, one big
/// beside 200 small, the big one moving from us to eu. Returns what each
/// busy tenant was admitted and the move's convergence (ms from the move
/// to its STEADY-th admission in eu within one window, if any).
async fn workloads(
    regions: &Regions,
    scope: &'static str,
    tally: &Tally,
    shed: &Arc<Shed>,
) -> (Vec<Measured>, Option<Converged>) {
    let to = |region: usize| Target {
        base: regions.bases[region].clone(),
        policy: scope,
        region,
        cost: 1,
    };
    let busy = |tenant: &str, region: usize| {
        stream(
            to(region),
            vec![tenant.to_owned()],
            BUSY_EVERY,
            (tally, shed),
        )
    };
    let small = || {
        let tenants = (0..SMALL_TENANTS).map(|i| format!("small-{i}")).collect();
        stream(to(EU), tenants, SMALL_EVERY, (tally, shed))
    };
    // A first phase lets a new ledger pass its term and rest (leased goes
    // first) and every scope's connections warm.
    phase(vec![busy(A, EU), busy(B, US)], 3).await;
    let two = phase(vec![busy(A, EU), busy(B, US)], 6).await;
    let settled = two.start + 1..two.end;
    let mut measured = vec![
        Measured {
            scope,
            workload: "two tenants",
            tenant: A,
            region: EU,
            windows: admitted(tally, settled.clone(), A, EU),
        },
        Measured {
            scope,
            workload: "two tenants",
            tenant: B,
            region: US,
            windows: admitted(tally, settled, B, US),
        },
    ];
    // a and b let go (a term), c takes over us beside the small tenants.
    let (c_us, smalls) = (busy(C, US), small());
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let big = phase(vec![c_us, smalls], 6).await;
    measured.push(Measured {
        scope,
        workload: "many small, one big",
        tenant: C,
        region: US,
        windows: admitted(tally, big, C, US),
    });
    let moved_at = wall_ms();
    let moved = phase(vec![busy(C, EU)], 7).await;
    measured.push(Measured {
        scope,
        workload: "c moved to eu",
        tenant: C,
        region: EU,
        windows: admitted(tally, moved.start..moved.end, C, EU),
    });
    let converged = {
        let tally = tally.lock().expect("tally");
        tally
            .range(moved_at / 1000 + 1..)
            .find_map(|(_, cells)| cells.get(&(C.to_owned(), EU))?.steady_at_ms)
            .map(|at| Converged {
                from_move_ms: at - moved_at,
                from_next_window_ms: at as i64 - (moved_at / 1000 + 1) as i64 * 1000,
            })
    };
    (measured, converged)
}

/// Asserts the bound of every scope: no tenant above its limit in any
/// window, all regions together.
fn assert_within_limit(scope: &str, tally: &Tally) {
    let tally = tally.lock().expect("tally");
    for (window, cells) in tally.iter() {
        let mut per_tenant: BTreeMap<&str, u64> = BTreeMap::new();
        for ((tenant, _), cell) in cells {
            *per_tenant.entry(tenant.as_str()).or_default() += cell.admitted;
        }
        for (tenant, total) in per_tenant {
            assert!(
                total <= LIMIT,
                "{scope}, window {window}: {tenant} admitted {total} > {LIMIT}"
            );
        }
    }
}

/// The ledger's calls a second with `hot` identities over their floor on
/// eu's one instance (nothing else calls the global redis meanwhile), and
/// the leased identities eu counts.
async fn ledger_with_hot(
    regions: &Regions,
    hot: usize,
    tally: &Tally,
    shed: &Arc<Shed>,
) -> (f64, f64) {
    let tenants = (0..hot).map(|i| format!("hot-{i}")).collect();
    let every = Duration::from_micros(HOT_EVERY_US / hot as u64);
    let to = Target {
        base: regions.bases[EU].clone(),
        policy: "leased",
        region: EU,
        cost: HOT_COST,
    };
    let load = stream(to, tenants, every, (tally, shed));
    // Each identity is turned away by its floor, gets an entry, and is
    // renewed from the next period on.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let (before, from) = (
        regions.global.script_calls().expect("INFO commandstats"),
        wall_ms(),
    );
    tokio::time::sleep(Duration::from_millis(4_000)).await;
    let calls = regions.global.script_calls().expect("INFO commandstats") - before;
    let seconds = (wall_ms() - from) as f64 / 1000.0;
    let text = metrics_text(&reqwest::Client::new(), &regions.bases[EU]).await;
    load.abort();
    let leased = metric(
        &text,
        r#"tollgate_lease_identities{policy="leased",region="eu"}"#,
    )
    .expect("leased identities in eu");
    (calls as f64 / seconds, leased)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark of about 100 s: bench/identity_leases.sh runs it"]
async fn leased_beside_global_and_split_per_tenant_and_ledger_calls_against_hot_identities() {
    let regions = Regions::start();
    let lease = &regions.scope_explained("leased")["lease"];
    assert_eq!(
        lease["floors"],
        serde_json::json!({"ap": 4, "eu": 3, "us": 3})
    );
    let split = &regions.scope_explained("split")["split"]["shares"];
    assert_eq!(split, &serde_json::json!({"eu": 33, "us": 33, "ap": 34}));
    let per_call = lease["identities_per_call"].as_u64().expect("per call");
    let calls_a_second = lease["ledger_calls_per_second_per_instance"]["up_to_identities_per_call"]
        .as_f64()
        .expect("calls a second");
    let printed_convergence = lease["converges_within_ms"].as_u64().expect("convergence");
    let shed = Arc::new(Shed::default());
    for scope in SCOPES {
        let tally: Tally = Arc::default();
        let (measured, converged) = workloads(&regions, scope, &tally, &shed).await;
        assert_within_limit(scope, &tally);
        for m in &measured {
            if scope == "split" {
                let share = SPLIT_SHARES[m.region];
                assert!(
                    m.windows.iter().all(|&n| n == share),
                    "split: {} in {} must spend exactly its share {share}: {:?}",
                    m.tenant,
                    REGIONS[m.region],
                    m.windows
                );
            }
            let windows: Vec<String> = m.windows.iter().map(u64::to_string).collect();
            let mean = m.windows.iter().sum::<u64>() as f64 / m.windows.len().max(1) as f64;
            eprintln!(
                "utilisation\t{}\t{}\t{} in {}\t{:.0}%\t{}",
                m.workload,
                m.scope,
                m.tenant,
                REGIONS[m.region],
                100.0 * mean / LIMIT as f64,
                windows.join(" ")
            );
        }
        let converged = converged.map_or("never\t-".to_owned(), |c| {
            format!("{}\t{}", c.from_move_ms, c.from_next_window_ms)
        });
        eprintln!("convergence\t{scope}\t{converged}\t{printed_convergence}");
        shed.report(scope);
    }
    let tally: Tally = Arc::default();
    for hot in HOT {
        let (measured, leased) = ledger_with_hot(&regions, hot, &tally, &shed).await;
        let explained = hot.div_ceil(per_call as usize) as f64 * calls_a_second;
        assert_eq!(leased, hot as f64, "every hot identity holds a lease entry");
        eprintln!("hot\t{hot}\t{measured:.2}\t{explained}");
        shed.report(&format!("{hot} hot"));
    }
    assert_within_limit("leased, hot identities", &tally);
}
