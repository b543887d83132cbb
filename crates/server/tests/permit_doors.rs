//! Where a concurrency permit cannot be released, tollgate says so: forward
//! auth and Envoy's rate limit service never see a request end, so `serve`
//! and `validate` refuse a concurrency policy forward auth would apply (one
//! with `match`) and an envoy rule bound to one, naming the policy and the
//! door; and `explain` states the bound of one it can serve.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;
use support::TestServer;

/// `tollgate <args> --config <config>`: (exit code, stdout, stderr).
fn run(args: &[&str], config: &Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove("TOLLGATE_IDENTITY_KEY")
        .env_remove("TOLLGATE_REGION")
        .env_remove("TOLLGATE_STORE")
        .stdin(Stdio::null())
        .output()
        .expect("tollgate runs");
    (
        out.status.code().expect("exit code"),
        String::from_utf8(out.stdout).expect("UTF-8 stdout"),
        String::from_utf8(out.stderr).expect("UTF-8 stderr"),
    )
}

const REPORTS: &str = "  - {name: reports, algorithm: concurrency, limit: 3, lease: 1m, identity: [{header: X-Tenant}]}\n";

/// `validate` and `serve` refuse `yaml` (with `files` beside it) alike;
/// their message, with the config's path as `{path}`.
fn refusal(yaml: &str, files: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, yaml).expect("write config");
    let (code, _, validated) = run(&["validate"], &path);
    assert_eq!(code, 1, "validate: {validated}");
    let (code, _, served) = run(&["serve", "--listen", "127.0.0.1:0"], &path);
    assert_eq!(
        (code, &served),
        (1, &validated),
        "serve refuses as validate does"
    );
    validated.replace(&dir.path().display().to_string(), "{dir}")
}

#[test]
fn a_concurrency_policy_forward_auth_would_apply_is_refused_naming_it_and_the_door() {
    let yaml = "policies:\n  - {name: reports, algorithm: concurrency, limit: 3, lease: 1m, match: {path: /reports}}\n";
    let message = "policy \"reports\": match: a concurrency policy cannot be applied by forward auth (/v1/authorize): a proxy's auth request never says when the request ends, so its permit would be held until its lease ends; take `match` away and acquire and release through /v1/check and /v1/release, apply it in the service with tollgate-tower, or turn forward auth off here (server.forward_auth: off)";
    assert_eq!(
        refusal(yaml, &[]),
        format!(
            "tollgate: {{dir}}/tollgate.yaml: {message}\n --> {{dir}}/tollgate.yaml:2:66\n  |\n1 | policies:\n2 |   - {{name: reports, algorithm: concurrency, limit: 3, lease: 1m, match: {{path: /reports}}}}\n  | {:65}^ {message}\n",
            ""
        )
    );
}

#[test]
fn an_envoy_rule_bound_to_a_concurrency_policy_or_made_one_is_refused() {
    let yaml = format!("envoy_ratelimit_configs: [rules.yaml]\npolicies:\n{REPORTS}");
    let bound = "domain: api\ndescriptors:\n  - key: tenant\n    tollgate: {policy: reports}\n";
    let message = "descriptors[0].tollgate.policy: policy \"reports\" is a concurrency policy, which Envoy's rate limit service (RLS) cannot apply: RLS never says when a request ends, so its permit would be held until its lease ends; bind this rule to a rate policy";
    assert_eq!(
        refusal(&yaml, &[("rules.yaml", bound)]),
        format!(
            "tollgate: {{dir}}/tollgate.yaml: envoy_ratelimit_configs: {{dir}}/rules.yaml: {message}\n --> {{dir}}/rules.yaml:4:16\n  |\n2 | descriptors:\n3 |   - key: tenant\n4 |     tollgate: {{policy: reports}}\n  |                ^ {message}\n"
        )
    );
    let made = "domain: api\ndescriptors:\n  - key: tenant\n    tollgate: {algorithm: concurrency, limit: 3}\n";
    let message = "descriptors[0].tollgate.algorithm: concurrency cannot be applied by Envoy's rate limit service (RLS): RLS never says when a request ends, so a permit would be held until its lease ends; use a rate algorithm";
    assert_eq!(
        refusal(&yaml, &[("rules.yaml", made)]),
        format!(
            "tollgate: {{dir}}/tollgate.yaml: envoy_ratelimit_configs: {{dir}}/rules.yaml: {message}\n --> {{dir}}/rules.yaml:4:16\n  |\n2 | descriptors:\n3 |   - key: tenant\n4 |     tollgate: {{algorithm: concurrency, limit: 3}}\n  |                ^ {message}\n"
        )
    );
}

