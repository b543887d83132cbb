//! `tollgate validate` refuses exactly what `tollgate serve` refuses, with
//! the same exit code and the same message: both load a config through one
//! function, and what `serve` used to find out only when opening its store
//! (a URL Redis cannot take) is checked at load.

use std::path::Path;
use std::process::{Command, Stdio};

/// `tollgate <args> --config <config>` with `env`, run to completion:
/// (exit code, stderr).
fn run(args: &[&str], config: &Path, env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.args(args)
        .arg("--config")
        .arg(config)
        .env_remove("TOLLGATE_IDENTITY_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("tollgate runs");
    (
        out.status.code().expect("exit code"),
        String::from_utf8(out.stderr).expect("UTF-8 stderr"),
    )
}

/// A config, its environment, the message both commands give, and what
/// follows it: where the fault is, with `{path}` for the file and `{label}`
/// for the message (without `config: `) under the caret.
type Case = (
    String,
    Vec<(&'static str, &'static str)>,
    &'static str,
    String,
);

const POLICY: &str = "policies:\n  - {name: p, algorithm: token_bucket, capacity: 10, refill: {tokens: 1, per: 1s}}\n";

/// What follows the message for a fault at `column` of `first`, the line
/// written above [`POLICY`]'s two.
fn above_policy(first: &str, column: usize) -> String {
    format!(
        " --> {{path}}:1:{column}\n  |\n1 | {first}\n  | {:w$}^ {{label}}\n2 | policies:\n3 |   - {{name: p, algorithm: token_bucket, capacity: 10, refill: {{tokens: 1, per: 1s}}}}\n  |\n",
        "",
        w = column - 1
    )
}

/// What follows the message for a fault at `column` of `second`, the
/// first policy, below `policies:`.
fn in_policy(second: &str, column: usize) -> String {
    format!(
        " --> {{path}}:2:{column}\n  |\n1 | policies:\n2 | {second}\n  | {:w$}^ {{label}}\n",
        "",
        w = column - 1
    )
}

#[test]
fn validate_and_serve_refuse_the_same_configs_with_the_same_words() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = |line: &str| {
        format!(
            " --> {{path}}:2:11\n  |\n1 | store:\n2 | {line}\n  |           ^ {{label}}\n3 | policies:\n4 |   - {{name: p, algorithm: token_bucket, capacity: 10, refill: {{tokens: 1, per: 1s}}}}\n  |\n"
        )
    };
    let cases: Vec<Case> = vec![
        (
            format!("store:\n  redis: {{url: \"http://127.0.0.1:1\"}}\n{POLICY}"),
            vec![],
            "config: store.redis.url: \"http://127.0.0.1:1\" is not a Redis URL (expected redis://HOST:PORT, rediss://… or redis+unix:///PATH)",
            store("  redis: {url: \"http://127.0.0.1:1\"}"),
        ),
        (
            format!("store:\n  redis: {{url: \"redis://127.0.0.1:notaport\"}}\n{POLICY}"),
            vec![],
            "config: store.redis.url: \"redis://127.0.0.1:notaport\" is not a Redis URL (expected redis://HOST:PORT, rediss://… or redis+unix:///PATH)",
            store("  redis: {url: \"redis://127.0.0.1:notaport\"}"),
        ),
        (
            format!("store:\n  redis: {{cluster: [\"redis://127.0.0.1:7000\", \"tcp://u:secret@10.0.0.2:7000\"]}}\n{POLICY}"),
            vec![],
            "config: store.redis.cluster: \"tcp://<redacted>@10.0.0.2:7000\" is not a Redis URL (expected redis://HOST:PORT, rediss://… or redis+unix:///PATH)",
            // The line shows no credentials either.
            store("  redis: {cluster: [\"redis://127.0.0.1:7000\", <redacted>]}"),
        ),
        (
            format!("server: {{max_body_bytes: 0}}\n{POLICY}"),
            vec![],
            "config: server: max_body_bytes must be positive",
            above_policy("server: {max_body_bytes: 0}", 10),
        ),
        (
            format!("server: {{max_key_bytes: 0}}\n{POLICY}"),
            vec![],
            "config: server: max_key_bytes must be positive",
            above_policy("server: {max_key_bytes: 0}", 10),
        ),
        (
            format!("server: {{max_checks: 0}}\n{POLICY}"),
            vec![],
            "config: server: max_checks must be positive",
            above_policy("server: {max_checks: 0}", 10),
        ),
        (
            format!("server: {{max_headers: 4}}\n{POLICY}"),
            vec![],
            "config: server: max_headers 4 is outside 16..=8192",
            above_policy("server: {max_headers: 4}", 10),
        ),
        (
            "policies:\n  - {name: big, algorithm: fixed_window, limit: 5, window: 1s, cost: 6}\n".to_owned(),
            vec![],
            "policy \"big\": cost: 6 is above the policy's limit 5: no request would ever be admitted",
            in_policy("  - {name: big, algorithm: fixed_window, limit: 5, window: 1s, cost: 6}", 64),
        ),
        (
            "policies:\n  - {name: keyed, algorithm: fixed_window, limit: 5, window: 1s, identity: [{api_key: X-API-Key}]}\n".to_owned(),
            vec![("TOLLGATE_IDENTITY_KEY", "short-key")],
            "config: the identity hashing key in TOLLGATE_IDENTITY_KEY is 9 bytes: it needs at least 32 bytes of entropy (e.g. `openssl rand -hex 32`)",
            // About the environment, not one place in the file.
            String::new(),
        ),
        (
            "policies:\n  - {name: free, algorithm: fixed_window, limit: 5, window: 1s, cost: {header: X-Cost, max: 5, default: 0}}\n".to_owned(),
            vec![],
            "policy \"free\": cost.default: 0 is below cost.min 1",
            in_policy("  - {name: free, algorithm: fixed_window, limit: 5, window: 1s, cost: {header: X-Cost, max: 5, default: 0}}", 96),
        ),
        (
            format!("polices: []\n{POLICY}"),
            vec![],
            "config: polices: unknown field, did you mean policies? (expected: server, region, regions, store, stores, policies, envoy_ratelimit_configs)",
            above_policy("polices: []", 1),
        ),
        (
            "policies:\n  - {name: p, algorithm: fixed_window, limit: 10, window: 1s, matc: {}}\n".to_owned(),
            vec![],
            "policy \"p\": matc: unknown field, did you mean match? (expected: limit, window; any policy: scope, shards, hot_lease, match, identity, cost, on_store_failure, local_share_percent, retry_window, retry_ids, client_request_ids, mode)",
            in_policy("  - {name: p, algorithm: fixed_window, limit: 10, window: 1s, matc: {}}", 63),
        ),
        (
            format!("server: {{require_tokens: [check, admin]}}\n{POLICY}"),
            vec![("TOLLGATE_CHECK_TOKEN", "a-check-token-of-24-bytes")],
            "config: server.require_tokens names admin, but TOLLGATE_ADMIN_TOKEN is not set: set it to a random token of at least 16 bytes (e.g. `openssl rand -hex 32`), or take admin out of the list to leave those endpoints open",
            above_policy("server: {require_tokens: [check, admin]}", 10),
        ),
        (
            format!("server: {{require_tokens: [root]}}\n{POLICY}"),
            vec![],
            "config: server: require_tokens: unknown endpoint group \"root\" (expected: check, admin, metrics, authorize)",
            above_policy("server: {require_tokens: [root]}", 10),
        ),
        (
            format!("server: {{hot_identity_metrics: plain}}\n{POLICY}"),
            vec![],
            "config: server: unknown variant `plain`, expected one of `off`, `hashed`, `raw`",
            above_policy("server: {hot_identity_metrics: plain}", 10),
        ),
        (
            format!("server: {{forward_auth: haproxy}}\n{POLICY}"),
            vec![],
            "config: server: forward_auth: unknown proxy \"haproxy\" (expected nginx, traefik, envoy, off, or {method, uri, host} header names)",
            above_policy("server: {forward_auth: haproxy}", 10),
        ),
    ];
    for (i, (yaml, env, message, place)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("case-{i}.yaml"));
        std::fs::write(&path, yaml).expect("write config");
        let shown = path.display().to_string();
        let label = message.strip_prefix("config: ").unwrap_or(message);
        let place = place.replace("{path}", &shown).replace("{label}", label);
        let expected = format!("tollgate: {shown}: {message}\n{place}");
        let validated = run(&["validate"], &path, env);
        let served = run(&["serve", "--listen", "127.0.0.1:0"], &path, env);
        assert_eq!(validated, (1, expected.clone()), "validate, case {i}");
        assert_eq!(served, (1, expected), "serve, case {i}");
    }
}

