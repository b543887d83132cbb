//! The Lua scripts decide exactly as the core: the vectors and random
//! traces give the same decisions through the memory store, a standalone
//! Redis and a 3-master Redis Cluster (real redis-server processes).

mod redis_support;

use redis_support::{
    Expected, Reference, Topology, random_trace, vector_events, vector_expected, vector_policies,
};
use tollgate_core::{Decision, Identity, Limits, Policy, Rate, Taken, Window};
use tollgate_store::{Check, RedisStore, Store, key_slot};

async fn vectors_hold(topology: Topology) {
    let store = topology.store().await;
    let policies = vector_policies();
    let reference = Reference::new();
    let expected = vector_expected();
    let events = vector_events();
    assert_eq!(events.len(), expected.len());
    for (line, (event, want)) in events.iter().zip(expected).enumerate() {
        let policy = policies.get(&event.policy).expect("a known policy");
        let identity = Identity::value(&event.key);
        let check = Check {
            policy,
            identity: &identity,
            cost: event.cost,
        };
        let memory = Expected::from(reference.decide(check, event.t_ms));
        let redis = Expected::from(store.decide_at(check, event.t_ms).await.expect("decides"));
        assert_eq!(memory, want, "memory store, line {}", line + 1);
        assert_eq!(redis, want, "redis, line {}: {event:?}", line + 1);
    }
}

#[tokio::test]
async fn vectors_hold_on_standalone_redis() {
    vectors_hold(Topology::standalone()).await;
}

#[tokio::test]
async fn vectors_hold_on_a_redis_cluster() {
    vectors_hold(Topology::cluster()).await;
}

async fn random_traces_match_the_memory_store(topology: &Topology, seeds: std::ops::Range<u64>) {
    let store = topology.store().await;
    for seed in seeds {
        // A fresh prefix per seed: every trace starts from empty state.
        let mut config = topology.config();
        config.prefix = format!("seed{seed}");
        let store_for_seed = topology.store_with(config).await;
        let reference = Reference::new();
        for (i, step) in random_trace(seed, 600).iter().enumerate() {
            let check = Check {
                policy: &step.policy,
                identity: &step.identity,
                cost: step.cost,
            };
            let want = reference.decide(check, step.t_ms);
            let got = store_for_seed
                .decide_at(check, step.t_ms)
                .await
                .unwrap_or_else(|e| panic!("seed {seed} step {i}: {e}"));
            assert_eq!(
                got, want,
                "seed {seed} step {i}: {:?} {:?} cost {} at {}",
                step.policy, step.identity, step.cost, step.t_ms
            );
        }
    }
    drop(store);
}

#[tokio::test]
async fn random_traces_match_on_standalone_redis() {
    random_traces_match_the_memory_store(&Topology::standalone(), 0..12).await;
}

#[tokio::test]
async fn random_traces_match_on_a_redis_cluster() {
    random_traces_match_the_memory_store(&Topology::cluster(), 100..106).await;
}

