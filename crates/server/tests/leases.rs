//! The `leased` scope across three regions (docs/config.md, Leased shares): each a
//! redis-server of its own and two `tollgate serve` processes, one global
//! redis-server holding the ledger behind a delay proxy per region (30–80 ms
//! each way, jittered). A bounded load driver moves traffic between regions
//! and the faults come one after another (a region's processes restarted
//! mid-lease, a region cut off from the ledger, the global redis restarted
//! empty), with region b's clocks 30 s ahead and c's 30 s behind
//! (libfaketime); over every window, what all regions admit together stays
//! within the bound `tollgate explain` prints, and the busy region gets the
//! spare within a few renewal periods.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{TollgateProcess, admitted_window, explain_json, libfaketime, wall_ms};
use tollgate_testkit::{Delay, DelayProxy, Link, RedisServer};

const REGIONS: [&str; 3] = ["a", "b", "c"];
/// 60 a 1 s window; floors 50% (10 a region), spare 30; terms of 1 s
/// renewed every 250 ms; a window rests 1 s before it moves.
const LIMIT: u64 = 60;
const FLOOR: u64 = 10;
const SPARE: u64 = 30;

fn config(regional: &str, global: &str) -> String {
    format!(
        r#"server: {{watch_interval_ms: 0}}
regions:
  a: {{instances: 2}}
  b: {{instances: 2}}
  c: {{instances: 2}}
stores:
  regional: {{redis: {{url: "{regional}"}}}}
  global: {{redis: {{url: "{global}", timeout: 400ms}}}}
policies:
  - {{name: api, algorithm: fixed_window, limit: {LIMIT}, window: 1s, on_store_failure: fail_closed,
      scope: {{leased: {{term: 1s, renew: 250ms, floor: 50%}}}}}}
"#
    )
}

/// Admissions per region per window (the window's end, in s since the
/// epoch, as Redis's clock on this machine dates it).
type Windows = BTreeMap<u64, BTreeMap<&'static str, u64>>;

/// [`Windows`] as the driver's tasks fill them.
type Tally = Arc<Mutex<Windows>>;

/// Which regions the driver sends to.
type Busy = Arc<Mutex<Vec<&'static str>>>;

/// Each process's region and base URL (a restarted process has a new one).
type Bases = Arc<Mutex<Vec<(&'static str, String)>>>;

/// The load driver: for each process, two tasks sending one check every
/// 10 ms while their region is busy (bounded: at most 2 in flight a
/// process), tallying each admission in the window it fell in.
fn drive(bases: &Bases, busy: &Busy, tally: &Tally) -> Vec<tokio::task::JoinHandle<()>> {
    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    let processes = bases.lock().expect("bases").len();
    for index in 0..processes {
        for _ in 0..2 {
            let (client, bases, busy, tally) = (
                client.clone(),
                Arc::clone(bases),
                Arc::clone(busy),
                Arc::clone(tally),
            );
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(10));
                loop {
                    tick.tick().await;
                    let (region, base) = bases.lock().expect("bases")[index].clone();
                    if !busy.lock().expect("busy").contains(&region) {
                        continue;
                    }
                    let body = r#"{"policy":"api","key":"tenant-1"}"#;
                    let Some(window) = admitted_window(&client, &base, body).await else {
                        continue;
                    };
                    *tally
                        .lock()
                        .expect("tally")
                        .entry(window)
                        .or_default()
                        .entry(region)
                        .or_default() += 1;
                }
            }));
        }
    }
    tasks
}

/// A `tollgate serve` of `region`: b's clocks 30 s ahead, c's 30 s behind
/// (libfaketime preloaded into the process itself, so the handle kills
/// tollgate and not a wrapper that would leave it running).
fn spawn(region: &str, config: &Path) -> TollgateProcess {
    let skew = match region {
        "b" => Some("+30s"),
        "c" => Some("-30s"),
        _ => None,
    };
    match skew {
        None => TollgateProcess::spawn(config, &[("TOLLGATE_REGION", region)]),
        Some(offset) => {
            let library = libfaketime();
            TollgateProcess::spawn(
                config,
                &[
                    ("TOLLGATE_REGION", region),
                    ("LD_PRELOAD", &library),
                    ("FAKETIME", offset),
                ],
            )
        }
    }
}

/// The current window's end, as the tally keys it.
fn window_now() -> u64 {
    wall_ms() / 1000 + 1
}