#[test]
fn validate_warns_of_what_is_valid_but_probably_not_meant() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("warn.yaml");
    std::fs::write(
        &path,
        "policies:\n  - {name: login, algorithm: fixed_window, limit: 5, window: 1m, on_store_failure: fail_closed, match: {path: /login, case_insensitive: true, trailing_slash: ignore, format_suffix: ignore}}\n  - {name: rows, algorithm: fixed_window, limit: 5, window: 1m, cost: {header: X-Rows, max: 50}}\n",
    )
    .expect("write config");
    let (code, stderr) = run(&["validate"], &path, &[]);
    assert_eq!(code, 0);
    assert_eq!(
        stderr,
        "tollgate: warning: policies login match forwarded requests, but server.trusted_proxies is empty: /v1/authorize refuses a request description (nginx headers) from any peer, and client_ip is the caller's own address\n\
         tollgate: warning: policy rows: cost.max 50 is above the limit 5: a request whose x-rows header asks more than 5 is never admitted (429 without Retry-After)\n"
    );
}

/// `tollgate <args>` with no `--config`, with `env`: (exit code, stdout, stderr).
fn run_bare(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.args(args).stdin(Stdio::null());
    for var in ["TOLLGATE_CONFIG", "TOLLGATE_STORE", "TOLLGATE_REGION"] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("tollgate runs");
    (
        out.status.code().expect("exit code"),
        String::from_utf8(out.stdout).expect("UTF-8 stdout"),
        String::from_utf8(out.stderr).expect("UTF-8 stderr"),
    )
}

