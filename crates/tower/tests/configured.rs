//! A layer run by a config file (`Configured`), over real HTTP: the
//! file's request settings (trusted proxies, the longest identity), the
//! limiter's upkeep running for it, and its reloads as `tollgate serve`
//! reloads: a new limit applies, a broken file or a change of stores is
//! refused and the rules before it keep serving.

mod support;

use std::sync::Arc;

use support::{T0, header, serve_layered, store_keys, temp_dir, write_config};
use tollgate_core::ManualClock;
use tollgate_tower::{ConfigError, Configured, Reloaded};

fn shareable<T: Send + Sync + 'static>() {}

#[test]
fn a_configured_layer_can_be_shared_with_the_task_that_reloads_it() {
    shareable::<Configured>();
}

/// Writes per tenant: `limit` an hour, on the embedded store.
fn writes(limit: u64) -> String {
    format!(
        "store: {{memory: {{max_keys: 1000}}}}\npolicies:\n  - {{name: writes, algorithm: fixed_window, limit: {limit}, window: 1h, match: {{methods: [POST]}}, identity: [{{header: X-Tenant}}]}}\n"
    )
}

#[tokio::test]
async fn the_upkeep_sweeps_the_keys_a_configured_layer_left_idle() {
    let dir = temp_dir();
    let yaml = "store: {memory: {max_keys: 1000}}\npolicies:\n  - {name: writes, algorithm: fixed_window, limit: 5, window: 1s, identity: [{header: X-Tenant}]}\n";
    let path = write_config(&dir.0, yaml);
    let clock = Arc::new(ManualClock::new(T0));
    let configured = Configured::load(&path, clock.clone())
        .await
        .expect("config loads");
    let app = serve_layered(configured.layer()).await;

    assert_eq!(app.order("acme").await.status(), 200);
    assert_eq!(app.order("globex").await.status(), 200);
    assert_eq!(
        store_keys(configured.limiter(), configured.registry()),
        vec![2]
    );

    // Both windows are over: nothing is left to count, and the upkeep's
    // next sweep (every second) forgets the keys.
    clock.advance(2_000);
    let mut keys = store_keys(configured.limiter(), configured.registry());
    for _ in 0..100 {
        if keys == vec![0] {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        keys = store_keys(configured.limiter(), configured.registry());
    }
    assert_eq!(keys, vec![0]);
    assert_eq!(app.handled(), 2);
}

#[tokio::test]
async fn a_reload_applies_a_new_limit_and_refuses_a_broken_file_or_new_stores() {
    let dir = temp_dir();
    let path = write_config(&dir.0, &writes(2));
    let clock = Arc::new(ManualClock::new(T0));
    let configured = Configured::load(&path, clock).await.expect("config loads");
    let app = serve_layered(configured.layer()).await;
    assert_eq!(app.order("acme").await.status(), 200);
    assert_eq!(app.order("acme").await.status(), 200);
    let spent = app.order("acme").await;
    assert_eq!(spent.status(), 429);
    assert_eq!(header(&spent, "ratelimit"), "\"writes\";r=0;t=2800");
    assert_eq!(configured.reload().expect("same file"), Reloaded::Unchanged);

    // 4 an hour: acme's two orders carry over, two more pass.
    write_config(&dir.0, &writes(4));
    assert_eq!(configured.reload().expect("reloads"), Reloaded::Applied);
    let third = app.order("acme").await;
    assert_eq!(third.status(), 200);
    assert_eq!(header(&third, "ratelimit-policy"), "\"writes\";q=4;w=3600");
    assert_eq!(header(&third, "ratelimit"), "\"writes\";r=1;t=2800");

    // A file that is no config: refused, and 4 an hour still serves.
    std::fs::write(&path, "polcies: []\n").expect("write config");
    let refused = configured.reload().expect_err("refused");
    assert!(matches!(
        refused,
        ConfigError::Load(tollgate_config::LoadError::Invalid { .. })
    ));
    let fourth = app.order("acme").await;
    assert_eq!(fourth.status(), 200);
    assert_eq!(header(&fourth, "ratelimit"), "\"writes\";r=0;t=2800");

    // Other stores: the limiter holds the ones it opened, so nothing of
    // the file applies, as `tollgate serve` refuses it.
    write_config(&dir.0, &writes(10).replace("1000", "2000"));
    assert_eq!(
        configured.reload().expect_err("refused").to_string(),
        "the stores changed and needs a restart; nothing of the new config was applied"
    );
    assert_eq!(app.order("acme").await.status(), 429);
    assert_eq!(app.order("globex").await.status(), 200);
    assert_eq!(app.handled(), 5);
}

#[tokio::test]
async fn x_forwarded_for_names_the_client_only_from_a_proxy_the_file_trusts() {
    let config = |trusted: &str| {
        format!(
            "server: {{trusted_proxies: [{trusted}]}}\npolicies:\n  - {{name: reads, algorithm: fixed_window, limit: 2, window: 1h, identity: [client_ip]}}\n"
        )
    };
    let read = |app: &support::Served, forwarded_for: &'static str| {
        reqwest::Client::new()
            .get(app.url("/items"))
            .header("X-Forwarded-For", forwarded_for)
            .send()
    };
    let clock = Arc::new(ManualClock::new(T0));

    // Loopback is no proxy of this file's: every forged hop is its own
    // address, one budget.
    let dir = temp_dir();
    let path = write_config(&dir.0, &config("10.0.0.1"));
    let untrusting = Configured::load(&path, clock.clone())
        .await
        .expect("config loads");
    let app = serve_layered(untrusting.layer()).await;
    for (forged, status, field) in [
        ("203.0.113.1", 200, "\"reads\";r=1;t=2800"),
        ("203.0.113.2", 200, "\"reads\";r=0;t=2800"),
        ("203.0.113.3", 429, "\"reads\";r=0;t=2800"),
    ] {
        let answer = read(&app, forged).await.expect("request");
        assert_eq!(answer.status(), status, "{forged}");
        assert_eq!(header(&answer, "ratelimit"), field, "{forged}");
    }

    // Trusted, loopback's hop names each client.
    let dir = temp_dir();
    let path = write_config(&dir.0, &config("127.0.0.1"));
    let trusting = Configured::load(&path, clock).await.expect("config loads");
    let app = serve_layered(trusting.layer()).await;
    for forwarded in ["203.0.113.1", "203.0.113.2", "203.0.113.3"] {
        let answer = read(&app, forwarded).await.expect("request");
        assert_eq!(answer.status(), 200, "{forwarded}");
        assert_eq!(
            header(&answer, "ratelimit"),
            "\"reads\";r=1;t=2800",
            "{forwarded}"
        );
    }
}

