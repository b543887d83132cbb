//! A lease's term is a duration on the monotonic clock, whatever happens to
//! the wall clock (docs/config.md, Leased shares, rule 2): one `tollgate
//! serve` in region eu under libfaketime, its `leased` policy's ledger in a
//! real global redis-server, gets a grant above its floor; then the ledger
//! stops answering (SIGSTOP) and the process's wall clock is stepped back
//! 30 s, as NTP or an operator steps a real machine's (its monotonic clock
//! stays real). The instance is back on its floor — share and decisions —
//! within a term of its last answered renewal, not 30 s later, and takes
//! its grant back once the ledger answers again.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use support::{
    TollgateProcess, admitted_window, check_json, explain_json, libfaketime, metric, metrics_text,
    wall_ms,
};
use tokio::time::Instant;
use tollgate_testkit::RedisServer;

/// 40 a 1 s window; floors 50% (eu 10, us 10), spare 20: eu alone busy
/// leases it all and spends 30.
const LIMIT: u64 = 40;
const FLOOR: u64 = 10;
const SPARE: u64 = 20;
const TERM_MS: u64 = 1_000;
const RENEW_MS: u64 = 250;
/// The global store's timeout: what a renewal to a stopped ledger waits.
const LEDGER_TIMEOUT_MS: u64 = 200;
/// What a loaded machine may add to a bound: scheduling, a scrape.
const SLACK_MS: u64 = 2_000;
/// How far the wall clock is stepped back.
const STEP_MS: u64 = 30_000;

fn config(regional: &str, global: &str) -> String {
    format!(
        r#"server: {{watch_interval_ms: 0}}
region: eu
regions: {{eu: {{}}, us: {{}}}}
stores:
  local: memory
  regional: {{redis: {{url: "{regional}"}}}}
  global: {{redis: {{url: "{global}", timeout: {LEDGER_TIMEOUT_MS}ms}}}}
policies:
  - {{name: api, algorithm: fixed_window, limit: {LIMIT}, window: 1s, on_store_failure: fail_closed,
      scope: {{leased: {{term: {TERM_MS}ms, renew: {RENEW_MS}ms, floor: 50%}}}}}}
  # Decided on this process's memory store, dated by its wall clock: its
  # reset tells the test where that clock stands.
  - {{name: wall, algorithm: fixed_window, limit: 1000000000, window: 1h, scope: instance}}
"#
    )
}

/// The libfaketime offset file the process reads at every clock read.
struct WallClock {
    file: std::path::PathBuf,
}

impl WallClock {
    fn new(dir: &Path) -> Self {
        let clock = Self {
            file: dir.join("faketime"),
        };
        clock.set("+0");
        clock
    }

    /// Writes `offset` (libfaketime's `+Ns`/`-Ns`) whole: a rename, so the
    /// process never reads a half-written file.
    fn set(&self, offset: &str) {
        let next = self.file.with_extension("next");
        std::fs::write(&next, offset).expect("write the offset");
        std::fs::rename(&next, &self.file).expect("replace the offset file");
    }

    /// The environment that preloads libfaketime, reading this file at
    /// every read of the wall clock, and leaving the monotonic clock real.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("LD_PRELOAD", libfaketime()),
            (
                "FAKETIME_TIMESTAMP_FILE",
                self.file.to_str().expect("a UTF-8 path").to_owned(),
            ),
            ("FAKETIME_NO_CACHE", "1".to_owned()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
        ]
    }
}

/// How far the process's wall clock is behind this one's, in ms, read off
/// the `wall` policy's hour window on its memory store (its reset is the
/// hour's end minus the process's now). Each probe is a new identity: a
/// state already kept would date the decision no earlier than itself.
async fn behind_ms(client: &reqwest::Client, base: &str) -> i64 {
    static PROBES: AtomicU64 = AtomicU64::new(0);
    let probe = PROBES.fetch_add(1, Ordering::Relaxed);
    let answer = check_json(
        client,
        base,
        format!(r#"{{"policy":"wall","key":"probe-{probe}"}}"#),
    )
    .await;
    let ours = wall_ms();
    let reset = answer["reset_after_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("a reset: {answer}"));
    let hour = 3_600_000_i64;
    let theirs_into_hour = hour - i64::try_from(reset).expect("a reset within the hour");
    let ours_into_hour = i64::try_from(ours).expect("ms") % hour;
    // Within half an hour either way.
    (ours_into_hour - theirs_into_hour + hour + hour / 2) % hour - hour / 2
}

/// Admissions of `api` per 1 s window (its end, in s, as the regional
/// Redis's clock dates it; this machine's).
type Tally = Arc<Mutex<BTreeMap<u64, u64>>>;

/// One check of `api` every 5 ms, tallying what is admitted.
fn drive(client: &reqwest::Client, base: &str, tally: &Tally) -> tokio::task::JoinHandle<()> {
    let (client, base, tally) = (client.clone(), base.to_owned(), Arc::clone(tally));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(5));
        loop {
            tick.tick().await;
            let body = r#"{"policy":"api","key":"tenant-1"}"#;
            let Some(window) = admitted_window(&client, &base, body).await else {
                continue;
            };
            *tally.lock().expect("tally").entry(window).or_default() += 1;
        }
    })
}