#[test]
fn validate_and_explain_read_the_environment_and_flags_serve_reads() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("regions.yaml");
    std::fs::write(
        &path,
        "region: eu\nregions: {eu: {}, us: {}}\npolicies:\n  - {name: p, algorithm: fixed_window, limit: 10, window: 1s}\n",
    )
    .expect("write config");
    let config = path.to_str().expect("UTF-8 path");
    let bad_store = "tollgate: {config}: config: --store (TOLLGATE_STORE): \"http://x\" is not a store: expected memory, redis://HOST:PORT or rediss://HOST:PORT\n";
    let bad_store = bad_store.replace("{config}", config);

    // TOLLGATE_CONFIG names the file, as for serve.
    let (code, out, _) = run_bare(&["validate"], &[("TOLLGATE_CONFIG", config)]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with(&format!("config {config} is valid")),
        "{out}"
    );

    // A bad TOLLGATE_STORE, and the same in --store, fail validate as serve.
    for (args, env) in [
        (vec!["--store", "http://x"], vec![]),
        (vec![], vec![("TOLLGATE_STORE", "http://x")]),
    ] {
        for command in [
            &["validate"][..],
            &["explain"],
            &["serve", "--listen", "127.0.0.1:0"],
        ] {
            let args = [command, &["--config", config], &args[..]].concat();
            let (code, _, err) = run_bare(&args, &env);
            assert_eq!(
                (code, err.as_str()),
                (1, bad_store.as_str()),
                "{args:?} {env:?}"
            );
        }
    }

    // TOLLGATE_REGION picks the region explain describes; --region wins.
    let share = |args: &[&str], env: &[(&str, &str)]| {
        let args = [&["explain", "--json", "--config", config][..], args].concat();
        let (code, out, err) = run_bare(&args, env);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        v["region"].as_str().expect("a region").to_owned()
    };
    assert_eq!(share(&[], &[]), "eu");
    assert_eq!(share(&[], &[("TOLLGATE_REGION", "us")]), "us");
    assert_eq!(
        share(&["--region", "eu"], &[("TOLLGATE_REGION", "us")]),
        "eu"
    );
}

#[test]
fn validate_strict_fails_on_a_warning_and_passes_a_clean_config() {
    let dir = tempfile::tempdir().expect("temp dir");
    let warned = dir.path().join("warned.yaml");
    std::fs::write(
        &warned,
        "policies:\n  - {name: rows, algorithm: fixed_window, limit: 5, window: 1m, cost: {header: X-Rows, max: 50}}\n",
    )
    .expect("write config");
    let clean = dir.path().join("clean.yaml");
    std::fs::write(&clean, POLICY).expect("write config");
    let warning = "tollgate: warning: policy rows: cost.max 50 is above the limit 5: a request whose x-rows header asks more than 5 is never admitted (429 without Retry-After)\n";

    let (code, stderr) = run(&["validate", "--strict"], &warned, &[]);
    assert_eq!(code, 1);
    assert_eq!(
        stderr,
        format!(
            "{warning}tollgate: {}: 1 warning under --strict\n",
            warned.display()
        )
    );
    // Without --strict the same config passes, warned.
    assert_eq!(run(&["validate"], &warned, &[]), (0, warning.to_owned()));
    assert_eq!(
        run(&["validate", "--strict"], &clean, &[]),
        (0, String::new())
    );
}

