//! `validate` and `serve` point at the line and column of the node a
//! config fault is about, and show that line as a YAML syntax error's is
//! shown: ` --> FILE:LINE:COLUMN` with two lines either side. A field's
//! fault points at its key; a tab where YAML allows none, at the tab.

use std::path::Path;
use std::process::{Command, Stdio};

/// `tollgate <args> --config <config>`, run to completion: (exit code, stderr).
fn run(args: &[&str], config: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove("TOLLGATE_IDENTITY_KEY")
        .env_remove("TOLLGATE_REGION")
        .env_remove("TOLLGATE_STORE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .expect("tollgate runs");
    (
        out.status.code().expect("exit code"),
        String::from_utf8(out.stderr).expect("UTF-8 stderr"),
    )
}

/// Both `validate` and `serve` refuse `yaml` with exit code 1 and exactly
/// `expected` on stderr, `{path}` standing for the config file.
fn refused(yaml: &str, expected: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, yaml).expect("write config");
    let expected = expected.replace("{path}", &path.display().to_string());
    assert_eq!(run(&["validate"], &path), (1, expected.clone()), "validate");
    assert_eq!(
        run(&["serve", "--listen", "127.0.0.1:0"], &path),
        (1, expected),
        "serve"
    );
}

#[test]
fn an_unknown_top_level_field_is_pointed_at_after_comments() {
    refused(
        "# rate limits\nserver:\n  listen: 127.0.0.1:8080\npolcies: []\npolicies:\n  - {name: p, algorithm: fixed_window, limit: 10, window: 1s}\n",
        r#"tollgate: {path}: config: polcies: unknown field, did you mean policies? (expected: server, region, regions, store, stores, policies, envoy_ratelimit_configs)
 --> {path}:4:1
  |
2 | server:
3 |   listen: 127.0.0.1:8080
4 | polcies: []
  | ^ polcies: unknown field, did you mean policies? (expected: server, region, regions, store, stores, policies, envoy_ratelimit_configs)
5 | policies:
6 |   - {name: p, algorithm: fixed_window, limit: 10, window: 1s}
  |
"#,
    );
}

#[test]
fn a_bad_server_field_is_pointed_at_its_key() {
    refused(
        "server:\n  listen: 127.0.0.1:8080\n  max_headers: 4\npolicies:\n  - {name: p, algorithm: fixed_window, limit: 10, window: 1s}\n",
        r#"tollgate: {path}: config: server: max_headers 4 is outside 16..=8192
 --> {path}:3:3
  |
1 | server:
2 |   listen: 127.0.0.1:8080
3 |   max_headers: 4
  |   ^ server: max_headers 4 is outside 16..=8192
4 | policies:
5 |   - {name: p, algorithm: fixed_window, limit: 10, window: 1s}
  |
"#,
    );
}

