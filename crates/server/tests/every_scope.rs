//! Every scope side by side across three regions (docs/design.md §7): each
//! region a redis-server and a `tollgate serve`, one global redis-server
//! behind a delay proxy per region (30–80 ms each way), and five policies
//! alike but for their scope. A bounded load driver puts all traffic in one
//! region, then spreads it; over every window, what each policy admits in
//! all regions stays within the bound `tollgate explain --json` printed.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{TollgateProcess, admitted_window, explain_json};
use tollgate_testkit::{Delay, DelayProxy, RedisServer};

const REGIONS: [&str; 3] = ["a", "b", "c"];
const POLICIES: [&str; 5] = ["inst", "reg", "spl", "lea", "glo"];

fn config(regional: &str, global: &str) -> String {
    let policy = |name: &str, scope: &str| {
        format!(
            "  - {{name: {name}, algorithm: fixed_window, limit: 30, window: 1s, scope: {scope}}}\n"
        )
    };
    format!(
        "server: {{watch_interval_ms: 0}}\nregions: {{a: {{instances: 1}}, b: {{instances: 1}}, c: {{instances: 1}}}}\n\
         stores:\n  local: memory\n  regional: {{redis: {{url: \"{regional}\"}}}}\n  \
         global: {{redis: {{url: \"{global}\", timeout: 400ms}}}}\npolicies:\n{}{}{}{}{}",
        policy("inst", "instance"),
        policy("reg", "region"),
        policy("spl", "split"),
        policy("lea", "{leased: {term: 1s, renew: 250ms, floor: 50%}}"),
        policy("glo", "global"),
    )
}

/// Admissions per policy per window (its end, in s, as the deciding
/// store's clock dates it; all are this machine's).
type Tally = Arc<Mutex<BTreeMap<(&'static str, u64), u64>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scope_admits_within_its_printed_bound_across_three_regions() {
    let global = RedisServer::start().expect("the global redis");
    let global_addr = format!("127.0.0.1:{}", global.port())
        .parse()
        .expect("global address");
    let far = Delay {
        min: Duration::from_millis(30),
        max: Duration::from_millis(80),
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let mut kept = Vec::new();
    let mut bases = Vec::new();
    let mut bounds = BTreeMap::new();
    for region in REGIONS {
        let redis = RedisServer::start().expect("a region's redis");
        let link = DelayProxy::start(global_addr, far).expect("a region's link");
        let path = dir.path().join(format!("{region}.yaml"));
        std::fs::write(&path, config(&redis.url(), &link.url())).expect("write config");
        if region == "a" {
            let explained = explain_json(&path, &["--region", "a"]);
            for p in explained["policies"].as_array().expect("policies") {
                let name = p["name"].as_str().expect("name").to_owned();
                let bound = p["scope"]["bound"]["admitted_at_most"]
                    .as_u64()
                    .expect("a number");
                bounds.insert(name, bound);
            }
        }
        let process = TollgateProcess::spawn(&path, &[("TOLLGATE_REGION", region)]);
        bases.push((region, process.base.clone()));
        kept.push((redis, link, process));
    }
    let stated: Vec<(&str, u64)> = bounds.iter().map(|(n, b)| (n.as_str(), *b)).collect();
    assert_eq!(
        stated,
        [
            ("glo", 30),
            ("inst", 90),
            ("lea", 30),
            ("reg", 90),
            ("spl", 30)
        ]
    );

    let busy: Arc<Mutex<Vec<&'static str>>> = Arc::new(Mutex::new(vec!["a"]));
    let tally: Tally = Arc::new(Mutex::new(BTreeMap::new()));
    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    // One task a process and policy, a check every 20 ms while its region
    // is busy: at most 15 requests in flight.
    for (region, base) in &bases {
        for policy in POLICIES {
            let (client, base, busy, tally) = (
                client.clone(),
                base.clone(),
                Arc::clone(&busy),
                Arc::clone(&tally),
            );
            let region: &'static str = region;
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(20));
                loop {
                    tick.tick().await;
                    if !busy.lock().expect("busy").contains(&region) {
                        continue;
                    }
                    let body = format!(r#"{{"policy":"{policy}","key":"tenant-1"}}"#);
                    let Some(window) = admitted_window(&client, &base, &body).await else {
                        continue;
                    };
                    *tally
                        .lock()
                        .expect("tally")
                        .entry((policy, window))
                        .or_default() += 1;
                }
            }));
        }
    }
    // All traffic in a, then spread over the three.
    tokio::time::sleep(Duration::from_secs(3)).await;
    *busy.lock().expect("busy") = REGIONS.to_vec();
    tokio::time::sleep(Duration::from_secs(3)).await;
    for task in tasks {
        task.abort();
    }

    let tally = tally.lock().expect("tally");
    let mut admitted: BTreeMap<&str, u64> = BTreeMap::new();
    for ((policy, window), n) in tally.iter() {
        let bound = bounds[*policy];
        assert!(
            *n <= bound,
            "{policy} admitted {n} in window {window}, above its bound {bound}: {tally:?}"
        );
        *admitted.entry(policy).or_default() += n;
    }
    for policy in POLICIES {
        assert!(
            admitted.get(policy).is_some_and(|n| *n > 0),
            "{policy} admitted nothing: {tally:?}"
        );
    }
    // Split's bound is tight: once every region is busy, each spends its
    // share (10) and a window admits the whole limit.
    let split_max = tally
        .iter()
        .filter(|((policy, _), _)| *policy == "spl")
        .map(|(_, n)| *n)
        .max();
    assert_eq!(split_max, Some(30), "{tally:?}");
    drop(global);
}
