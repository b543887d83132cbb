//! Shared by the redis_* tests: real Redis processes, traces, and the
//! memory store as the reference (it is the core's transitions, stored).
#![allow(dead_code)]

use std::sync::Arc;

use serde::Deserialize;
use tollgate_core::{
    Decision, Identity, Limits, ManualClock, Policy, PolicySet, Rate, Taken, Window,
};
use tollgate_store::{Check, MemoryStore, MemoryStoreConfig, RedisConfig, RedisStore};
use tollgate_testkit::{RedisCluster, RedisServer};

pub const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/vectors");

#[derive(Debug, Clone, Deserialize)]
pub struct Event {
    pub t_ms: u64,
    pub policy: String,
    pub key: String,
    #[serde(default = "one")]
    pub cost: u64,
}

fn one() -> u64 {
    1
}

#[derive(Debug, Deserialize, PartialEq, Eq)]
pub struct Expected {
    pub allowed: bool,
    pub limit: u64,
    pub remaining: i64,
    pub retry_after_ms: Option<u64>,
    pub reset_after_ms: u64,
}

impl From<Decision> for Expected {
    fn from(d: Decision) -> Self {
        Self {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            retry_after_ms: d.retry_after_ms,
            reset_after_ms: d.reset_after_ms,
        }
    }
}

pub fn vector_policies() -> PolicySet {
    let text = std::fs::read_to_string(format!("{VECTORS}/policies.yaml")).expect("policies.yaml");
    PolicySet::from_yaml(&text).expect("valid policies")
}

pub fn vector_events() -> Vec<Event> {
    jsonl(&format!("{VECTORS}/events.jsonl"))
}

pub fn vector_expected() -> Vec<Expected> {
    jsonl(&format!("{VECTORS}/expected.jsonl"))
}

fn jsonl<T: for<'de> Deserialize<'de>>(path: &str) -> Vec<T> {
    std::fs::read_to_string(path)
        .expect("vector file")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a vector line"))
        .collect()
}

/// The memory store on a manual clock: the reference every store must match.
pub struct Reference {
    pub clock: Arc<ManualClock>,
    pub store: MemoryStore,
}

impl Reference {
    pub fn new() -> Self {
        let clock = Arc::new(ManualClock::new(0));
        let store = MemoryStore::new(clock.clone(), MemoryStoreConfig::default());
        Self { clock, store }
    }

    pub fn decide(&self, check: Check<'_>, t_ms: u64) -> Decision {
        self.clock.set(t_ms);
        self.store.decide_now(check).expect("the store has room")
    }

    pub fn decide_all(&self, checks: &[Check<'_>], t_ms: u64) -> Vec<Decision> {
        self.clock.set(t_ms);
        self.store
            .decide_all_now(checks)
            .expect("the store has room")
    }

    pub fn take(&self, check: Check<'_>, t_ms: u64) -> (Decision, Taken) {
        self.clock.set(t_ms);
        self.store.take(check).expect("the store has room")
    }

    pub fn give_back(&self, check: Check<'_>, taken: Taken, t_ms: u64) -> u64 {
        self.clock.set(t_ms);
        self.store.give_back(check, taken)
    }
}

/// A Redis topology under test, with a store connected to it.
pub enum Topology {
    Standalone(RedisServer),
    Cluster(RedisCluster),
}

impl Topology {
    pub fn standalone() -> Self {
        Self::Standalone(RedisServer::start().expect("redis-server starts"))
    }

    pub fn cluster() -> Self {
        Self::Cluster(RedisCluster::start(3).expect("a 3-master cluster forms"))
    }

    pub fn config(&self) -> RedisConfig {
        match self {
            Self::Standalone(server) => RedisConfig::standalone(server.url()),
            Self::Cluster(cluster) => RedisConfig::cluster(cluster.urls()),
        }
    }

    pub async fn store(&self) -> RedisStore {
        self.store_with(self.config()).await
    }

    pub async fn store_with(&self, mut config: RedisConfig) -> RedisStore {
        // Generous: two cores are shared with builds and other tests.
        config.timeout_ms = 10_000;
        RedisStore::connect(&config).await.expect("connects")
    }

    /// `redis-cli` against every data node.
    pub fn ports(&self) -> Vec<u16> {
        match self {
            Self::Standalone(server) => vec![server.port()],
            Self::Cluster(cluster) => cluster.nodes().iter().map(RedisServer::port).collect(),
        }
    }