#[test]
fn validate_warns_of_a_secret_header_kept_as_it_is_and_of_raw_hot_identity_series() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("secret.yaml");
    std::fs::write(
        &path,
        "server: {trusted_proxies: [127.0.0.1], hot_identity_metrics: raw}\npolicies:\n  - {name: api, algorithm: fixed_window, limit: 5, window: 1m, identity: [{header: Authorization}, {header: X-Tenant}]}\n  - {name: keyed, algorithm: fixed_window, limit: 5, window: 1m, identity: [{header: X-API-Key}]}\n",
    )
    .expect("write config");
    let (code, stderr) = run(&["validate"], &path, &[]);
    assert_eq!(code, 0);
    assert_eq!(
        stderr,
        "tollgate: warning: policy api: identity part header:authorization looks like a secret, and a header: part is kept as it is: its value would stand in the store's keys, in /v1/hot and in the tollgate_hot_identity_* series (hot_identity_metrics: raw); key it as bearer (or api_key: authorization) to hash it with the identity key\n\
         tollgate: warning: policy keyed: identity part header:x-api-key looks like a secret, and a header: part is kept as it is: its value would stand in the store's keys, in /v1/hot and in the tollgate_hot_identity_* series (hot_identity_metrics: raw); key it as api_key: x-api-key to hash it with the identity key\n\
         tollgate: warning: server.hot_identity_metrics is raw: the tollgate_hot_identity_* series carry identities as they are (client addresses, header values) to whoever reads /metrics; hashed keeps their shape without who they are\n"
    );
}

/// What `serve` and `validate` say of a listener beyond loopback without
/// the tokens: every group that would be open.
const EXPOSED: &str = "is beyond loopback, but server.require_tokens does not name check, admin, metrics, authorize: whoever reaches it may use those endpoints without a token";

#[test]
fn validate_names_a_listener_beyond_loopback_without_tokens() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("open.yaml");
    std::fs::write(&path, format!("server: {{listen: 0.0.0.0:8080}}\n{POLICY}")).expect("write");
    let (code, stderr) = run(&["validate", "--strict"], &path, &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "tollgate: warning: server.listen 0.0.0.0:8080 {EXPOSED}"
        )),
        "{stderr}"
    );
    assert!(stderr.ends_with(": 1 warning under --strict\n"), "{stderr}");
}

#[test]
fn serve_warns_at_start_when_the_listener_it_opens_is_beyond_loopback_without_tokens() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("open.yaml");
    std::fs::write(&path, POLICY).expect("write config");
    // Started with --listen as a container is: the file alone says loopback.
    let started = |listen: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["serve", "--config"])
            .arg(&path)
            .args(["--listen", listen])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tollgate serve");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
            &mut line,
        )
        .expect("a listen line");
        assert!(line.starts_with("listening on "), "{line}");
        // Its start-up warnings come before the listen line.
        let _ = child.kill();
        let out = child.wait_with_output().expect("stopped");
        String::from_utf8(out.stderr).expect("UTF-8 stderr")
    };
    let open = started("0.0.0.0:0");
    let warned: Vec<&str> = open.lines().filter(|l| l.contains(EXPOSED)).collect();
    assert_eq!(warned.len(), 1, "{open}");
    assert!(warned[0].contains(" WARN "), "{open}");
    assert!(
        warned[0].contains("server.listen 0.0.0.0:0 is beyond loopback"),
        "{open}"
    );
    assert!(!started("127.0.0.1:0").contains(EXPOSED));
}

/// `tollgate validate ARGS --config PATH`: (exit code, stdout).
fn stdout_of(args: &[&str], path: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .arg("--config")
        .arg(path)
        .env_remove("TOLLGATE_IDENTITY_KEY")
        .output()
        .expect("tollgate runs");
    (
        out.status.code().expect("exit code"),
        String::from_utf8(out.stdout).expect("UTF-8 stdout"),
    )
}

#[test]
fn strict_never_says_a_config_it_fails_is_valid_and_an_explicit_empty_proxy_list_is_no_warning() {
    let dir = tempfile::tempdir().expect("temp dir");
    let matching = "policies:\n  - {name: reads, algorithm: fixed_window, limit: 5, window: 1m, match: {methods: [GET]}}\n";
    let warned = dir.path().join("warned.yaml");
    std::fs::write(&warned, matching).expect("write config");
    assert_eq!(
        stdout_of(&["validate", "--strict"], &warned),
        (1, String::new())
    );
    let (code, stdout) = stdout_of(&["validate"], &warned);
    assert_eq!(code, 0);
    assert!(
        stdout.starts_with(&format!("config {} is valid (hash ", warned.display())),
        "{stdout}"
    );
    // `trusted_proxies: []` written out: no proxy forwards here, as meant.
    let declared = dir.path().join("declared.yaml");
    std::fs::write(
        &declared,
        format!("server: {{trusted_proxies: []}}\n{matching}"),
    )
    .expect("write config");
    assert_eq!(
        run(&["validate", "--strict"], &declared, &[]),
        (0, String::new())
    );
    let (code, stdout) = stdout_of(&["validate", "--strict"], &declared);
    assert_eq!(code, 0);
    assert!(
        stdout.starts_with(&format!("config {} is valid (hash ", declared.display())),
        "{stdout}"
    );
}