#[test]
fn explain_states_at_most_limit_in_flight_and_what_a_dead_holder_keeps() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, format!("policies:\n{REPORTS}")).expect("write config");
    let (code, text, stderr) = run(&["explain"], &path);
    assert_eq!((code, stderr.as_str()), (0, ""));
    let bound: Vec<&str> = text
        .lines()
        .skip_while(|line| !line.starts_with("  bound: "))
        .take_while(|line| !line.starts_with("  on store failure: "))
        .collect();
    assert_eq!(
        bound,
        [
            "  bound: at most N × the limit (3 in flight) for N tollgate processes (list `regions:` with their",
            "      instances to state N).",
            "  span: each process: at most 3 in flight at any instant, whatever the span; a holder that dies",
            "      before releasing keeps its permit until its lease (1m) ends. Released only by a door that sees",
            "      the request end: the tower layer, or /v1/check then /v1/release. For N tollgate processes,",
            "      N × each figure.",
        ]
    );
    let (code, json, _) = run(&["explain", "--json"], &path);
    assert_eq!(code, 0);
    let json: Value = serde_json::from_str(&json).expect("JSON");
    let span = &json["policies"][0]["scope"]["bound"]["span"];
    assert_eq!(span["in_flight"], 3);
    assert_eq!(span["lease_ms"], 60_000);
    assert_eq!(span["dead_holder_keeps_permit_ms_at_most"], 60_000);
    assert_eq!(span["applies_to"], "each instance");
}

#[tokio::test]
async fn forward_auth_skips_a_concurrency_policy_without_match_which_v1_check_still_holds() {
    let server = TestServer::start(
        "server:\n  trusted_proxies: [127.0.0.1]\npolicies:\n  - {name: reports, algorithm: concurrency, limit: 1, lease: 1m, identity: [{header: X-Tenant}]}\n",
    )
    .await;
    for _ in 0..3 {
        let authorized = server
            .client
            .get(server.url("/v1/authorize"))
            .header("x-original-method", "POST")
            .header("x-original-uri", "/reports")
            .header("x-tenant", "acme")
            .send()
            .await
            .expect("request");
        assert_eq!(authorized.status(), 200);
        assert!(!authorized.headers().contains_key("ratelimit"));
    }
    let check = || async {
        let answer: Value = server
            .client
            .post(server.url("/v1/check"))
            .body(r#"{"policy":"reports","key":{"x-tenant":"acme"}}"#)
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json");
        answer
    };
    // Forward auth took none of the one permit.
    let first = check().await;
    assert_eq!(first["allowed"], true);
    assert_eq!(first["permit"].as_str().map(str::len), Some(16));
    assert_eq!(check().await["allowed"], false);
}

/// With forward auth off, no door of the server applies `match`: the same
/// concurrency policy is accepted, `/v1/authorize` is a 404, and
/// `/v1/check` takes the permit.
#[tokio::test]
async fn with_forward_auth_off_a_concurrency_policy_with_match_is_served_by_check() {
    let server = TestServer::start(
        "server: {forward_auth: off, watch_interval_ms: 0}\npolicies:\n  - {name: reports, algorithm: concurrency, limit: 1, lease: 1m, match: {path: /reports}, identity: [{header: X-Tenant}]}\n",
    )
    .await;
    let client = reqwest::Client::new();
    let authorize = client
        .get(server.url("/v1/authorize"))
        .header("X-Original-URI", "/reports")
        .header("X-Tenant", "acme")
        .send()
        .await
        .expect("authorize");
    assert_eq!(authorize.status(), 404);
    let problem: Value = authorize.json().await.expect("problem+json");
    assert_eq!(
        problem["detail"],
        "forward auth is off here (server.forward_auth: off)"
    );
    let (status, first) = server
        .check(r#"{"policy":"reports","key":"acme","cost":1}"#)
        .await;
    assert_eq!((status, &first["allowed"]), (200, &Value::Bool(true)));
    assert_eq!(first["permit"].as_str().map(str::len), Some(16));
    let (_, second) = server
        .check(r#"{"policy":"reports","key":"acme","cost":1}"#)
        .await;
    assert_eq!(second["allowed"], false);
}
