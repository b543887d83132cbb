//! Leases follow identities (docs/config.md, Leased shares): three regions
//! (eu, us, ap), each a redis-server of its own and a `tollgate serve`, one
//! global redis-server holding the ledger behind a delay proxy per region
//! (30–80 ms each way, jittered). A per-tenant `leased` fixed window of 100
//! a second, floors 10% (ap 4, eu 3, us 3: largest remainder in name
//! order), so one tenant busy in eu or us alone may spend up to 93 there.
//!
//! In turn: two tenants busy in two regions at once; 200 small tenants
//! trickling in eu beside one big tenant in us (with the ledger's calls
//! counted on the global redis); the big tenant moving regions; then the
//! faults — eu cut off from the ledger, the global redis restarted empty,
//! us's wall clock stepped 30 s ahead then 30 s behind mid-grant. Over
//! every window of the whole run, no tenant is admitted more than its
//! limit, all regions together.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{
    TollgateProcess, decided_window, explain_json, libfaketime, metric, metrics_text, wall_ms,
};
use tollgate_testkit::{Delay, DelayProxy, Link, RedisServer};

const REGIONS: [&str; 3] = ["eu", "us", "ap"];
const LIMIT: u64 = 100;
const FLOORS: [u64; 3] = [3, 3, 4];
const SPARE: u64 = 90;
/// Steady state: at least 90% of the limit in the region the tenant is
/// busy in.
const STEADY: u64 = 90;
/// Tenants the driver can make busy (each up to ~300 checks a second in a
/// region: 3 tasks, one check every 10 ms each).
const TENANTS: [&str; 3] = ["tenant-a", "tenant-b", "tenant-c"];
const SMALL_TENANTS: usize = 200;

fn config(regional: &str, global: &str) -> String {
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
  - {{name: api, algorithm: fixed_window, limit: {LIMIT}, window: 1s, on_store_failure: fail_closed,
      scope: {{leased: {{term: 1s, renew: 250ms, floor: 10%, identities: 1000}}}}}}
"#
    )
}

/// Admissions (or rejections) per window (its end, in s since the epoch,
/// as the regional redises on this machine date it), per tenant and
/// region.
type Windows = BTreeMap<u64, BTreeMap<(String, usize), u64>>;

/// [`Windows`] as the driver's tasks fill them.
type Tally = Arc<Mutex<Windows>>;

/// Admissions, and rejections: a window in which a tenant was never
/// rejected shows what the driver asked, not what its share allowed.
#[derive(Clone, Default)]
struct Tallies {
    admitted: Tally,
    rejected: Tally,
}

/// Which tenant is busy in which region (index into REGIONS).
type Busy = Arc<Mutex<Vec<(&'static str, usize)>>>;

/// One check of `tenant` at `base`, tallied as admitted or rejected.
async fn check_once(
    client: &reqwest::Client,
    base: &str,
    tenant: &str,
    region: usize,
    tallies: &Tallies,
) {
    let body = format!(r#"{{"policy":"api","key":"{tenant}"}}"#);
    let Some((allowed, window)) = decided_window(client, base, &body).await else {
        return;
    };
    let tally = match allowed {
        true => &tallies.admitted,
        false => &tallies.rejected,
    };
    *tally
        .lock()
        .expect("tally")
        .entry(window)
        .or_default()
        .entry((tenant.to_owned(), region))
        .or_default() += 1;
}

/// The load driver: for each tenant and region, three tasks sending one
/// check every 10 ms while that pair is busy; and, while `small` is set,
/// 200 small tenants in eu, one check each every 2 s (100 a second in all),
/// well within each one's floor. Bounded: at most one check in flight a
/// task.
fn drive(
    bases: &[String],
    busy: &Busy,
    small: &Arc<AtomicBool>,
    tally: &Tallies,
) -> Vec<tokio::task::JoinHandle<()>> {
    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    for tenant in TENANTS {
        for (region, base) in bases.iter().enumerate() {
            for _ in 0..3 {
                let (client, base, busy, tally) = (
                    client.clone(),
                    base.clone(),
                    Arc::clone(busy),
                    tally.clone(),
                );
                tasks.push(tokio::spawn(async move {
                    let mut tick = tokio::time::interval(Duration::from_millis(10));
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    loop {
                        tick.tick().await;
                        if busy.lock().expect("busy").contains(&(tenant, region)) {
                            check_once(&client, &base, tenant, region, &tally).await;
                        }
                    }
                }));
            }
        }
    }
    let (base, small, tally) = (bases[0].clone(), Arc::clone(small), tally.clone());
    tasks.push(tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        let mut next = 0usize;
        loop {
            tick.tick().await;
            if small.load(Ordering::Relaxed) {
                let tenant = format!("small-{}", next % SMALL_TENANTS);
                next += 1;
                check_once(&client, &base, &tenant, 0, &tally).await;
            }
        }
    }));
    tasks
}

