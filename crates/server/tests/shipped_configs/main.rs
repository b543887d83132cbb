//! One suite, the same attacks, every shipped config: each tollgate config
//! under examples/ and deploy/, the ConfigMap's embedded config and the
//! container image's, found in the repository (discover.rs), served for
//! real (serving.rs) and attacked (attacks.rs) — spellings of a login, a
//! HEAD on a GET limit, the API without its key, a full memory store,
//! endpoints without their tokens — and each must pass `validate
//! --strict` on every listener it ships with. A config the suite does not
//! know how to run fails it: nothing ships unattacked.

#[path = "../support/mod.rs"]
mod support;

mod attacks;
mod discover;
mod policies;
mod serving;

use std::process::Command;

use tollgate::{ListenAddress, ServeConfig};

use discover::{Shipped, config_files, root, shipped_configs};
use serving::{
    Served, default_memory_store, env_for, parse, required_groups, runnable_text, write_beside,
};
use support::tollgate_bin;

/// The configs the repository ships today: discovery must find at least
/// these (a new one is found without being listed here).
const KNOWN: [&str; 8] = [
    "examples/tollgate.yaml",
    "examples/nginx-tollgate.yaml",
    "examples/caddy-tollgate.yaml",
    "examples/regions.yaml",
    "examples/replay-policies.yaml",
    "deploy/container/tollgate.yaml",
    "deploy/kubernetes/tollgate.yaml#ConfigMap/tollgate/tollgate.yaml",
    // Served with the envoyproxy/ratelimit file it names beside it.
    "examples/envoy-tollgate.yaml",
];

/// A small memory store, appended to a config that keeps the default one,
/// so that filling it takes seconds: the only change the suite makes. 128
/// keys over its 128 shards, one each.
const SMALL_MEMORY_STORE: &str = "\nstore:\n  memory:\n    max_keys: 128\n";

/// Clients that exhaust their logins to fill [`SMALL_MEMORY_STORE`]: all
/// but about 10 of its 128 shards then hold a limiting login
/// (attacks::full_store_logins says why not all).
const FILLING_CLIENTS: u32 = 1_500;

/// Every address `shipped` is served on: its own listen and its
/// deployments' (HTTP, then gRPC).
fn listeners(shipped: &Shipped) -> (Vec<String>, Vec<String>) {
    let config = parse(&shipped.text);
    let own = |key: &str| {
        config
            .pointer(&format!("/server/{key}"))
            .and_then(|v| v.as_str().map(str::to_owned))
    };
    let mut http = shipped.deployed_http.clone();
    http.push(own("listen").unwrap_or_else(|| "127.0.0.1:8080".to_owned()));
    let mut grpc = shipped.deployed_grpc.clone();
    grpc.extend(own("grpc_listen"));
    (http, grpc)
}

#[test]
fn every_shipped_config_is_found_and_the_suite_knows_how_to_run_it() {
    let found = shipped_configs();
    let sources: Vec<&str> = found.iter().map(|s| s.source.as_str()).collect();
    for known in KNOWN {
        assert!(
            sources.contains(&known),
            "{known} was not found among {sources:?}"
        );
    }
    for shipped in &found {
        if let Err(why) = runnable_text(shipped, Some("redis://127.0.0.1:1")) {
            panic!(
                "the suite does not know how to run {}: {why}",
                shipped.source
            );
        }
    }
    // The image and the Deployment serve beyond loopback.
    let deployed = |source: &str| {
        found
            .iter()
            .find(|s| s.source == source)
            .map(|s| s.deployed_http.clone())
    };
    assert_eq!(deployed(KNOWN[5]), Some(vec!["0.0.0.0:8080".to_owned()]));
    assert_eq!(deployed(KNOWN[6]), Some(vec!["0.0.0.0:8080".to_owned()]));
}

