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
        r#"tollgate: {path}: config: unknown top-level field "polcies" (expected: server, region, regions, store, stores, policies, envoy_ratelimit_configs)
 --> {path}:4:1
  |
2 | server:
3 |   listen: 127.0.0.1:8080
4 | polcies: []
  | ^ unknown top-level field "polcies" (expected: server, region, regions, store, stores, policies, envoy_ratelimit_configs)
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
        r#"tollgate: {path}: policy "login": matc: unknown field (expected: limit, window; any policy: scope, shards, hot_lease, match, identity, cost, on_store_failure, local_share_percent, retry_window, retry_ids, client_request_ids, mode)
 --> {path}:6:5
  |
4 |     limit: 5
5 |     window: 1m
6 |     matc:
  |     ^ policy "login": matc: unknown field (expected: limit, window; any policy: scope, shards, hot_lease, match, identity, cost, on_store_failure, local_share_percent, retry_window, retry_ids, client_request_ids, mode)
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