/// Hot-lease blocks taken and given back amid random traces: the scripts'
/// take and give-back (take.lua, give_back.lua) answer exactly as the core
/// (`Limits::give_back`), whatever the policy, its changes and the clock do.
async fn random_takes_and_give_backs_match(topology: &Topology, seeds: std::ops::Range<u64>) {
    let mut given_somewhere = 0;
    let mut refunded_somewhere = 0;
    for seed in seeds {
        let mut config = topology.config();
        config.prefix = format!("give{seed}");
        let store = topology.store_with(config).await;
        let reference = Reference::new();
        let mut takes: Vec<(usize, Taken)> = Vec::new();
        let trace = random_trace(seed, 400);
        for (i, step) in trace.iter().enumerate() {
            let check = Check {
                policy: &step.policy,
                identity: &step.identity,
                cost: step.cost,
            };
            let at = format!(
                "seed {seed} step {i}: {:?} cost {} at {}",
                step.policy, step.cost, step.t_ms
            );
            match i % 3 {
                0 => {
                    let want = reference.take(check, step.t_ms);
                    let got = store.take_at(check, step.t_ms).await.expect("takes");
                    assert_eq!(got, want, "{at}");
                    if want.0.allowed && step.cost > 0 {
                        takes.push((i, want.1));
                    }
                }
                1 if !takes.is_empty() => {
                    // Give back part of an earlier take of this policy name
                    // and identity, if any (else of another key: nothing).
                    let (from, taken) = takes.swap_remove(i % takes.len());
                    // Now and then a refund: units back whose take is
                    // unknown (Envoy's is_negative_hits).
                    let refund = i % 4 == 1;
                    let taken = if refund { Taken::REFUND } else { taken };
                    let owner = &trace[from];
                    // Mostly under the take's own policy; now and then
                    // under another name (another key: nothing back).
                    let policy = if i % 5 == 1 {
                        &step.policy
                    } else {
                        &owner.policy
                    };
                    let back = Check {
                        policy,
                        identity: &owner.identity,
                        cost: owner.cost.min(1 + (step.cost % 50)),
                    };
                    let want = reference.give_back(back, taken, step.t_ms);
                    let got = store
                        .give_back_at(back, taken, step.t_ms)
                        .await
                        .expect("gives back");
                    assert_eq!(got, want, "{at}: give back {} of step {from}", back.cost);
                    if refund {
                        refunded_somewhere += got;
                    } else {
                        given_somewhere += got;
                    }
                    eprintln!(
                        "GIVE {at} owner {:?} back {} got {got} taken {taken:?}",
                        owner.identity, back.cost
                    );
                }
                _ => {
                    let want = reference.decide(check, step.t_ms);
                    let got = store.decide_at(check, step.t_ms).await.expect("decides");
                    assert_eq!(got, want, "{at}");
                }
            }
        }
    }
    assert!(given_somewhere > 0, "the traces gave something back");
    assert!(refunded_somewhere > 0, "the traces refunded something");
}

#[tokio::test]
async fn random_takes_and_give_backs_match_on_standalone_redis() {
    random_takes_and_give_backs_match(&Topology::standalone(), 0..12).await;
}

#[tokio::test]
async fn random_takes_and_give_backs_match_on_a_redis_cluster() {
    random_takes_and_give_backs_match(&Topology::cluster(), 200..204).await;
}

/// decide_all over random groups of checks, against the memory store.
/// With `mixed`, each check keeps its own identity: on a Cluster the group
/// then spans slots and is decided in two phases, which (with no other
/// instance racing) must match the memory store all the same.
async fn random_all_or_nothing_matches(topology: &Topology, seed: u64, mixed: bool) {
    let mut config = topology.config();
    config.prefix = format!("all{seed}{mixed}");
    let store = topology.store_with(config).await;
    let reference = Reference::new();
    let steps = random_trace(seed, 900);
    for (i, group) in steps.chunks(3).enumerate() {
        // Unless mixed, one identity for the whole group, as one request's
        // policies.
        let checks: Vec<Check<'_>> = group
            .iter()
            .map(|s| Check {
                policy: &s.policy,
                identity: if mixed {
                    &s.identity
                } else {
                    &group[0].identity
                },
                cost: s.cost.min(2),
            })
            .collect();
        let t = group[0].t_ms;
        let want = reference.decide_all(&checks, t);
        let got = store.decide_all_at(&checks, t).await.expect("decides");
        assert_eq!(got, want, "seed {seed} group {i}");
    }
}

#[tokio::test]
async fn all_or_nothing_matches_on_standalone_redis() {
    let topology = Topology::standalone();
    for seed in 0..4 {
        random_all_or_nothing_matches(&topology, seed, false).await;
        random_all_or_nothing_matches(&topology, seed, true).await;
    }
}

#[tokio::test]
async fn all_or_nothing_matches_on_a_redis_cluster() {
    let topology = Topology::cluster();
    for seed in 10..12 {
        random_all_or_nothing_matches(&topology, seed, false).await;
        random_all_or_nothing_matches(&topology, seed, true).await;
    }
}

fn bucket(name: &str, capacity: u64, tokens: u64, per_ms: u64) -> Policy {
    Policy::new(
        name,
        Limits::TokenBucket(Rate::new(capacity, tokens, per_ms).expect("valid")),
    )
}

