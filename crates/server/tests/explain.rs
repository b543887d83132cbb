//! `tollgate explain` tells the whole bound: each algorithm's bound over a
//! span of time wherever the span starts (text and `--json`), one policy
//! by `--policy`, and every line of its text short enough to read.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

/// One policy of each algorithm, global on a Redis that need not run, and
/// the cases whose figures differ: a window of 1 ms or 2 ms, hot leases.
const EVERY_ALGORITHM: &str = r#"store: {redis: {url: "redis://127.0.0.1:1"}}
policies:
  - {name: fw, algorithm: fixed_window, limit: 100, window: 1m}
  - {name: sw, algorithm: sliding_window, limit: 100, window: 1m}
  - {name: log, algorithm: sliding_log, limit: 100, window: 1m}
  - {name: tb, algorithm: token_bucket, capacity: 100, refill: {tokens: 5, per: 1s}}
  - {name: gcra, algorithm: gcra, capacity: 10, refill: {tokens: 1, per: 1s}}
  - {name: fw-ms, algorithm: fixed_window, limit: 3, window: 1ms}
  - {name: sw-short, algorithm: sliding_window, limit: 10, window: 2ms}
  - {name: tb-hot, algorithm: token_bucket, capacity: 1000, refill: {tokens: 100, per: 1s}, hot_lease: {above: 50, term: 200ms}}
  - {name: sw-hot, algorithm: sliding_window, limit: 1000, window: 1s, hot_lease: {above: 50, term: 200ms}}
  - {name: fw-hot, algorithm: fixed_window, limit: 1000, window: 1s, hot_lease: {above: 50, term: 200ms}}
"#;

fn tollgate(args: &[&str], config: &Path, dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .arg("--config")
        .arg(config)
        .current_dir(dir)
        .env_remove("TOLLGATE_REGION")
        .env_remove("TOLLGATE_STORE")
        .env_remove("TOLLGATE_SHADOW_MODE")
        .output()
        .expect("tollgate runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

/// The `span:` field of each policy, its wrapped lines included.
fn spans(out: &str) -> Vec<String> {
    let mut spans: Vec<String> = Vec::new();
    let mut inside = false;
    for line in out.lines() {
        if line.starts_with("  span: ") {
            spans.push(line.to_owned());
            inside = true;
        } else if inside && line.starts_with("      ") {
            let last = spans.last_mut().expect("a span");
            last.push('\n');
            last.push_str(line);
        } else {
            inside = false;
        }
    }
    spans
}

#[test]
fn explain_states_each_algorithms_bound_over_any_span() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, EVERY_ALGORITHM).expect("write");
    let out = tollgate(&["explain"], &config, dir.path());
    assert_eq!(
        (out.status.code(), text(&out.stderr)),
        (Some(0), String::new())
    );
    assert_eq!(
        spans(&text(&out.stdout)),
        [
            "  span: exact per window (windows aligned to the Unix epoch), yet any 1m span can see up to 200: 100\n      \
             either side of a boundary.",
            "  span: at most 100 per window (windows aligned to the Unix epoch); the previous window counts as if\n      \
             spread evenly, so any 1m span can see up to 199: 100 in a window's last ms, 99 in the next.",
            "  span: exact over any span: any 1m span sees at most 100, wherever it starts.",
            "  span: a burst, then a rate: from any instant to T later (both included), at most\n      \
             100 + ⌊5 × T / 1s⌋, the full burst then the refill: 105 within 1s.",
            "  span: a burst, then a rate: from any instant to T later (both included), at most\n      \
             10 + ⌊1 × T / 1s⌋, the full burst then the refill: 11 within 1s.",
            "  span: exact per window; any 1ms span is one window: at most 3.",
            "  span: at most 10 per window (windows aligned to the Unix epoch); any 2ms span: at most 10.",
            "  span: a burst, then a rate: from any instant to T later (both included), at most\n      \
             1000 + ⌊100 × T / 1s⌋, the full burst then the refill: 1100 within 1s. With hot_lease an\n      \
             instance admits a block's units up to 200ms after the store counted them: from any instant to\n      \
             T later, at most 1000 + ⌊100 × (T + 200ms) / 1s⌋.",
            "  span: at most 1000 per window (windows aligned to the Unix epoch); the previous window counts as\n      \
             if spread evenly, so any 1s span can see up to 1998: 1000 in a window's last ms, 998 in the\n      \
             next. With hot_lease an instance admits a block's units up to 200ms after the store counted\n      \
             them: these figures are the store's count, and admissions can come up to 200ms later.",
            "  span: exact per window (windows aligned to the Unix epoch), yet any 1s span can see up to 2000:\n      \
             1000 either side of a boundary.",
        ]
    );

    let out = tollgate(&["explain", "--json"], &config, dir.path());
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let span = |i: usize| {
        let mut s = v["policies"][i]["scope"]["bound"]["span"].clone();
        s.as_object_mut().expect("an object").remove("text");
        s
    };
    let window = |ms: u64, per: u64, across: u64, exact: bool| {
        json!({"window_ms": ms, "per_window_at_most": per, "any_window_span_at_most": across,
               "exact_over_any_span": exact, "applies_to": "the policy"})
    };
    let bucket = |burst: u64, tokens: u64| {
        json!({"burst": burst, "refill_tokens": tokens, "refill_per_ms": 1000,
               "any_span_at_most": "burst + floor(refill_tokens × T / refill_per_ms), T in ms",
               "within_refill_period_at_most": burst + tokens, "applies_to": "the policy"})
    };
    let shifted = |mut s: Value| {
        s["admitted_up_to_ms_after_counted"] = json!(200);
        s
    };
    assert_eq!(span(0), window(60_000, 100, 200, false));
    assert_eq!(span(1), window(60_000, 100, 199, false));
    assert_eq!(span(2), window(60_000, 100, 100, true));
    assert_eq!(span(3), bucket(100, 5));
    assert_eq!(span(4), bucket(10, 1));
    assert_eq!(span(5), window(1, 3, 3, false));
    assert_eq!(span(6), window(2, 10, 10, false));
    assert_eq!(span(7), shifted(bucket(1000, 100)));
    assert_eq!(span(8), shifted(window(1000, 1000, 1998, false)));
    assert_eq!(span(9), window(1000, 1000, 2000, false));
    // The JSON's text is the text's field, unwrapped.
    assert_eq!(
        v["policies"][2]["scope"]["bound"]["span"]["text"],
        "exact over any span: any 1m span sees at most 100, wherever it starts."
    );
}

