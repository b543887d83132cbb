//! The page in a real headless Chromium (driven by chromedriver) against a
//! real `tollgate serve` on a real redis-server, under load: it asks for
//! the admin token, renders, updates every second, shows a rejection spike
//! (the exact count the clients were refused, and the hot identity hashed)
//! and a store outage (redis-server stopped: the circuit open, degraded
//! decisions growing), then the store back. Screenshots are kept under the
//! target directory.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tollgate_testkit::RedisServer;

use crate::support::TollgateProcess;
use crate::webdriver::Browser;

const ADMIN_TOKEN: &str = "ui-admin-token-0123456789";
const IDENTITY_KEY: &str = "0123456789abcdef0123456789abcdef";
/// What the spike's identity sends at once to `login`, over its limit of
/// 20 a minute.
const SPIKE: usize = 96;

/// Background traffic: `tasks` identities, each a check every 50 ms
/// (20 a second, under the limit of 100), until `stop`.
fn load(base: &str, tasks: usize, stop: &Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<()>> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    (0..tasks)
        .map(|task| {
            let (client, stop) = (client.clone(), Arc::clone(stop));
            let url = format!("{base}/v1/check");
            tokio::spawn(async move {
                let body = format!(r#"{{"policy":"api","key":"tenant-{task}"}}"#);
                while !stop.load(Ordering::Relaxed) {
                    let _ = client.post(&url).body(body.clone()).send().await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        })
        .collect()
}

/// The spike: [`SPIKE`] checks of one identity from 8 connections at once;
/// how many were refused.
async fn spike(base: &str) -> u64 {
    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let client = client.clone();
        let url = format!("{base}/v1/check");
        tasks.push(tokio::spawn(async move {
            let mut refused = 0;
            for _ in 0..SPIKE / 8 {
                let answer: serde_json::Value = client
                    .post(&url)
                    .body(r#"{"policy":"login","key":"spike"}"#)
                    .send()
                    .await
                    .expect("a check")
                    .json()
                    .await
                    .expect("a decision");
                refused += u64::from(answer["allowed"] == false);
            }
            refused
        }));
    }
    let mut refused = 0;
    for task in tasks {
        refused += task.await.expect("spike task");
    }
    refused
}

/// Reads `selector`'s text every 250 ms until `done` holds of it, for at
/// most `secs` seconds; the text it held.
async fn wait_for(
    browser: &Browser,
    selector: &str,
    secs: u64,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> String {
    let mut last = None;
    for _ in 0..secs * 4 {
        last = browser.text(selector).await;
        if let Some(text) = last.as_deref()
            && done(text)
        {
            return text.to_owned();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("the page never showed {what} within {secs} s ({selector}: {last:?})");
}

fn number(text: &str) -> u64 {
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a count: {text:?}"))
}

/// Where a screenshot is kept, printed.
fn artifact(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    println!("screenshot: {}", path.display());
    path
}

/// `tollgate serve` on `redis` with the page on, the admin token and the
/// identity key set; the config's directory lives as long as it.
fn serve(redis: &RedisServer) -> (TollgateProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(
        &config,
        format!(
            r#"server: {{ui: on, watch_interval_ms: 0}}
store: {{redis: {{url: "{}", timeout: 200ms}}}}
policies:
  - {{name: api, algorithm: fixed_window, limit: 100, window: 1s, on_store_failure: fail_open}}
  - {{name: login, algorithm: fixed_window, limit: 20, window: 1m, on_store_failure: fail_closed}}
"#,
            redis.url()
        ),
    )
    .expect("write the config");
    let tollgate = TollgateProcess::spawn(
        &config,
        &[
            ("TOLLGATE_ADMIN_TOKEN", ADMIN_TOKEN),
            ("TOLLGATE_IDENTITY_KEY", IDENTITY_KEY),
        ],
    );
    (tollgate, dir)
}

/// Without the token the page asks for it; with it, it renders and
/// updates.
async fn renders_and_updates(browser: &Browser, base: &str) {
    // Without the token the page asks for it, showing nothing.
    browser.go(&format!("{base}/ui")).await;
    wait_for(browser, "#status", 20, "that it needs the token", |t| {
        t == "needs the admin token"
    })
    .await;
    assert_eq!(
        browser
            .run("return document.getElementById('token-form').hidden;")
            .await,
        false
    );
    assert_eq!(browser.text("[data-policy=\"api\"]").await, None);

    // With it (in the fragment, never sent to the server) it renders, and
    // takes the token out of the address.
    browser.go(&format!("{base}/ui#token={ADMIN_TOKEN}")).await;
    let decisions = "[data-policy=\"api\"] [data-field=\"decisions\"]";
    let first = number(&wait_for(browser, decisions, 20, "the api policy", |_| true).await);
    assert_eq!(browser.run("return location.hash;").await, "");
    assert_eq!(
        browser
            .text("[data-store=\"global\"] [data-field=\"circuit\"]")
            .await
            .as_deref(),
        Some("circuit closed")
    );

    // It updates: the count grows between two reads, and a rate is shown.
    let grown = wait_for(browser, decisions, 20, "more decisions", |t| {
        number(t) > first
    })
    .await;
    assert!(number(&grown) > first);
    let rate = wait_for(
        browser,
        "[data-policy=\"api\"] [data-field=\"decision_rate\"]",
        20,
        "a decision rate",
        |t| t.parse::<f64>().is_ok_and(|r| r > 0.0),
    )
    .await;
    println!("decision rate shown: {rate}/s");
}

/// A rejection spike: exactly the refusals the clients got, and the
/// identity behind them, hashed.
async fn shows_a_rejection_spike(browser: &Browser, base: &str) {
    let refused = spike(base).await;
    assert!(
        refused > 0,
        "a spike of {SPIKE} over a limit of 20 is refused"
    );
    let rejected = "[data-policy=\"login\"] [data-field=\"rejected\"]";
    wait_for(browser, rejected, 20, "the spike's rejections", |t| {
        number(t) == refused
    })
    .await;
    // And the chart's rejections line rose off its baseline.
    let points = browser
        .run("return document.querySelector('[data-policy=\"login\"] polyline.rejections').getAttribute('points');")
        .await;
    let highest = points
        .as_str()
        .expect("points")
        .split_whitespace()
        .filter_map(|xy| xy.split(',').nth(1)?.parse::<f64>().ok())
        .fold(f64::MAX, f64::min);
    assert!(highest < 80.0, "the rejections line is flat: {points}");
    let hot = browser
        .run("return Array.from(document.querySelectorAll('[data-policy=\"login\"] td.identity')).map(e => e.textContent);")
        .await;
    let names: Vec<&str> = hot
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(!names.is_empty(), "hot identities are listed");
    assert!(names.iter().all(|n| n.starts_with("hash:")), "{names:?}");
    let page = browser.run("return document.body.innerText;").await;
    let page = page.as_str().expect("text");
    assert!(
        !page.contains("spike") && !page.contains("tenant-"),
        "an identity as sent: {page}"
    );
    browser.screenshot(&artifact("live-page-spike.png")).await;
}

/// A store outage and its end.
async fn shows_a_store_outage(browser: &Browser, redis: &RedisServer) {
    // A store outage: redis-server stopped, the circuit opens and the
    // policy fails open, each such decision counted as degraded.
    redis.pause().expect("SIGSTOP redis-server");
    let circuit = "[data-store=\"global\"] [data-field=\"circuit\"]";
    wait_for(browser, circuit, 30, "the circuit open", |t| {
        t == "circuit open"
    })
    .await;
    let degraded = "[data-policy=\"api\"] [data-field=\"degraded\"]";
    let some = number(
        &wait_for(browser, degraded, 20, "degraded decisions", |t| {
            number(t) > 0
        })
        .await,
    );
    wait_for(browser, degraded, 20, "degraded decisions growing", |t| {
        number(t) > some
    })
    .await;
    browser.screenshot(&artifact("live-page-outage.png")).await;

    // The store back: the circuit closes again.
    redis.resume().expect("SIGCONT redis-server");
    wait_for(browser, circuit, 30, "the circuit closed again", |t| {
        t == "circuit closed"
    })
    .await;
    browser.screenshot(&artifact("live-page.png")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_page_shows_load_a_rejection_spike_and_a_store_outage_in_chromium() {
    let browser = Browser::start(1400, 1000).await;
    let redis = RedisServer::start().expect("redis-server starts");
    let (tollgate, _dir) = serve(&redis);
    let base = tollgate.base.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let background = load(&base, 4, &stop);
    renders_and_updates(&browser, &base).await;
    shows_a_rejection_spike(&browser, &base).await;
    shows_a_store_outage(&browser, &redis).await;
    stop.store(true, Ordering::Relaxed);
    for task in background {
        task.await.expect("load task");
    }
    drop(tollgate);
}
