//! The Redis store over a far link: a real redis-server behind the delay
//! proxy, 60 ms each way (a 120 ms round trip), with the default 250 ms
//! store timeout. A first decision must cost one round trip: every script
//! and known gcra scale is on the server before it (the prelude sent when
//! a connection opens), also after a restart that emptied the server.
//! Redis's own command and error counts are the evidence, never timings:
//! with two round trips inside 250 ms, an answered decision is the proof.
//! The same counts hold the store's own count of its script calls.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use tollgate_core::{Decision, Identity, Limits, Policy, Rate};
use tollgate_store::{
    Check, RedisConfig, RedisStore, Store, gcra_scale_tag, lua_source, state_key,
};
use tollgate_testkit::{Delay, DelayProxy, RedisServer};

const ONE_WAY: Duration = Duration::from_millis(60);
const TIMEOUT_MS: u64 = 250;

fn far_link(server: &RedisServer) -> DelayProxy {
    let addr: SocketAddr = format!("127.0.0.1:{}", server.port())
        .parse()
        .expect("an address");
    DelayProxy::start(
        addr,
        Delay {
            min: ONE_WAY,
            max: ONE_WAY,
        },
    )
    .expect("the delay proxy")
}

fn config(link: &DelayProxy) -> RedisConfig {
    let mut config = RedisConfig::standalone(link.url());
    config.timeout_ms = TIMEOUT_MS;
    config
}

fn hourly(name: &str, limits: fn(Rate) -> Limits) -> Policy {
    Policy::new(name, limits(Rate::new(5, 5, 3_600_000).expect("a rate")))
}

/// Redis's counts since it started: calls by command, errors by prefix.
fn counts(server: &RedisServer) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for section in ["commandstats", "errorstats"] {
        let info = server.cli(&["INFO", section]).expect("INFO");
        for line in info.lines() {
            let Some((name, fields)) = line.trim().split_once(':') else {
                continue;
            };
            let value = fields
                .split(',')
                .find_map(|f| f.strip_prefix("calls=").or(f.strip_prefix("count=")))
                .and_then(|v| v.parse().ok());
            if let Some(value) = value {
                counts.insert(name.to_owned(), value);
            }
        }
    }
    counts
}

/// How many more of `name` the server counted in `after` than in `before`.
fn more(before: &HashMap<String, u64>, after: &HashMap<String, u64>, name: &str) -> u64 {
    after.get(name).copied().unwrap_or(0) - before.get(name).copied().unwrap_or(0)
}

async fn decide(store: &RedisStore, policy: &Policy, identity: &str) -> Decision {
    let started = Instant::now();
    let decision = store
        .decide(Check {
            policy,
            identity: &Identity::value(identity),
            cost: 1,
        })
        .await
        .expect("decided within the store timeout");
    eprintln!(
        "decision over a {} ms round trip: {} ms",
        2 * ONE_WAY.as_millis(),
        started.elapsed().as_millis()
    );
    decision
}