/// `instance` and `region` decide alone in each process or region: the
/// span bound is each one's, times the number `regions:` lists.
#[test]
fn an_instance_or_region_scope_states_the_span_bound_of_each() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(
        &config,
        r#"regions: {eu: {instances: 2}, us: {instances: 3}}
region: eu
stores: {local: memory, regional: {redis: {url: "redis://127.0.0.1:1"}}}
policies:
  - {name: fw, algorithm: fixed_window, limit: 100, window: 1m, scope: instance}
  - {name: tb, algorithm: token_bucket, capacity: 100, refill: {tokens: 5, per: 1s}, scope: region}
"#,
    )
    .expect("write");
    let out = tollgate(&["explain"], &config, dir.path());
    assert_eq!(
        spans(&text(&out.stdout)),
        [
            "  span: each process: exact per window (windows aligned to the Unix epoch), yet any 1m span can see\n      \
             up to 200: 100 either side of a boundary. Across the 5 instances `regions:` lists, 5 × each\n      \
             figure.",
            "  span: each region: a burst, then a rate: from any instant to T later (both included), at most\n      \
             100 + ⌊5 × T / 1s⌋, the full burst then the refill: 105 within 1s. Across the 2 regions\n      \
             `regions:` lists, 2 × each figure.",
        ]
    );
    let out = tollgate(&["explain", "--json"], &config, dir.path());
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let each = |i: usize| {
        let s = &v["policies"][i]["scope"]["bound"]["span"];
        (s["applies_to"].clone(), s["times"].clone())
    };
    assert_eq!(each(0), (json!("each instance"), json!(5)));
    assert_eq!(each(1), (json!("each region"), json!(2)));

    std::fs::write(
        &config,
        "policies:\n  - {name: log, algorithm: sliding_log, limit: 100, window: 1m}\n",
    )
    .expect("write");
    let out = tollgate(&["explain"], &config, dir.path());
    assert_eq!(
        spans(&text(&out.stdout)),
        [
            "  span: each process: exact over any span: any 1m span sees at most 100, wherever it starts. For N\n      \
          tollgate processes, N × each figure."
        ]
    );
}