/// Runs `busy` for `seconds`, then returns the windows it spanned (whole
/// ones only).
async fn phase(busy_now: &[&'static str], seconds: u64, busy: &Busy) -> std::ops::Range<u64> {
    *busy.lock().expect("busy") = busy_now.to_vec();
    let first = window_now() + 1;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    first..window_now()
}

fn admitted(tally: &Tally, windows: std::ops::Range<u64>, region: &str) -> Vec<u64> {
    let tally = tally.lock().expect("tally");
    windows
        .map(|w| {
            tally
                .get(&w)
                .and_then(|r| r.get(region))
                .copied()
                .unwrap_or(0)
        })
        .collect()
}

/// The three regions, kept up until the test ends: each region's redis,
/// link to the global redis and config, and its two processes (a's first).
struct Regions {
    redises: Vec<RedisServer>,
    links: Vec<DelayProxy>,
    paths: Vec<PathBuf>,
    bases: Bases,
    spawned: Vec<TollgateProcess>,
}

/// Starts each region in turn: its redis, its link to the global redis
/// (`far` away), its two `tollgate serve`s; a's lease is checked as
/// `explain` prints it on the way, before its processes start.
fn start_regions(dir: &Path, global_addr: SocketAddr, far: Delay) -> Regions {
    let mut redises = Vec::new();
    let mut links = Vec::new();
    let mut paths = Vec::new();
    let bases: Bases = Arc::new(Mutex::new(Vec::new()));
    let mut spawned = Vec::new();
    for region in REGIONS {
        let redis = RedisServer::start().expect("a region's redis");
        let link = DelayProxy::start(global_addr, far).expect("a region's link");
        // Cut off while the processes start, so the ledger is made by the
        // first renewal after every region is up (below), not by the first
        // process's: a new ledger's term and rest then cover the first phase.
        link.set_link(Link::BlackHole);
        let path = dir.join(format!("{region}.yaml"));
        std::fs::write(&path, config(&redis.url(), &link.url())).expect("write config");
        if region == "a" {
            assert_explained_lease(&path);
        }
        for _ in 0..2 {
            let process = spawn(region, &path);
            bases
                .lock()
                .expect("bases")
                .push((region, process.base.clone()));
            spawned.push(process);
        }
        redises.push(redis);
        links.push(link);
        paths.push(path);
    }
    Regions {
        redises,
        links,
        paths,
        bases,
        spawned,
    }
}

/// Asserts a's lease, in full, as `tollgate explain` prints it: the
/// figures the phases below are held to.
fn assert_explained_lease(path: &Path) {
    let scope = explain_json(path, &["--region", "a"])["policies"][0]["scope"].clone();
    assert_eq!(scope["name"], "leased");
    assert_eq!(scope["bound"]["admitted_at_most"], LIMIT);
    assert_eq!(
        scope["lease"],
        serde_json::json!({
            "floors": {"a": FLOOR, "b": FLOOR, "c": FLOOR},
            "floor_percent": 50,
            "spare": SPARE,
            "term_ms": 1000,
            "renew_ms": 250,
            "rest_ms": 1000,
            "converges_within_ms": 3150,
            "this_region": "a",
            "floor_here": FLOOR,
            "per_identity": true,
            "max_identities": 1000,
            "identities_per_call": 100,
            "ledger_calls_per_second_per_instance": {
                "up_to_identities_per_call": 4.0,
                "at_max_identities": 40.0,
            },
        })
    );
}

/// One line a window, for bench/leases.sh: phase, window, a b c.
fn print_windows(tally: &Windows, phases: &[(&str, &Range<u64>)]) {
    for &(name, range) in phases {
        for w in range.clone() {
            let of = |r: &str| tally.get(&w).and_then(|m| m.get(r)).copied().unwrap_or(0);
            eprintln!("window\t{name}\t{w}\t{}\t{}\t{}", of("a"), of("b"), of("c"));
        }
    }
}

/// Every window of the run: all regions together within the bound
/// explain printed.
fn assert_within_the_bound(tally: &Windows) {
    for (window, regions) in tally.iter() {
        let total: u64 = regions.values().sum();
        assert!(
            total <= LIMIT,
            "window {window} admitted {total} > {LIMIT}: {regions:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_regions_share_a_leased_limit_by_demand_within_its_bound_through_every_fault() {
    let global = RedisServer::start().expect("the global redis");
    let global_addr = format!("127.0.0.1:{}", global.port())
        .parse()
        .expect("global address");
    let far = Delay {
        min: Duration::from_millis(30),
        max: Duration::from_millis(80),
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let Regions {
        redises,
        links,
        paths,
        bases,
        mut spawned,
    } = start_regions(dir.path(), global_addr, far);
    let busy: Busy = Arc::new(Mutex::new(Vec::new()));
    let tally: Tally = Arc::new(Mutex::new(BTreeMap::new()));
    let tasks = drive(&bases, &busy, &tally);

    // A new ledger grants nothing for a term and a rest: every region on
    // its floor. The ledger is made once the links pass.
    assert_eq!(
        global
            .cli(&["EXISTS", "tollgate:api:lease"])
            .expect("EXISTS")
            .trim(),
        "0"
    );
    for link in &links {
        link.set_link(Link::Pass);
    }
    let start = phase(&["a", "b", "c"], 2, &busy).await;
    for region in REGIONS {
        assert!(
            admitted(&tally, start.clone(), region)
                .iter()
                .all(|&n| n <= FLOOR),
            "{region} above its floor before any grant: {:?}",
            admitted(&tally, start.clone(), region)
        );
    }
    // All traffic in a: it gets the whole spare.
    let in_a = phase(&["a"], 5, &busy).await;
    let a = admitted(&tally, in_a.clone(), "a");
    assert!(a.contains(&(FLOOR + SPARE)), "a never got the spare: {a:?}");
    // a's processes restarted mid-lease: the new ones start on the floor,
    // ask at once, and get the spare back (the ledger still holds it for a).
    for (index, process) in spawned.iter_mut().take(2).enumerate() {
        *process = spawn("a", &paths[0]);
        bases.lock().expect("bases")[index] = ("a", process.base.clone());
    }
    let a_restarted = phase(&["a"], 3, &busy).await;
    let a = admitted(&tally, a_restarted.clone(), "a");
    assert!(
        a.contains(&(FLOOR + SPARE)),
        "restarted a never got the spare back: {a:?}"
    );
    // What each of a's processes holds, as /metrics says.
    let base = bases.lock().expect("bases")[0].1.clone();
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let line = format!(
        r#"tollgate_lease_share{{policy="api",region="a"}} {}"#,
        FLOOR + SPARE
    );
    assert!(
        metrics.lines().any(|l| l == line),
        "missing {line}:\n{metrics}"
    );
    // Shifted to b within a second: a lets go, its units rest, b gets them.
    let in_b = phase(&["b"], 5, &busy).await;
    let b = admitted(&tally, in_b.clone(), "b");
    assert!(b.contains(&(FLOOR + SPARE)), "b never got the spare: {b:?}");
    // Spread: every region busy; the three share the spare by demand (how
    // much of it they use is the benchmark's to measure: bench/leases.sh).
    let spread = phase(&["a", "b", "c"], 4, &busy).await;
    // c cut off from the ledger: its lease runs out within a term and it
    // spends its floor alone; the others lease what it let go.
    links[2].set_link(Link::BlackHole);
    let cut = phase(&["a", "b", "c"], 5, &busy).await;
    let c = admitted(&tally, cut.start + 2..cut.end, "c");
    assert!(
        c.iter().all(|&n| n <= FLOOR) && c.contains(&FLOOR),
        "c cut off must spend exactly its floor: {c:?}"
    );
    links[2].set_link(Link::Pass);
    // The global redis restarted empty: a new ledger grants nothing for a
    // term and a rest while the old grants run out.
    let mut global = global;
    global.restart().expect("the global redis restarts");
    let restarted = phase(&["a", "b", "c"], 5, &busy).await;
    *busy.lock().expect("busy") = Vec::new();
    for task in tasks {
        task.abort();
    }

    // Every window of every phase: within the bound explain printed.
    let tally = tally.lock().expect("tally");
    print_windows(
        &tally,
        &[
            ("start", &start),
            ("in a", &in_a),
            ("a restarted", &a_restarted),
            ("in b", &in_b),
            ("spread", &spread),
            ("c cut off", &cut),
            ("global restarted", &restarted),
        ],
    );
    assert_within_the_bound(&tally);
    drop(tally);
    let _ = (redises, spawned);
}