#[tokio::test]
async fn the_worked_example_holds_on_the_store_clock_path_too() {
    let topology = Topology::standalone();
    let store = topology.store().await;
    let policy = bucket("write-api", 20, 5, 1_000);
    let id = Identity::value("acme");
    let at = |cost, t| {
        let store = store.clone();
        let policy = policy.clone();
        let id = id.clone();
        async move {
            store
                .decide_at(
                    Check {
                        policy: &policy,
                        identity: &id,
                        cost,
                    },
                    t,
                )
                .await
                .expect("decides")
        }
    };
    let d = at(17, 99_900).await;
    assert_eq!((d.allowed, d.remaining), (true, 3));
    let d = at(4, 100_000).await;
    assert_eq!((d.allowed, d.retry_after_ms), (false, Some(100)));
    let d = at(4, 100_300).await;
    assert_eq!((d.allowed, d.remaining), (true, 1));
    let d = at(4, 100_500).await;
    assert_eq!(
        (d.allowed, d.remaining, d.retry_after_ms),
        (false, 2, Some(400))
    );
}

#[tokio::test]
async fn a_limit_change_does_not_mint_a_burst() {
    let topology = Topology::standalone();
    let store = topology.store().await;
    let reference = Reference::new();
    let id = Identity::value("tenant");
    for (old, new) in [
        (
            Limits::TokenBucket(Rate::new(10, 1, 60_000).expect("valid")),
            Limits::TokenBucket(Rate::new(100, 7, 1_000).expect("valid")),
        ),
        (
            Limits::Gcra(Rate::new(10, 1, 60_000).expect("valid")),
            Limits::Gcra(Rate::new(100, 7, 1_000).expect("valid")),
        ),
        (
            Limits::FixedWindow(Window::new(10, 60_000).expect("valid")),
            Limits::FixedWindow(Window::new(100, 1_000).expect("valid")),
        ),
        (
            Limits::SlidingWindow(Window::new(10, 60_000).expect("valid")),
            Limits::SlidingWindow(Window::new(100, 1_000).expect("valid")),
        ),
    ] {
        let before = Policy::new("changing", old);
        let after = Policy::new("changing", new);
        let t = 1_700_000_000_000;
        // Exhaust the old limit.
        for _ in 0..10 {
            let check = Check {
                policy: &before,
                identity: &id,
                cost: 1,
            };
            let d = store.decide_at(check, t).await.expect("decides");
            assert!(d.allowed);
            assert_eq!(d, reference.decide(check, t));
        }
        // The new, larger limit counts what the old one consumed: its full
        // limit right after the change is refused.
        let check = Check {
            policy: &after,
            identity: &id,
            cost: 100,
        };
        let d = store.decide_at(check, t + 1).await.expect("decides");
        assert!(
            !d.allowed,
            "{:?}: a full burst right after the change",
            new.algorithm()
        );
        assert_eq!(d, reference.decide(check, t + 1));
    }
}

#[tokio::test]
async fn all_or_nothing_consumes_nothing_when_one_policy_rejects() {
    for topology in [Topology::standalone(), Topology::cluster()] {
        let store = topology.store().await;
        let roomy = bucket("roomy", 100, 1, 3_600_000);
        let tight = bucket("tight", 1, 1, 3_600_000);
        let id = Identity::value("acme}{");
        let both = |cost| {
            [
                Check {
                    policy: &roomy,
                    identity: &id,
                    cost,
                },
                Check {
                    policy: &tight,
                    identity: &id,
                    cost,
                },
            ]
        };
        let first = store.decide_all(&both(1)).await.expect("decides");
        assert!(first.iter().all(|d| d.allowed));
        assert_eq!((first[0].remaining, first[1].remaining), (99, 0));
        let second = store.decide_all(&both(1)).await.expect("decides");
        assert_eq!(
            (second[0].allowed, second[1].allowed),
            (true, false),
            "roomy alone would pass; tight rejects"
        );
        // Nothing was consumed from `roomy` by the rejected request.
        let peek = store
            .decide(Check {
                policy: &roomy,
                identity: &id,
                cost: 0,
            })
            .await
            .expect("decides");
        assert_eq!(peek.remaining, 99);
    }
}