#[test]
fn every_shipped_config_passes_validate_strict_on_every_listener_it_ships_with() {
    let mut failures = Vec::new();
    for shipped in shipped_configs() {
        let config = parse(&shipped.text);
        let env = env_for(&config);
        let dir = tempfile::tempdir().expect("temp dir");
        let path = write_beside(&shipped, &shipped.text, dir.path());
        let out = Command::new(tollgate_bin())
            .args(["validate", "--strict", "--config"])
            .arg(&path)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("run tollgate validate");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() || !stderr.is_empty() {
            failures.push(format!("{}: validate --strict: {stderr}", shipped.source));
        }
        let loaded = ServeConfig::parse(&shipped.text, |name| {
            env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
        .unwrap_or_else(|e| panic!("{}: {e}", shipped.source));
        let (http, grpc) = listeners(&shipped);
        let grpc: Vec<ListenAddress> = grpc
            .iter()
            .map(|a| a.parse().expect("an address"))
            .collect();
        for address in &http {
            let address: ListenAddress = address.parse().expect("an address");
            let warnings = loaded.warnings_serving(&address, grpc.first());
            if !warnings.is_empty() {
                failures.push(format!(
                    "{} served on {address}: {warnings:?}",
                    shipped.source
                ));
            }
        }
    }
    assert_eq!(failures, Vec::<String>::new());
}

/// Each config file as a user runs it, in place (its relative paths its
/// own), with the variables it needs: `validate --strict` says it is valid
/// and warns of nothing. A warning a config means to live with is
/// silenced in the file, where it is meant (docs/config.md, Hazards).
#[test]
fn every_shipped_config_file_passes_validate_strict_in_place() {
    let files = config_files();
    assert!(
        files.contains(&"crates/tower/examples/axum_app.yaml".to_owned()),
        "{files:?}"
    );
    let mut failures = Vec::new();
    for file in &files {
        let path = root().join(file);
        let text = std::fs::read_to_string(&path).expect("read the config");
        let out = Command::new(tollgate_bin())
            .args(["validate", "--strict", "--config"])
            .arg(&path)
            .env_clear()
            .envs(env_for(&parse(&text)))
            .output()
            .expect("run tollgate validate");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let valid = format!("config {} is valid (hash ", path.display());
        if out.status.code() != Some(0) || !stderr.is_empty() || !stdout.starts_with(&valid) {
            failures.push(format!("{file}: {stdout}{stderr}"));
        }
    }
    assert_eq!(failures, Vec::<String>::new());
}

#[test]
fn every_shipped_config_served_beyond_loopback_requires_every_token() {
    let mut failures = Vec::new();
    for shipped in shipped_configs() {
        let required = required_groups(&parse(&shipped.text));
        let (http, grpc) = listeners(&shipped);
        let groups: &[&str] = &["check", "admin", "metrics", "authorize"];
        let exposed = http
            .iter()
            .map(|a| (a, groups))
            .chain(grpc.iter().map(|a| (a, &groups[..1])));
        for (address, groups) in exposed {
            let local = address.starts_with("127.")
                || address.starts_with("[::1]")
                || address.starts_with("localhost:");
            for group in groups
                .iter()
                .filter(|g| !local && !required.iter().any(|r| r == *g))
            {
                failures.push(format!(
                    "{} is served on {address} without requiring the {group} token",
                    shipped.source
                ));
            }
        }
    }
    assert_eq!(failures, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shipped_config_withstands_every_attack_that_applies_to_it() {
    let mut failures = Vec::new();
    for shipped in shipped_configs() {
        let served = Served::start(&shipped, "");
        for found in [
            attacks::endpoints_without_tokens(&served).await,
            attacks::login_spellings(&served).await,
            attacks::head_on_get(&served).await,
            attacks::api_without_key(&served).await,
        ] {
            failures.extend(
                found
                    .into_iter()
                    .map(|f| format!("{}: {f}", shipped.source)),
            );
        }
    }
    assert_eq!(failures, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_memory_store_opens_no_shipped_login() {
    let mut failures = Vec::new();
    let mut attacked = 0;
    for shipped in shipped_configs() {
        let config = parse(&shipped.text);
        let logins = policies::path_policies(&config)
            .iter()
            .filter(|p| p.is_login())
            .count();
        if logins == 0 || !default_memory_store(&config) {
            continue;
        }
        attacked += 1;
        let served = Served::start(&shipped, SMALL_MEMORY_STORE);
        let found = attacks::full_store_logins(&served, FILLING_CLIENTS).await;
        failures.extend(
            found
                .into_iter()
                .map(|f| format!("{}: {f}", shipped.source)),
        );
    }
    // examples/tollgate.yaml, nginx-tollgate.yaml, caddy-tollgate.yaml.
    assert!(
        attacked >= 3,
        "only {attacked} configs keep their logins in memory"
    );
    assert_eq!(failures, Vec::<String>::new());
}