/// The script calls and NOSCRIPT errors `call` cost the server.
async fn script_calls<T>(server: &RedisServer, call: impl Future<Output = T>) -> (T, [u64; 3]) {
    let before = counts(server);
    let out = call.await;
    let after = counts(server);
    let calls = [
        more(&before, &after, "cmdstat_evalsha"),
        more(&before, &after, "cmdstat_eval"),
        more(&before, &after, "errorstat_NOSCRIPT"),
    ];
    (out, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_decision_over_a_far_link_costs_one_round_trip() {
    let server = RedisServer::start().expect("redis");
    let link = far_link(&server);
    let store = RedisStore::connect(&config(&link)).await.expect("connects");
    let policy = hourly("login", Limits::TokenBucket);
    let (decision, calls) = script_calls(&server, decide(&store, &policy, "alice")).await;
    assert!(decision.allowed);
    assert_eq!(decision.remaining, 4);
    // [EVALSHA, EVAL, NOSCRIPT]: one call by SHA1, nothing sent again.
    assert_eq!(calls, [1, 0, 0]);
}

/// A single-threaded runtime (an HTTP worker) decides through its own
/// lane, which opens in the background: its first decision does not wait.
#[tokio::test(flavor = "current_thread")]
async fn a_worker_threads_first_decision_over_a_far_link_costs_one_round_trip() {
    let server = RedisServer::start().expect("redis");
    let link = far_link(&server);
    let store = RedisStore::connect(&config(&link)).await.expect("connects");
    let policy = hourly("login", Limits::TokenBucket);
    let (decision, calls) = script_calls(&server, decide(&store, &policy, "alice")).await;
    assert!(decision.allowed);
    assert_eq!(decision.remaining, 4);
    assert_eq!(calls, [1, 0, 0]);
    for remaining in [3, 2, 1] {
        let (decision, calls) = script_calls(&server, decide(&store, &policy, "alice")).await;
        assert_eq!((decision.allowed, decision.remaining), (true, remaining));
        assert_eq!(calls, [1, 0, 0]);
    }
}

/// The registry's tag for the hourly 5-per-hour scale, if it holds one.
fn registered_tag(server: &RedisServer, policy: &str) -> String {
    server
        .cli(&[
            "HGET",
            &format!("tollgate:{policy}:gcra:scales"),
            "5:1:720000",
        ])
        .expect("HGET")
        .trim()
        .to_owned()
}

fn state(server: &RedisServer, policy: &Policy, identity: &str) -> String {
    let key = state_key("tollgate", policy, &Identity::value(identity));
    let key = String::from_utf8(key).expect("a text key");
    server.cli(&["GET", &key]).expect("GET").trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_gcra_policys_first_decision_over_a_far_link_costs_one_round_trip() {
    let server = RedisServer::start().expect("redis");
    let link = far_link(&server);
    let store = RedisStore::connect(&config(&link)).await.expect("connects");
    let policy = hourly("api", Limits::Gcra);
    store.prepare(&[&policy]).await.expect("prepared");
    let tag = gcra_scale_tag("5:1:720000");
    assert_eq!(registered_tag(&server, "api"), tag.to_string());
    let (decision, calls) = script_calls(&server, decide(&store, &policy, "alice")).await;
    assert_eq!((decision.allowed, decision.remaining), (true, 4));
    assert_eq!(calls, [1, 0, 0]);
    // The smallest state: digits, ending in the scale's tag.
    let written = state(&server, &policy, "alice");
    assert!(written.bytes().all(|b| b.is_ascii_digit()), "{written}");
    assert!(written.ends_with(&format!("{tag:03}")), "{written}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gcra_scale_met_first_by_a_decision_is_registered_without_delaying_it() {
    let server = RedisServer::start().expect("redis");
    let link = far_link(&server);
    let store = RedisStore::connect(&config(&link)).await.expect("connects");
    let policy = hourly("api", Limits::Gcra);
    let decision = decide(&store, &policy, "alice").await;
    assert_eq!((decision.allowed, decision.remaining), (true, 4));
    // Written before the scale had a tag: the text form, naming its scale.
    assert!(state(&server, &policy, "alice").contains(':'));
    // The registration ran beside the decision; wait for it by count.
    let tag = gcra_scale_tag("5:1:720000").to_string();
    let mut polls = 0;
    while registered_tag(&server, "api") != tag {
        polls += 1;
        assert!(polls < 200, "the scale was never registered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Once registered, decisions write the integer form, and read the
    // text state exactly.
    let mut remaining = 4;
    let written = loop {
        let decision = decide(&store, &policy, "alice").await;
        remaining -= 1;
        assert_eq!((decision.allowed, decision.remaining), (true, remaining));
        let written = state(&server, &policy, "alice");
        if !written.contains(':') || remaining == 0 {
            break written;
        }
    };
    assert!(written.bytes().all(|b| b.is_ascii_digit()), "{written}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_empty_has_its_scripts_and_scales_back_before_the_next_decision() {
    let mut server = RedisServer::start().expect("redis");
    let link = far_link(&server);
    let store = RedisStore::connect(&config(&link)).await.expect("connects");
    let policy = hourly("api", Limits::Gcra);
    store.prepare(&[&policy]).await.expect("prepared");
    let decision = decide(&store, &policy, "alice").await;
    assert_eq!((decision.allowed, decision.remaining), (true, 4));
    server.restart().expect("restarts empty on the same port");
    // Calls fail until the store notices the dropped connection and opens
    // another (bounded in count, not in time); a ping charges nothing.
    let mut failures = 0;
    while store.ping().await.is_err() {
        failures += 1;
        assert!(failures < 100, "no connection after the restart");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The new connection's prelude registered the scale before any decision.
    let tag = gcra_scale_tag("5:1:720000");
    assert_eq!(registered_tag(&server, "api"), tag.to_string());
    let (decision, calls) = script_calls(&server, decide(&store, &policy, "alice")).await;
    // The restart lost the state: a full bucket, charged once.
    assert_eq!((decision.allowed, decision.remaining), (true, 4));
    assert_eq!(calls, [1, 0, 0]);
    let written = state(&server, &policy, "alice");
    assert!(written.ends_with(&format!("{tag:03}")), "{written}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_flushed_under_a_live_connection_are_sent_again_and_charge_once() {
    let server = RedisServer::start().expect("redis");
    let link = far_link(&server);
    let mut config = config(&link);
    // Three round trips here (NOSCRIPT, then the script's text).
    config.timeout_ms = 1_000;
    let store = RedisStore::connect(&config).await.expect("connects");
    let policy = hourly("login", Limits::TokenBucket);
    assert_eq!(decide(&store, &policy, "alice").await.remaining, 4);
    server.cli(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
    let (decision, calls) = script_calls(&server, decide(&store, &policy, "alice")).await;
    // NOSCRIPT means the script did not run: sent again, it charged once.
    assert_eq!((decision.allowed, decision.remaining), (true, 3));
    assert_eq!(calls, [1, 1, 1]);
    // The other scripts are loaded again too, in the background.
    let sha = redis::Script::new(lua_source::TOKEN_BUCKET)
        .get_hash()
        .to_owned();
    let gcra = redis::Script::new(lua_source::GCRA).get_hash().to_owned();
    let mut polls = 0;
    while server
        .cli(&["SCRIPT", "EXISTS", &sha, &gcra])
        .expect("SCRIPT EXISTS")
        .split_whitespace()
        .collect::<Vec<_>>()
        != ["1", "1"]
    {
        polls += 1;
        assert!(polls < 200, "the scripts were never loaded again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (decision, calls) = script_calls(&server, decide(&store, &policy, "alice")).await;
    assert_eq!((decision.allowed, decision.remaining), (true, 2));
    assert_eq!(calls, [1, 0, 0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_script_call_is_counted_as_the_server_counts_it() {
    let server = RedisServer::start().expect("redis");
    let store = RedisStore::connect(&RedisConfig::standalone(server.url()))
        .await
        .expect("connects");
    let policy = hourly("api", Limits::TokenBucket);
    let who = Identity::value("alice");
    let check = |cost| Check {
        policy: &policy,
        identity: &who,
        cost,
    };
    store.decide(check(1)).await.expect("a decision");
    let (_, taken) = store.take(check(3)).await.expect("a block");
    assert_eq!(store.give_back(check(2), taken).await.expect("given"), 2);
    // A resend after NOSCRIPT is a second call, as Redis counts it.
    server.cli(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
    store.decide(check(1)).await.expect("a decision");
    let counted = counts(&server);
    let calls = ["cmdstat_evalsha", "cmdstat_eval"]
        .map(|name| counted.get(name).copied().unwrap_or(0))
        .iter()
        .sum::<u64>();
    assert_eq!((store.script_calls(), calls), (5, 5));
}