    /// Every key on every node, with its PTTL.
    pub fn keys_with_pttl(&self) -> Vec<(String, i64)> {
        let mut out = Vec::new();
        for port in self.ports() {
            let keys = tollgate_testkit::cli(port, &["--scan", "--pattern", "*"]).expect("scan");
            for key in keys.lines().filter(|k| !k.is_empty()) {
                let pttl = tollgate_testkit::cli(port, &["pttl", key]).expect("pttl");
                out.push((key.to_owned(), pttl.trim().parse().expect("an integer")));
            }
        }
        out
    }

    /// Keys holding decision state: all but the gcra scale registries,
    /// which outlive the states that name them.
    pub fn state_key_count(&self) -> usize {
        self.keys_with_pttl()
            .iter()
            .filter(|(key, _)| !key.ends_with(":gcra:scales"))
            .count()
    }

    pub fn key_count(&self) -> u64 {
        self.ports()
            .into_iter()
            .map(|port| {
                tollgate_testkit::cli(port, &["dbsize"])
                    .expect("dbsize")
                    .trim()
                    .parse::<u64>()
                    .expect("an integer")
            })
            .sum()
    }
}

/// splitmix64: a seeded generator, so every failing trace can be rerun.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// Limits of every algorithm with awkward scales, small enough to exhaust.
pub fn limit_menu() -> Vec<Limits> {
    let rate = |c, n, p| Rate::new(c, n, p).expect("valid rate");
    let window = |l, w| Window::new(l, w).expect("valid window");
    let mut menu = Vec::new();
    for (c, n, p) in [
        (20, 5, 1_000),
        (7, 100, 60_000),
        (3, 1, 3_600_000),
        (1, 1, 1_000),
        (5, 7, 3),
        (12, 1_000, 1),
        (9, 3, 86_400_000),
    ] {
        menu.push(Limits::TokenBucket(rate(c, n, p)));
        menu.push(Limits::Gcra(rate(c, n, p)));
    }
    for (l, w) in [
        (10, 1_000),
        (7, 700),
        (1, 50),
        (100, 60_000),
        (3, 86_400_000),
    ] {
        menu.push(Limits::FixedWindow(window(l, w)));
        menu.push(Limits::SlidingWindow(window(l, w)));
        menu.push(Limits::SlidingLog(window(l.min(50), w)));
    }
    // A long log (bucketed past 64 entries), reached by limit changes too.
    menu.push(Limits::SlidingLog(window(10_000, 3_600_000)));
    menu
}

/// A random trace step: which policy (by name, with its limits now),
/// identity, cost and time.
pub struct Step {
    pub policy: Policy,
    pub identity: Identity,
    pub cost: u64,
    pub t_ms: u64,
}

/// A random trace over a few policies and identities: bursts, idle gaps,
/// clocks stepping back, cost 0 and costs above the limit, and limits that
/// change under a policy's name (same algorithm, so the state carries over).
pub fn random_trace(seed: u64, len: usize) -> Vec<Step> {
    let mut rng = Rng::new(seed);
    let menu = limit_menu();
    let mut policies: Vec<Policy> = (0..4)
        .map(|i| Policy::new(format!("p{i}"), *rng.pick(&menu)))
        .collect();
    let identities: Vec<Identity> = ["a", "b", "tenant}x{", "ü"]
        .iter()
        .map(|v| Identity::value(v))
        .chain([Identity::composite([("t", "x"), ("r", "/y")]).expect("valid")])
        .collect();
    let mut t: u64 = 1_700_000_000_000 + rng.below(1_000_000);
    let mut steps = Vec::with_capacity(len);
    for _ in 0..len {
        match rng.below(100) {
            0..=59 => t += rng.below(200),
            60..=79 => t += rng.below(5_000),
            80..=84 => t += rng.below(10_000_000),
            85..=86 => t += rng.below(200_000_000_000),
            87..=94 => t = t.saturating_sub(rng.below(3_000)),
            _ => t = t.saturating_sub(rng.below(3_600_000)),
        }
        let which = rng.below(policies.len() as u64) as usize;
        if rng.below(40) == 0 {
            // A limit change under the same name and algorithm.
            let algorithm = policies[which].algorithm();
            let same: Vec<Limits> = menu
                .iter()
                .copied()
                .filter(|l| l.algorithm() == algorithm)
                .collect();
            policies[which] = Policy::new(policies[which].name().to_owned(), *rng.pick(&same));
        }
        let policy = policies[which].clone();
        let limit = policy.limits().limit();
        let cost = match rng.below(100) {
            0..=9 => 0,
            10..=64 => 1,
            65..=89 => 1 + rng.below(limit),
            90..=97 => limit + 1 + rng.below(3),
            _ => u64::MAX - rng.below(2),
        };
        steps.push(Step {
            policy,
            identity: rng.pick(&identities).clone(),
            cost,
            t_ms: t,
        });
    }
    steps
}