#[test]
fn explain_policy_shows_that_policy_alone_and_refuses_an_unknown_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, EVERY_ALGORITHM).expect("write");
    let all = text(&tollgate(&["explain"], &config, dir.path()).stdout);
    // The header (up to the first policy), then the policy's block.
    let blocks: Vec<&str> = all.split("\n\n").collect();
    let log = blocks
        .iter()
        .find(|b| b.starts_with("log: "))
        .expect("log's block");
    let out = tollgate(&["explain", "--policy", "log"], &config, dir.path());
    assert_eq!(
        (out.status.code(), text(&out.stderr), text(&out.stdout)),
        (Some(0), String::new(), format!("{}\n\n{log}\n", blocks[0]))
    );

    let out = tollgate(
        &["explain", "--json", "--policy", "tb"],
        &config,
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(0));
    let one: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let every: Value =
        serde_json::from_slice(&tollgate(&["explain", "--json"], &config, dir.path()).stdout)
            .expect("JSON");
    assert_eq!(one["policies"], json!([every["policies"][3].clone()]));
    assert_eq!(one["hash"], every["hash"]);
    assert_eq!(one["envoy_rules"], json!([]));

    for json in [false, true] {
        let args: &[&str] = if json {
            &["explain", "--json", "--policy", "nope"]
        } else {
            &["explain", "--policy", "nope"]
        };
        let out = tollgate(args, &config, dir.path());
        assert_eq!(
            (out.status.code(), text(&out.stdout), text(&out.stderr)),
            (
                Some(1),
                String::new(),
                format!(
                    "tollgate: {}: --policy: no policy named \"nope\"; the config's policies: \
                     fw, sw, log, tb, gcra, fw-ms, sw-short, tb-hot, sw-hot, fw-hot\n",
                    config.display()
                )
            )
        );
    }
}

/// Every shipped example that is a tollgate config (a top-level
/// `policies:` or `envoy_ratelimit_configs:`), in each region it lists,
/// and a config of every scope and option: no line of explain's text is
/// longer than `tollgate::EXPLAIN_WIDTH` (100) characters.
#[test]
fn no_line_of_explain_is_longer_than_its_width_for_every_shipped_example() {
    assert_eq!(tollgate::EXPLAIN_WIDTH, 100);
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut configs = Vec::new();
    for entry in std::fs::read_dir(&examples).expect("examples") {
        let path = entry.expect("entry").path();
        let yaml = std::fs::read_to_string(&path).unwrap_or_default();
        let is_config = path.extension().is_some_and(|e| e == "yaml")
            && yaml
                .lines()
                .any(|l| l.starts_with("policies:") || l.starts_with("envoy_ratelimit_configs:"));
        if is_config {
            configs.push(path);
        }
    }
    configs.sort();
    assert!(configs.len() >= 5, "{configs:?}");
    let dir = tempfile::tempdir().expect("temp dir");
    let every_scope = dir.path().join("every-scope.yaml");
    std::fs::write(&every_scope, EVERY_SCOPE).expect("write");
    configs.push(every_scope);
    let token = "0123456789abcdef".repeat(4);
    let mut explained = 0;
    for config in &configs {
        for region in ["", "ap", "eu", "us"] {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
            cmd.args(["explain", "--config"])
                .arg(config.file_name().expect("a file name"))
                .current_dir(config.parent().expect("a directory"))
                .env_remove("TOLLGATE_STORE")
                .env_remove("TOLLGATE_SHADOW_MODE");
            for var in [
                "TOLLGATE_IDENTITY_KEY",
                "TOLLGATE_CHECK_TOKEN",
                "TOLLGATE_ADMIN_TOKEN",
                "TOLLGATE_METRICS_TOKEN",
                "TOLLGATE_AUTHORIZE_TOKEN",
            ] {
                cmd.env(var, &token);
            }
            if region.is_empty() {
                cmd.env_remove("TOLLGATE_REGION");
            } else {
                cmd.env("TOLLGATE_REGION", region);
            }
            let out = cmd.output().expect("tollgate runs");
            if !region.is_empty() && !out.status.success() {
                continue; // a region this config does not list
            }
            assert_eq!(
                out.status.code(),
                Some(0),
                "{config:?}: {}",
                text(&out.stderr)
            );
            let stdout = text(&out.stdout);
            for line in stdout.lines() {
                assert!(
                    line.chars().count() <= 100,
                    "{config:?} {region}: a line of {} characters:\n{line}",
                    line.chars().count()
                );
            }
            explained += 1;
        }
    }
    assert!(explained >= configs.len() + 3, "{explained}");
}