#[tokio::test]
async fn all_or_nothing_across_cluster_slots_consumes_nothing_when_one_rejects() {
    let topology = Topology::cluster();
    let store = topology.store().await;
    let roomy = bucket("roomy", 100, 1, 3_600_000);
    let tight = bucket("tight", 1, 1, 3_600_000);
    let (a, b) = (Identity::value("a"), Identity::value("b"));
    assert_ne!(
        key_slot(&store.key(&roomy, &a)),
        key_slot(&store.key(&tight, &b))
    );
    let both = [
        Check {
            policy: &roomy,
            identity: &a,
            cost: 1,
        },
        Check {
            policy: &tight,
            identity: &b,
            cost: 1,
        },
    ];
    let first = store.decide_all(&both).await.expect("decides");
    assert!(first.iter().all(|d| d.allowed));
    let second = store.decide_all(&both).await.expect("decides");
    assert_eq!((second[0].allowed, second[1].allowed), (true, false));
    let peek = store
        .decide(Check {
            policy: &roomy,
            identity: &a,
            cost: 0,
        })
        .await
        .expect("decides");
    assert_eq!(peek.remaining, 99);
}

#[tokio::test]
async fn a_closing_brace_in_an_identity_does_not_move_the_slot() {
    let topology = Topology::cluster();
    let store = topology.store().await;
    let api = bucket("api", 5, 1, 1_000);
    let search = bucket("search", 5, 1, 1_000);
    let id = Identity::value("acme}evil{");
    let port = topology.ports()[0];
    let keys = [store.key(&api, &id), store.key(&search, &id)];
    let slots: Vec<u16> = keys
        .iter()
        .map(|k| {
            let key = String::from_utf8(k.clone()).expect("utf-8");
            tollgate_testkit::cli(port, &["cluster", "keyslot", &key])
                .expect("keyslot")
                .trim()
                .parse()
                .expect("a slot")
        })
        .collect();
    assert_eq!(slots[0], slots[1]);
    assert_eq!(slots[0], key_slot(&keys[0]));
    // And a decision across both policies is one script call that works.
    let checks = [
        Check {
            policy: &api,
            identity: &id,
            cost: 1,
        },
        Check {
            policy: &search,
            identity: &id,
            cost: 1,
        },
    ];
    let decisions: Vec<Decision> = store.decide_all(&checks).await.expect("decides");
    assert!(decisions.iter().all(|d| d.allowed));
}

#[allow(dead_code)]
fn assert_store<S: Store>(_: &S) {}

#[allow(dead_code)]
fn redis_store_is_a_store(store: &RedisStore) {
    assert_store(store);
}

#[tokio::test]
async fn across_cluster_slots_a_key_named_twice_is_judged_before_anything_is_consumed() {
    let topology = Topology::cluster();
    let store = topology.store().await;
    let roomy = bucket("roomy", 100, 1, 3_600_000);
    let pair = bucket("pair", 3, 1, 3_600_000);
    let (a, b) = (Identity::value("a"), Identity::value("b"));
    assert_ne!(
        key_slot(&store.key(&roomy, &a)),
        key_slot(&store.key(&pair, &b))
    );
    // b's key is named twice: 2 + 2 > 3, so the request is rejected in the
    // probe, and a's slot is never charged.
    let checks = [
        Check {
            policy: &roomy,
            identity: &a,
            cost: 1,
        },
        Check {
            policy: &pair,
            identity: &b,
            cost: 2,
        },
        Check {
            policy: &pair,
            identity: &b,
            cost: 2,
        },
    ];
    let decisions = store.decide_all(&checks).await.expect("decides");
    assert_eq!(
        decisions.iter().map(|d| d.allowed).collect::<Vec<_>>(),
        [true, true, false]
    );
    let peek = |policy, identity| {
        let store = store.clone();
        async move {
            store
                .decide(Check {
                    policy,
                    identity,
                    cost: 0,
                })
                .await
                .expect("decides")
                .remaining
        }
    };
    assert_eq!(peek(&roomy, &a).await, 100);
    assert_eq!(peek(&pair, &b).await, 3);
}