#[tokio::test]
async fn an_identity_longer_than_the_files_max_key_bytes_is_a_400_problem() {
    let dir = temp_dir();
    let yaml = format!("server: {{max_key_bytes: 32}}\n{}", writes(5));
    let path = write_config(&dir.0, &yaml);
    let clock = Arc::new(ManualClock::new(T0));
    let configured = Configured::load(&path, clock).await.expect("config loads");
    assert_eq!(configured.request().max_key_bytes, 32);
    let app = serve_layered(configured.layer()).await;

    let short = app.order("acme").await;
    assert_eq!(short.status(), 200);
    let long = app.order(&"x".repeat(40)).await;
    assert_eq!(long.status(), 400);
    assert_eq!(header(&long, "content-type"), "application/problem+json");
    let problem: serde_json::Value = long.json().await.expect("problem+json");
    assert_eq!(
        problem,
        serde_json::json!({
            "type": "about:blank",
            "title": "Bad Request",
            "status": 400,
            "detail": "policy writes: the identity is longer than 32 bytes",
        })
    );
    assert_eq!(app.handled(), 1);
}

#[tokio::test]
async fn the_files_request_id_header_replays_a_retry_of_a_policy_that_honours_client_ids() {
    let dir = temp_dir();
    let yaml = "server: {request_id_header: Idempotency-Key}\npolicies:\n  - {name: writes, algorithm: fixed_window, limit: 1, window: 1h, match: {methods: [POST]}, identity: [{header: X-Tenant}], client_request_ids: true}\n";
    let path = write_config(&dir.0, yaml);
    let clock = Arc::new(ManualClock::new(T0));
    let configured = Configured::load(&path, clock).await.expect("config loads");
    assert_eq!(
        configured.request().request_id_header,
        Some(http::HeaderName::from_static("idempotency-key"))
    );
    let app = serve_layered(configured.layer()).await;
    let order = |id: &'static str| {
        reqwest::Client::new()
            .post(app.url("/orders"))
            .header("X-Tenant", "acme")
            .header("Idempotency-Key", id)
            .send()
    };

    let first = order("k1").await.expect("request");
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "tollgate-replayed"), "");
    let retry = order("k1").await.expect("request");
    assert_eq!(retry.status(), 200);
    assert_eq!(header(&retry, "tollgate-replayed"), "true");
    assert_eq!(header(&retry, "ratelimit"), "\"writes\";r=0;t=2800");
    let another = order("k2").await.expect("request");
    assert_eq!(another.status(), 429);
    assert_eq!(app.handled(), 2);
}