/// Every scope, every store topology and every option that adds text.
const EVERY_SCOPE: &str = r#"server: {shadow_mode: true, request_id_header: Idempotency-Key, trusted_proxies: [127.0.0.1]}
regions: {ap: {}, eu: {instances: 2, weight: 2}, us: {instances: 3}}
region: eu
stores:
  local: memory
  regional: {redis: {sentinel: {master: mymaster, nodes: ["redis://127.0.0.1:1"]}}}
  global: {redis: {cluster: ["redis://127.0.0.1:1"]}}
policies:
  - {name: inst, algorithm: sliding_log, limit: 10000, window: 1h, scope: instance}
  - {name: reg, algorithm: gcra, capacity: 100, refill: {tokens: 7, per: 3s}, scope: region, on_store_failure: local, local_share_percent: 10}
  - {name: spl, algorithm: sliding_window, limit: 1000, window: 1m, scope: split, mode: shadow}
  - {name: lea, algorithm: token_bucket, capacity: 600, refill: {tokens: 10, per: 1s}, scope: leased}
  - {name: glo, algorithm: fixed_window, limit: 1000, window: 1s, scope: global, shards: 4, client_request_ids: true}
  - {name: hot, algorithm: sliding_window, limit: 1000, window: 1s, scope: global, hot_lease: {above: 50, term: 200ms}}
  - {name: matched, algorithm: token_bucket, capacity: 10, refill: {tokens: 1, per: 1s}, scope: region, match: {methods: [GET, POST, PUT, PATCH, DELETE], path_prefix: /a/very/long/path/prefix/that/goes/on, host: api.example.com}, identity: [{header: X-Tenant}, {header: X-Api-Key-Of-Some-Length}, client_ip]}
"#;

/// Units of cost 1 the core admits at `now_ms` until it rejects one.
fn admit_all(
    limits: &tollgate_core::Limits,
    state: &mut Option<tollgate_core::State>,
    now_ms: u64,
) -> u64 {
    let mut admitted = 0;
    while limits.decide(state, now_ms, 1).allowed {
        admitted += 1;
    }
    admitted
}

/// Each figure `explain --json` states is reached by the core's own
/// decisions, at the schedule the figure names: a window's limit in its
/// last ms and all the next admits before the span ends; a bucket's burst,
/// then every unit as it refills, up to T later.
#[test]
fn the_core_admits_exactly_the_span_bound_explain_states() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, EVERY_ALGORITHM).expect("write");
    let out = tollgate(&["explain", "--json"], &config, dir.path());
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let loaded = tollgate::ServeConfig::parse(EVERY_ALGORITHM, |_| None).expect("valid");
    let boundary = 1_700_000_040_000; // a multiple of 1m and of 1s
    for (i, serve) in loaded.policies.iter().enumerate().take(7) {
        let limits = serve.declared.limits();
        let span = &v["policies"][i]["scope"]["bound"]["span"];
        let mut state = None;
        let admitted = if let Some(window_ms) = span["window_ms"].as_u64() {
            // From a window's last ms, to the end of a span of W.
            let start = boundary - 1;
            (start..start + window_ms)
                .map(|t| admit_all(limits, &mut state, t))
                .sum::<u64>()
        } else {
            // From an instant to one refill period later, both included.
            let per = span["refill_per_ms"].as_u64().expect("a bucket");
            (boundary..=boundary + per)
                .map(|t| admit_all(limits, &mut state, t))
                .sum::<u64>()
        };
        let stated = span["any_window_span_at_most"]
            .as_u64()
            .or(span["within_refill_period_at_most"].as_u64())
            .expect("a figure");
        assert_eq!(admitted, stated, "{}", serve.declared.name());
    }
}