#[test]
fn a_bad_store_url_is_pointed_at_and_its_password_is_not_shown() {
    refused(
        "store:\n  redis:\n    url: \"redis://user:hunter2@127.0.0.1:notaport\"\n    timeout: 100ms\npolicies:\n  - {name: p, algorithm: fixed_window, limit: 10, window: 1s}\n",
        r#"tollgate: {path}: config: store.redis.url: "redis://<redacted>@127.0.0.1:notaport" is not a Redis URL (expected redis://HOST:PORT, rediss://… or redis+unix:///PATH)
 --> {path}:3:5
  |
1 | store:
2 |   redis:
3 |     url: <redacted>
  |     ^ store.redis.url: "redis://<redacted>@127.0.0.1:notaport" is not a Redis URL (expected redis://HOST:PORT, rediss://… or redis+unix:///PATH)
4 |     timeout: 100ms
5 | policies:
  |
"#,
    );
}

#[test]
fn a_nested_field_of_the_third_policy_is_pointed_at() {
    refused(
        "policies:\n  - name: a\n    algorithm: fixed_window\n    limit: 5\n    window: 1s\n  - name: b\n    algorithm: fixed_window\n    limit: 5\n    window: 1s\n  - name: c\n    algorithm: token_bucket\n    capacity: 5\n    refill:\n      tokens: 1\n      per: 10x\n",
        r#"tollgate: {path}: policy "c": refill.per: "10x" is not a duration: expected <integer><unit> with unit one of ms, s, m, h, d (e.g. "1s", "500ms")
  --> {path}:15:7
   |
13 |     refill:
14 |       tokens: 1
15 |       per: 10x
   |       ^ policy "c": refill.per: "10x" is not a duration: expected <integer><unit> with unit one of ms, s, m, h, d (e.g. "1s", "500ms")
"#,
    );
}

#[test]
fn an_unknown_policy_field_is_pointed_at() {
    refused(
        "policies:\n  - name: login\n    algorithm: fixed_window\n    limit: 5\n    window: 1m\n    matc:\n      path: /login\n",
        r#"tollgate: {path}: policy "login": matc: unknown field, did you mean match? (expected: limit, window; any policy: scope, shards, hot_lease, match, identity, cost, on_store_failure, local_share_percent, retry_window, retry_ids, client_request_ids, mode)
 --> {path}:6:5
  |
4 |     limit: 5
5 |     window: 1m
6 |     matc:
  |     ^ policy "login": matc: unknown field, did you mean match? (expected: limit, window; any policy: scope, shards, hot_lease, match, identity, cost, on_store_failure, local_share_percent, retry_window, retry_ids, client_request_ids, mode)
7 |       path: /login
  |
"#,
    );
}

#[test]
fn a_duplicate_policy_name_is_pointed_at_the_second() {
    refused(
        "policies:\n  - name: login\n    algorithm: fixed_window\n    limit: 5\n    window: 1m\n  - name: login\n    algorithm: fixed_window\n    limit: 10\n    window: 1h\n",
        r#"tollgate: {path}: policy "login": name: duplicate; policy names must be unique
 --> {path}:6:5
  |
4 |     limit: 5
5 |     window: 1m
6 |   - name: login
  |     ^ policy "login": name: duplicate; policy names must be unique
7 |     algorithm: fixed_window
8 |     limit: 10
  |
"#,
    );
}

#[test]
fn a_bad_regions_field_is_pointed_at() {
    refused(
        "region: eu\nregions:\n  eu: {instances: 2}\n  us: {instances: 0}\npolicies:\n  - {name: p, algorithm: fixed_window, limit: 10, window: 1s}\n",
        r#"tollgate: {path}: config: regions.us.instances: must be a whole number ≥ 1, got number 0
 --> {path}:4:8
  |
2 | regions:
3 |   eu: {instances: 2}
4 |   us: {instances: 0}
  |        ^ regions.us.instances: must be a whole number ≥ 1, got number 0
5 | policies:
6 |   - {name: p, algorithm: fixed_window, limit: 10, window: 1s}
  |
"#,
    );
}

#[test]
fn a_bad_scope_is_pointed_at() {
    refused(
        "policies:\n  - name: p\n    algorithm: fixed_window\n    limit: 10\n    window: 1s\n    scope: planet\n",
        r#"tollgate: {path}: policy "p": scope: unknown scope "planet" (expected: instance, region, split, leased, global)
 --> {path}:6:5
  |
4 |     limit: 10
5 |     window: 1s
6 |     scope: planet
  |     ^ policy "p": scope: unknown scope "planet" (expected: instance, region, split, leased, global)
"#,
    );
}

#[test]
fn a_bad_match_option_is_pointed_at_inside_its_flow_mapping() {
    refused(
        "policies:\n  - name: login\n    algorithm: fixed_window\n    limit: 5\n    window: 1m\n    match: {path: /login, trailing_slash: maybe}\n",
        r#"tollgate: {path}: policy "login": match.trailing_slash: must be ignore or strict, got "maybe"
 --> {path}:6:27
  |
4 |     limit: 5
5 |     window: 1m
6 |     match: {path: /login, trailing_slash: maybe}
  |                           ^ policy "login": match.trailing_slash: must be ignore or strict, got "maybe"
"#,
    );
}

#[test]
fn a_tab_before_a_key_in_a_policy_is_pointed_at_itself() {
    refused(
        "policies:\n  - name: a\n    algorithm: fixed_window\n\tlimit: 5\n    window: 1s\n",
        r#"tollgate: {path}: config is not valid YAML: error: line 4 column 1: while scanning a plain scalar, found a tab
 --> {path}:4:1
  |
2 |   - name: a
3 |     algorithm: fixed_window
4 |     limit: 5
  | ^ while scanning a plain scalar, found a tab
5 |     window: 1s
  |
"#,
    );
}

#[test]
fn a_tab_after_a_comment_line_is_pointed_at_itself() {
    refused(
        "policies:\n  - name: a\n    algorithm: fixed_window\n    # a comment\n\tlimit: 5\n    window: 1s\n",
        r#"tollgate: {path}: config is not valid YAML: error: line 5 column 1: tabs disallowed within this context (block indentation)
 --> {path}:5:1
  |
3 |     algorithm: fixed_window
4 |     # a comment
5 |     limit: 5
  | ^ tabs disallowed within this context (block indentation)
6 |     window: 1s
  |
"#,
    );
}

#[test]
fn a_tab_after_a_blank_line_is_pointed_at_itself() {
    refused(
        "policies:\n  - name: a\n    algorithm: fixed_window\n\n\tlimit: 5\n    window: 1s\n",
        r#"tollgate: {path}: config is not valid YAML: error: line 5 column 1: while scanning a plain scalar, found a tab
 --> {path}:5:1
  |
3 |     algorithm: fixed_window
4 |
5 |     limit: 5
  | ^ while scanning a plain scalar, found a tab
6 |     window: 1s
  |
"#,
    );
}

/// What a policy may hold besides its algorithm's fields.
const ANY_POLICY: &str = "scope, shards, hot_lease, match, identity, cost, on_store_failure, local_share_percent, retry_window, retry_ids, client_request_ids, mode";

#[test]
fn a_misspelt_algorithm_is_named_unknown_at_its_own_line_with_the_field_it_meant() {
    let message = format!(
        "policy \"api\": algoritm: unknown field, did you mean algorithm? (expected: algorithm, capacity, refill, limit, window; any policy: {ANY_POLICY})"
    );
    refused(
        "policies:\n  - name: api\n    algoritm: token_bucket\n    capacity: 10\n    refill: { tokens: 1, per: 1s }\n",
        &format!(
            "tollgate: {{path}}: {message}\n --> {{path}}:3:5\n  |\n1 | policies:\n2 |   - name: api\n3 |     algoritm: token_bucket\n  |     ^ {message}\n4 |     capacity: 10\n5 |     refill: {{ tokens: 1, per: 1s }}\n  |\n"
        ),
    );
}

#[test]
fn a_misspelt_server_or_store_field_is_told_as_a_policys_is() {
    let server = "listen, deny_status, trusted_proxies, forward_auth, max_headers, max_header_bytes, identity_key_env, max_body_bytes, max_key_bytes, max_checks, watch_interval_ms, grpc_listen, grpc_response_headers, http_workers, max_connections, max_connections_per_peer, proxy_reserved_connections, header_timeout_ms, proxy_idle_timeout_ms, proxy_socket, request_timeout_ms, tls, request_id_header, require_tokens, hot_identity_metrics, shadow_mode, decision_log, trace, otlp, ui";
    let policy = "policies:\n  - {name: p, algorithm: fixed_window, limit: 10, window: 1s}\n";
    let message =
        format!("config: server: listn: unknown field, did you mean listen? (expected: {server})");
    let label = message.strip_prefix("config: ").expect("prefixed");
    refused(
        &format!("server:\n  listn: 127.0.0.1:8080\n{policy}"),
        &format!(
            "tollgate: {{path}}: {message}\n --> {{path}}:2:3\n  |\n1 | server:\n2 |   listn: 127.0.0.1:8080\n  |   ^ {label}\n3 | policies:\n4 |   - {{name: p, algorithm: fixed_window, limit: 10, window: 1s}}\n  |\n"
        ),
    );
    let message = "config: store.redis: urll: unknown field, did you mean url? (expected: url, cluster, sentinel, username, password, prefix, timeout, ttl_margin, batch, rejected_cache)";
    let label = message.strip_prefix("config: ").expect("prefixed");
    refused(
        &format!("store:\n  redis: {{urll: \"redis://127.0.0.1:1\"}}\n{policy}"),
        &format!(
            "tollgate: {{path}}: {message}\n --> {{path}}:2:11\n  |\n1 | store:\n2 |   redis: {{urll: \"redis://127.0.0.1:1\"}}\n  |           ^ {label}\n3 | policies:\n4 |   - {{name: p, algorithm: fixed_window, limit: 10, window: 1s}}\n  |\n"
        ),
    );
    // A store's own kind, and a nested field of the server section.
    let message = "config: store: rediss: unknown field, did you mean redis? (expected: memory, redis, readiness_when_down)";
    let label = message.strip_prefix("config: ").expect("prefixed");
    refused(
        &format!("store:\n  rediss: {{url: \"redis://127.0.0.1:1\"}}\n{policy}"),
        &format!(
            "tollgate: {{path}}: {message}\n --> {{path}}:2:3\n  |\n1 | store:\n2 |   rediss: {{url: \"redis://127.0.0.1:1\"}}\n  |   ^ {label}\n3 | policies:\n4 |   - {{name: p, algorithm: fixed_window, limit: 10, window: 1s}}\n  |\n"
        ),
    );
    let message = "config: server.decision_log: sample_percnt: unknown field, did you mean sample_percent? (expected: sample_percent)";
    let label = message.strip_prefix("config: ").expect("prefixed");
    refused(
        &format!("server:\n  decision_log: {{sample_percnt: 5}}\n{policy}"),
        &format!(
            "tollgate: {{path}}: {message}\n --> {{path}}:2:18\n  |\n1 | server:\n2 |   decision_log: {{sample_percnt: 5}}\n  |                  ^ {label}\n3 | policies:\n4 |   - {{name: p, algorithm: fixed_window, limit: 10, window: 1s}}\n  |\n"
        ),
    );
}

#[test]
fn a_field_near_no_known_one_is_refused_without_a_guess() {
    let message = "policy \"p\": match.colour: unknown field (expected: methods, path_prefix, path, host, case_insensitive, trailing_slash, format_suffix)";
    refused(
        "policies:\n  - name: p\n    algorithm: fixed_window\n    limit: 10\n    window: 1s\n    match:\n      colour: red\n",
        &format!(
            "tollgate: {{path}}: {message}\n --> {{path}}:7:7\n  |\n5 |     window: 1s\n6 |     match:\n7 |       colour: red\n  |       ^ {message}\n"
        ),
    );
}

#[test]
fn a_misspelt_identity_part_suggests_the_part_it_meant() {
    let message = "policy \"api\": identity[0]: \"heder\" is not an identity part, did you mean header? (expected one of: header: NAME, api_key: HEADER, bearer, client_ip, method, path, route, host, literal: VALUE)";
    refused(
        "policies:\n  - name: api\n    algorithm: fixed_window\n    limit: 5\n    window: 1s\n    identity:\n      - heder: X-Tenant\n",
        &format!(
            "tollgate: {{path}}: {message}\n --> {{path}}:7:9\n  |\n5 |     window: 1s\n6 |     identity:\n7 |       - heder: X-Tenant\n  |         ^ {message}\n"
        ),
    );
}