/// The share `/metrics` says eu's instance may spend now.
async fn share(client: &reqwest::Client, base: &str) -> Option<u64> {
    let text = metrics_text(client, base).await;
    metric(&text, r#"tollgate_lease_share{policy="api",region="eu"}"#).map(|v| v as u64)
}

/// Polls the share every 20 ms until it is `units`; when it was seen so,
/// or `None` past `within`.
async fn share_reaches(
    client: &reqwest::Client,
    base: &str,
    units: u64,
    within: Duration,
) -> Option<Instant> {
    let start = Instant::now();
    while start.elapsed() <= within {
        if share(client, base).await == Some(units) {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Whether a window admitted floor + grant: only a grant admits that many.
fn spent_the_grant(tally: &Tally) -> bool {
    let tally = tally.lock().expect("tally");
    tally.values().any(|n| *n == FLOOR + SPARE)
}

/// Waits up to 10 s for a window that spent floor + grant, and asserts
/// one did: the share `/metrics` shows is also what decisions admit.
async fn assert_a_window_spends_the_grant(tally: &Tally) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !spent_the_grant(tally) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        spent_the_grant(tally),
        "no window spent floor + grant: {:?}",
        tally.lock().expect("tally")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_stepped_back_mid_lease_ends_the_grant_a_term_after_its_last_renewal() {
    let regional = RedisServer::start().expect("eu's redis");
    let global = RedisServer::start().expect("the global redis");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, config(&regional.url(), &global.url())).expect("write config");
    let lease = &explain_json(&path, &[])["policies"][0]["scope"]["lease"];
    assert_eq!(
        (&lease["floors"], &lease["spare"], &lease["rest_ms"]),
        (
            &serde_json::json!({"eu": FLOOR, "us": FLOOR}),
            &Value::from(SPARE),
            &Value::from(1_000)
        ),
        "{lease}"
    );
    let clock = WallClock::new(dir.path());
    let env = clock.env();
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.push(("TOLLGATE_REGION", "eu"));
    let process = TollgateProcess::spawn(&path, &env);
    let base = process.base.as_str();
    let client = reqwest::Client::new();
    let before = behind_ms(&client, base).await;
    assert!(
        before.abs() < 1_000,
        "the process's clock is ours: {before}"
    );

    // eu alone busy: once the new ledger has waited out a term and a rest
    // it grants eu the whole spare, and eu spends it.
    let tally: Tally = Arc::new(Mutex::new(BTreeMap::new()));
    let driver = drive(&client, base, &tally);
    assert!(
        share_reaches(&client, base, FLOOR + SPARE, Duration::from_secs(20))
            .await
            .is_some(),
        "no grant above the floor: {}",
        metrics_text(&client, base).await
    );
    assert_a_window_spends_the_grant(&tally).await;

    // The ledger stops answering and the wall clock steps back 30 s. The
    // last renewal answered was sent before now: its grant ends within a
    // term, and the next renewal to fail after that (sent a renewal period
    // later at most, failing after the store's timeout) puts the share on
    // the floor.
    let cut = Instant::now();
    global.pause().expect("SIGSTOP the global redis");
    clock.set(&format!("-{}s", STEP_MS / 1000));
    let bound = Duration::from_millis(TERM_MS + RENEW_MS + LEDGER_TIMEOUT_MS + SLACK_MS);
    // Polled well past the bound, so a failure says when it fell.
    let fell = share_reaches(&client, base, FLOOR, bound + Duration::from_secs(40)).await;
    let fell_at = wall_ms();
    let behind = behind_ms(&client, base).await;
    assert!(
        behind.abs_diff(STEP_MS as i64) < 1_000,
        "the process's wall clock is {behind} ms behind ours, not {STEP_MS}"
    );
    let fell = fell.map(|at| at - cut);
    assert!(
        fell.is_some_and(|after| after <= bound),
        "the share fell to the floor {fell:?} after the ledger stopped; at most {bound:?} (a term after the last renewal answered)"
    );
    let text = metrics_text(&client, base).await;
    assert_eq!(
        metric(
            &text,
            r#"tollgate_lease_renewals_total{policy="api",region="eu",outcome="expired"}"#
        ),
        Some(1.0),
        "the grant ran out unrenewed, once:\n{text}"
    );
    // Decisions follow: every whole window that began after the fall
    // admits the floor, exactly (the driver asks far more).
    let first = fell_at.div_ceil(1000) + 1;
    let last = first + 1;
    // Until both have ended (with a little for answers in flight).
    let ended = (last * 1000 + 100).saturating_sub(wall_ms());
    tokio::time::sleep(Duration::from_millis(ended)).await;
    let on_floor: Vec<u64> = {
        let tally = tally.lock().expect("tally");
        (first..=last)
            .map(|w| tally.get(&w).copied().unwrap_or(0))
            .collect()
    };
    assert_eq!(
        on_floor,
        [FLOOR, FLOOR],
        "windows {first}..={last}, after the fall"
    );

    // The ledger back, the wall clock still 30 s behind: renewals are
    // scheduled on the monotonic clock, so the next one asks, and eu takes
    // back the units it let go (its own resting units come back at once).
    global.resume().expect("SIGCONT the global redis");
    assert!(
        share_reaches(
            &client,
            base,
            FLOOR + SPARE,
            Duration::from_millis(TERM_MS + RENEW_MS + 5_000)
        )
        .await
        .is_some(),
        "the grant never came back: {}",
        metrics_text(&client, base).await
    );
    driver.abort();
    drop(process);
}
