//! No client bytes in a response header: tollgate's 400 quotes a short,
//! escaped prefix of a bad cost header, so a 5,000-byte value cannot
//! overflow nginx's buffer for the auth subrequest's header fields (4 KB),
//! which nginx answers with a 502 that the API's location fails open on.

use serde_json::json;

use crate::harness::*;

/// A cost header far past nginx's buffer for the subrequest's fields.
fn huge_cost() -> String {
    "9".repeat(5_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_cost_header_gets_a_400_quoting_a_short_prefix_never_a_502() {
    let stack = Stack::start().await;
    let client = client_at([127, 0, 0, 21]);
    let url = stack.nginx.url("/api/exports/orders");
    let export = |rows: &str| {
        client
            .get(&url)
            .header("X-API-Key", "key-huge-cost")
            .header("X-Export-Rows-Thousands", rows)
    };
    // The whole hourly budget in one export, then nothing is left.
    assert_eq!(Answer::of(export("100")).await.status, 200);
    assert_eq!(Answer::of(export("1")).await.status, 429);

    let refused = Answer::of(export(&huge_cost())).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(
        refused.json(),
        json!({
            "type": "about:blank",
            "title": "Bad Request",
            "status": 400,
            "detail": format!(
                "policy exports: header x-export-rows-thousands must be a whole number from 1 to 100, got \"{}\"... (5000 bytes)",
                "9".repeat(32)
            ),
        })
    );
    // Still exhausted, exactly: the refusal spent and admitted nothing.
    let after = Answer::of(export("1")).await;
    assert_eq!(after.status, 429, "{}", after.body);
    assert_eq!(
        sf_list(after.one("ratelimit")),
        vec![
            member("api", &[("r", 19), ("t", 1)]),
            member("exports", &[("r", 0), ("t", 3600)]),
        ]
    );
    assert_eq!(stack.upstream.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_key_stays_limited_behind_a_fail_open_location_whatever_its_cost_header() {
    // The attacker's setup: a cost header on `api`, whose location fails
    // open when tollgate cannot answer (a refill of one an hour keeps the
    // counts exact on any machine).
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.yaml");
    let example_text =
        std::fs::read_to_string(example("nginx-tollgate.yaml")).expect("read the example");
    let api = "    refill: { tokens: 5, per: 1s }\n    match: { path_prefix: /api/, case_insensitive: true, trailing_slash: ignore }\n    identity:\n      - api_key: X-API-Key\n";
    assert_eq!(example_text.matches(api).count(), 1);
    let with_cost = "    refill: { tokens: 1, per: 1h }\n    match: { path_prefix: /api/, case_insensitive: true, trailing_slash: ignore }\n    identity:\n      - api_key: X-API-Key\n    cost: { header: X-Cost, max: 10, default: 1 }\n";
    std::fs::write(&config, example_text.replace(api, with_cost)).expect("write config");
    let stack = Stack::start_with(&config).await;
    let client = client_at([127, 0, 0, 22]);
    let url = stack.nginx.url("/api/orders");
    for _ in 0..20 {
        let admitted = Answer::of(client.get(&url).header("X-API-Key", "key-exhausted")).await;
        assert_eq!(admitted.status, 200, "{}", admitted.body);
    }
    let limited = Answer::of(client.get(&url).header("X-API-Key", "key-exhausted")).await;
    assert_eq!(limited.status, 429, "{}", limited.body);

    let cost = huge_cost();
    let mut statuses = Vec::new();
    for _ in 0..30 {
        let answer = Answer::of(
            client
                .get(&url)
                .header("X-API-Key", "key-exhausted")
                .header("X-Cost", cost.as_str()),
        )
        .await;
        statuses.push(answer.status);
    }
    assert_eq!(statuses, vec![400; 30], "never a 502 nor a fail-open 200");
    assert_eq!(
        stack.upstream.count(),
        20,
        "none of the 30 reached the upstream"
    );
    let still = Answer::of(client.get(&url).header("X-API-Key", "key-exhausted")).await;
    assert_eq!(still.status, 429, "{}", still.body);
    assert_eq!(
        sf_list(still.one("ratelimit")),
        vec![member("api", &[("r", 0), ("t", 72_000)])]
    );
}