/// The current window's end, as the tally keys it.
fn window_now() -> u64 {
    wall_ms() / 1000 + 1
}

/// Makes `busy_now` busy for `seconds`; the whole windows it spanned.
async fn phase(
    busy_now: &[(&'static str, usize)],
    seconds: u64,
    busy: &Busy,
) -> std::ops::Range<u64> {
    *busy.lock().expect("busy") = busy_now.to_vec();
    let first = window_now() + 1;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    first..window_now()
}

/// What `tenant` was admitted in `region` in each of `windows`.
fn admitted(tally: &Tally, windows: std::ops::Range<u64>, tenant: &str, region: usize) -> Vec<u64> {
    let tally = tally.lock().expect("tally");
    windows
        .map(|w| {
            tally
                .get(&w)
                .and_then(|m| m.get(&(tenant.to_owned(), region)))
                .copied()
                .unwrap_or(0)
        })
        .collect()
}

/// Asserts `tenant` got at least 90% of its limit in `region` over
/// `windows`, in the median window (a loaded machine may delay one renewal
/// past the global store's timeout). A window in which it was admitted
/// some and rejected none meets the mark: its share was never reached
/// (a loaded machine's driver asked for less), so the share held.
fn assert_steady(
    tallies: &Tallies,
    windows: std::ops::Range<u64>,
    tenant: &str,
    region: usize,
    what: &str,
) {
    let got = admitted(&tallies.admitted, windows.clone(), tenant, region);
    let rejected = admitted(&tallies.rejected, windows, tenant, region);
    assert!(!got.is_empty(), "{what}: no whole window");
    let mut met: Vec<u64> = got
        .iter()
        .zip(&rejected)
        .map(|(&n, &no)| if n > 0 && no == 0 { n.max(STEADY) } else { n })
        .collect();
    met.sort_unstable();
    let median = met[met.len() / 2];
    assert!(
        median >= STEADY,
        "{what}: {tenant} in {} got {median} in the median window, below {STEADY} of {LIMIT}: \
         admitted {got:?}, rejected {rejected:?}",
        REGIONS[region]
    );
}

/// us's wall clock: libfaketime reads this file at every wall clock read
/// and leaves the monotonic clock real.
fn set_offset(file: &Path, offset: &str) {
    let next = file.with_extension("next");
    std::fs::write(&next, offset).expect("write the offset");
    std::fs::rename(&next, file).expect("replace the offset file");
}

/// The three regions, kept up until the test ends, and what `explain`
/// printed for eu's lease.
struct Regions {
    redises: Vec<RedisServer>,
    links: Vec<DelayProxy>,
    processes: Vec<TollgateProcess>,
    bases: Vec<String>,
    converge_ms: u64,
    calls_a_second: f64,
}

/// Starts each region in turn: its redis, its link to the global redis
/// (`far` away), its `tollgate serve` (us's under libfaketime reading
/// `clock_file`); eu's lease is checked as `explain` prints it on the way,
/// before its process starts.
fn start_regions(dir: &Path, global_addr: SocketAddr, far: Delay, clock_file: &Path) -> Regions {
    let (mut redises, mut links, mut processes, mut bases) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut converge_ms = 0;
    let mut calls_a_second = 0.0;
    for region in REGIONS {
        let redis = RedisServer::start().expect("a region's redis");
        let link = DelayProxy::start(global_addr, far).expect("a region's link");
        let path = dir.join(format!("{region}.yaml"));
        std::fs::write(&path, config(&redis.url(), &link.url())).expect("write config");
        if region == "eu" {
            (calls_a_second, converge_ms) = explained_lease(&path);
        }
        let clock_env;
        let mut env = vec![("TOLLGATE_REGION", region)];
        if region == "us" {
            clock_env = [
                ("LD_PRELOAD", libfaketime()),
                (
                    "FAKETIME_TIMESTAMP_FILE",
                    clock_file.to_str().expect("utf-8").to_owned(),
                ),
                ("FAKETIME_NO_CACHE", "1".to_owned()),
                ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
            ];
            env.extend(clock_env.iter().map(|(k, v)| (*k, v.as_str())));
        }
        let process = TollgateProcess::spawn(&path, &env);
        bases.push(process.base.clone());
        processes.push(process);
        redises.push(redis);
        links.push(link);
    }
    Regions {
        redises,
        links,
        processes,
        bases,
        converge_ms,
        calls_a_second,
    }
}

/// Asserts eu's lease as `tollgate explain` prints it, and returns the two
/// figures the run is held to: its ledger calls a second and the
/// convergence it promises.
fn explained_lease(path: &Path) -> (f64, u64) {
    let scope = explain_json(path, &["--region", "eu"])["policies"][0]["scope"].clone();
    assert_eq!(scope["bound"]["admitted_at_most"], LIMIT);
    let lease = &scope["lease"];
    assert_eq!(
        lease["floors"],
        serde_json::json!({"ap": 4, "eu": 3, "us": 3})
    );
    assert_eq!(lease["spare"], SPARE);
    assert_eq!(lease["per_identity"], true);
    assert_eq!(lease["max_identities"], 1000);
    assert_eq!(lease["identities_per_call"], 100);
    let calls_a_second = lease["ledger_calls_per_second_per_instance"]["up_to_identities_per_call"]
        .as_f64()
        .expect("calls a second");
    assert_eq!(calls_a_second, 4.0, "1 call every 250ms");
    let converge_ms = lease["converges_within_ms"].as_u64().expect("convergence");
    (calls_a_second, converge_ms)
}

/// Many small, one big: 200 small tenants in eu, c busy in us. The
/// ledger's calls are counted once a and b have let go (a term). The
/// phase's windows, the ledger calls counted and over how many seconds.
async fn many_small_one_big(
    global: &RedisServer,
    small: &AtomicBool,
    busy: &Busy,
    tallies: &Tallies,
    eu_base: &str,
    calls_a_second: f64,
) -> (Range<u64>, u64, f64) {
    let (us, c) = (1, TENANTS[2]);
    small.store(true, Ordering::Relaxed);
    *busy.lock().expect("busy") = vec![(c, us)];
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let calls_before = global.script_calls().expect("INFO commandstats");
    let counted_from = wall_ms();
    let big = phase(&[(c, us)], 6, busy).await;
    let calls = global.script_calls().expect("INFO commandstats") - calls_before;
    let seconds = (wall_ms() - counted_from) as f64 / 1000.0;
    small.store(false, Ordering::Relaxed);
    assert_steady(
        tallies,
        big.start..big.end,
        c,
        us,
        "one big beside many small",
    );
    // Only us has an identity over its floor: one instance's calls; the
    // small tenants cost the ledger nothing (25% slack for a loaded
    // machine's keeper running late and early).
    let printed = calls_a_second * seconds;
    assert!(
        (calls as f64) <= printed * 1.25 + 2.0,
        "{calls} ledger calls in {seconds:.1}s, above the printed {calls_a_second}/s for one instance"
    );
    let eu_metrics = metrics_text(&reqwest::Client::new(), eu_base).await;
    assert_eq!(
        metric(
            &eu_metrics,
            r#"tollgate_lease_identities{policy="api",region="eu"}"#
        ),
        Some(0.0),
        "the small tenants hold no lease entry"
    );
    let small_admitted: u64 = {
        let tally = tallies.admitted.lock().expect("tally");
        big.clone()
            .flat_map(|w| tally.get(&w).into_iter().flat_map(|m| m.iter()))
            .filter(|((t, _), _)| t.starts_with("small-"))
            .map(|(_, n)| *n)
            .sum()
    };
    assert!(small_admitted > 0, "the small tenants were admitted");
    (big, calls, seconds)
}

/// One line a window, for the benchmark: phase, window, a b c in each
/// region; then the ledger's calls a second.
fn print_windows(tally: &Windows, phases: &[(&str, Range<u64>)], calls: u64, seconds: f64) {
    for (name, range) in phases {
        for w in range.clone() {
            let of = |t: &str, r: usize| {
                tally
                    .get(&w)
                    .and_then(|m| m.get(&(t.to_owned(), r)))
                    .copied()
                    .unwrap_or(0)
            };
            let row: Vec<String> = TENANTS
                .iter()
                .flat_map(|t| (0..3).map(move |r| (*t, r)))
                .map(|(t, r)| of(t, r).to_string())
                .collect();
            eprintln!("window\t{name}\t{w}\t{}", row.join("\t"));
        }
    }
    eprintln!("ledger\tcalls_per_second\t{:.2}", calls as f64 / seconds);
}

/// The bound: no tenant above its limit in any window, all regions
/// together (the small tenants included).
fn assert_no_tenant_over_its_limit(tally: &Windows) {
    for (window, counts) in tally.iter() {
        let mut per_tenant: BTreeMap<&str, u64> = BTreeMap::new();
        for ((tenant, _), n) in counts {
            *per_tenant.entry(tenant.as_str()).or_default() += n;
        }
        for (tenant, total) in per_tenant {
            assert!(
                total <= LIMIT,
                "window {window}: {tenant} admitted {total} > {LIMIT}: {counts:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenant_leases_its_own_spare_where_it_is_busy_within_its_bound_through_every_fault() {
    let mut global = RedisServer::start().expect("the global redis");
    let global_addr = format!("127.0.0.1:{}", global.port())
        .parse()
        .expect("global address");
    let far = Delay {
        min: Duration::from_millis(30),
        max: Duration::from_millis(80),
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let clock_file = dir.path().join("faketime");
    set_offset(&clock_file, "+0");
    let Regions {
        redises,
        links,
        processes,
        bases,
        converge_ms,
        calls_a_second,
    } = start_regions(dir.path(), global_addr, far, &clock_file);
    let (eu, us) = (0, 1);
    let (a, b, c) = (TENANTS[0], TENANTS[1], TENANTS[2]);
    let busy: Busy = Arc::new(Mutex::new(Vec::new()));
    let small = Arc::new(AtomicBool::new(false));
    let tallies = Tallies::default();
    let tally = Arc::clone(&tallies.admitted);
    let tasks = drive(&bases, &busy, &small, &tallies);
    let mut phases = Vec::new();

    // A new ledger grants nothing for a term and a rest: floors only.
    let start = phase(&[(a, eu), (b, us)], 3, &busy).await;
    phases.push(("new ledger", start));
    // Two tenants, two regions: a busy only in eu, b only in us, at once.
    let two = phase(&[(a, eu), (b, us)], 6, &busy).await;
    assert_steady(&tallies, two.start + 1..two.end, a, eu, "two tenants");
    assert_steady(&tallies, two.start + 1..two.end, b, us, "two tenants");
    phases.push(("two tenants", two));

    let (big, calls, seconds) =
        many_small_one_big(&global, &small, &busy, &tallies, &bases[eu], calls_a_second).await;
    phases.push(("many small, one big", big));

    // c moves from us to eu: within the printed convergence (plus a
    // window's slack for the window it falls in) it has nearly all of its
    // limit there.
    *busy.lock().expect("busy") = vec![(c, eu)];
    let shifted_ms = wall_ms();
    let moved = phase(&[(c, eu)], 7, &busy).await;
    let settled = (shifted_ms + converge_ms) / 1000 + 2;
    assert_steady(&tallies, settled..moved.end, c, eu, "c moved to eu");
    phases.push(("c moved", moved));

    // eu cut off from the ledger: a's grant runs out within a term, then
    // it spends its floor alone, exactly; b in us keeps its share.
    links[eu].set_link(Link::BlackHole);
    let cut = phase(&[(a, eu), (b, us)], 5, &busy).await;
    let floor_only = admitted(&tally, cut.start + 2..cut.end, a, eu);
    assert!(
        floor_only.iter().all(|&n| n == FLOORS[eu]),
        "a in eu cut off must spend exactly its floor: {floor_only:?}"
    );
    assert_steady(&tallies, cut.start + 1..cut.end, b, us, "eu cut off");
    links[eu].set_link(Link::Pass);
    phases.push(("eu cut off", cut));

    // The global redis restarted empty: a new ledger grants nothing for a
    // term and a rest while the old grants run out.
    global.restart().expect("the global redis restarts");
    let restarted = phase(&[(a, eu), (b, us)], 5, &busy).await;
    phases.push(("global restarted", restarted));

    // us's wall clock stepped 30 s ahead, then 30 s behind, mid-grant: b
    // keeps its share (terms run on the monotonic clock).
    let steady = phase(&[(a, eu), (b, us)], 4, &busy).await;
    assert_steady(
        &tallies,
        steady.start + 1..steady.end,
        b,
        us,
        "before the steps",
    );
    phases.push(("recovered", steady));
    set_offset(&clock_file, "+30s");
    let ahead = phase(&[(a, eu), (b, us)], 3, &busy).await;
    set_offset(&clock_file, "-30s");
    let behind = phase(&[(a, eu), (b, us)], 3, &busy).await;
    set_offset(&clock_file, "+0");
    assert_steady(
        &tallies,
        ahead.start..behind.end,
        b,
        us,
        "us's clock stepped",
    );
    phases.push(("us 30s ahead", ahead));
    phases.push(("us 30s behind", behind));
    *busy.lock().expect("busy") = Vec::new();
    for task in tasks {
        task.abort();
    }

    let tally = tally.lock().expect("tally");
    print_windows(&tally, &phases, calls, seconds);
    assert_no_tenant_over_its_limit(&tally);
    drop(tally);
    let _ = (redises, processes, links);
}
