//! A door's path from the file `tollgate serve` reads to plans: parsed
//! without the server, the server's own section kept out of the way.

use std::sync::Arc;

use prometheus_client::registry::Registry;
use tollgate_config::{Config, normalize};
use tollgate_core::{ManualClock, Policy};
use tollgate_limiter::LimiterMetrics;

const FILE: &str = "server:
  listen: 127.0.0.1:8080
  shadow_mode: true
store: { memory: {} }
policies:
  - name: writes
    algorithm: fixed_window
    limit: 5
    window: 1m
    match: { methods: [POST], path_prefix: /orders }
    identity: [header: x-tenant]
    on_store_failure: fail_closed
  - name: reads
    algorithm: gcra
    capacity: 10
    refill: { tokens: 1, per: 1s }
    match: { methods: [GET], path_prefix: /items }
    identity: [client_ip]
";

fn item(policy: &Policy) -> String {
    format!("item:{}", policy.name())
}

#[test]
fn a_serve_config_file_becomes_one_plan_a_policy_with_lookups() {
    let config = match Config::parse(FILE, |_| None) {
        Ok(config) => config,
        Err(e) => panic!("{e}"),
    };
    assert!(config.shadow_mode);
    let metrics = LimiterMetrics::register(&mut Registry::default(), Arc::new(ManualClock::new(0)));
    let live = config.live(&metrics, item, None);
    assert_eq!(live.len(), 2);
    let writes = live.get("writes").map(|p| p.policy_item.as_str());
    assert_eq!(writes, Some("item:writes"));
    assert_eq!(live.index_of("reads"), Some(1));
    assert!(live[0].plan.shadow());
    assert!(live[0].plan.on_failure().is_some());
    let path = match normalize("/orders/7") {
        Ok(path) => path,
        Err(e) => panic!("{e}"),
    };
    let matched: Vec<&str> = live
        .matching("POST", &path, "api.example.com")
        .map(|p| p.serve.policy.name())
        .collect();
    assert_eq!(matched, ["writes"]);
    assert_eq!(live.matching("GET", &path, "api.example.com").count(), 0);
}

#[test]
fn a_secret_identity_part_needs_the_key_the_server_section_names() {
    let file = "server: { identity_key_env: MY_KEY }\npolicies:\n  - {name: p, algorithm: fixed_window, limit: 5, window: 1m, identity: [api_key: x-api-key]}\n";
    let refused = Config::parse(file, |_| None)
        .map(|_| ())
        .map_err(|e| e.to_string());
    assert_eq!(
        refused,
        Err("config: a policy hashes an API key or bearer token, so the environment variable MY_KEY must hold the hashing key (server.identity_key_env names it)".to_owned())
    );
    let key = "k".repeat(32);
    let config = Config::parse(file, |name| (name == "MY_KEY").then(|| key.clone()));
    assert!(config.is_ok_and(|c| c.hasher.is_some()));
}
