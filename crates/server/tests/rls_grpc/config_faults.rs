//! Config faults in envoyproxy/ratelimit files are refused at load, naming
//! the file and the path.

use tollgate::ServeConfig;

use crate::examples::EXAMPLE_1;

fn load_error(tollgate_yaml: &str, files: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("dir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, tollgate_yaml).expect("write");
    ServeConfig::load(&path).expect_err("refused").to_string()
}

#[test]
fn malformed_envoy_files_are_refused_with_file_and_path() {
    let top = "envoy_ratelimit_configs: [r.yaml]\n";
    let cases: &[(&str, &str)] = &[
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 3}\n",
            "r.yaml: descriptors[0].rate_limit.burst: unknown key",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        colour: red\n",
            "r.yaml: descriptors[0].descriptors[0].colour: unknown key",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n",
            "r.yaml: descriptors[0].rate_limit: should not specify rate limit unit when unlimited",
        ),
        (
            "descriptors:\n  - key: a\n",
            "r.yaml: config file cannot have an empty domain",
        ),
        (
            "domain: d\ndescriptors:\n  - value: a\n",
            "r.yaml: descriptors[0]: descriptor has an empty key",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n  - key: a\n",
            "r.yaml: descriptors[1]: duplicate descriptor composite key \"a\"",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    value: x\n    share_threshold: true\n",
            "r.yaml: descriptors[0].share_threshold: share_threshold can only be used with wildcard values",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {replaces: [{name: n}], name: n, unit: second, requests_per_unit: 1}\n",
            "r.yaml: descriptors[0].rate_limit.replaces[0]: replaces should not contain name of same descriptor",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    tollgate: {policy: nope}\n",
            "r.yaml: descriptors[0].tollgate.policy: no tollgate policy named \"nope\"",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n    tollgate: {algorithm: leaky}\n",
            "r.yaml: descriptors[0].tollgate",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
            "r.yaml: descriptors[0].rate_limit.requests_per_unit: must be a whole number",
        ),
    ];
    for (file, expected) in cases {
        let err = load_error(top, &[("r.yaml", file)]);
        assert!(err.contains(expected), "expected {expected:?} in {err:?}");
    }
    // A fault at a place in the file shows where, with the lines around it.
    let err = load_error(top, &[("r.yaml", cases[1].0)]);
    assert!(
        err.ends_with(
            "r.yaml:6:9\n  |\n4 |     descriptors:\n5 |       - key: b\n6 |         colour: red\n  |         ^ descriptors[0].descriptors[0].colour: unknown key (expected: key, value, rate_limit, descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold, metadata, tollgate)"
        ),
        "{err}"
    );
    // A bound rule's identity holds one value a key: a key repeated along
    // its path could never be decided, so it is refused at load.
    let bound = "policies:\n  - {name: tenants, algorithm: fixed_window, limit: 5, window: 1m}\nenvoy_ratelimit_configs: [r.yaml]\n";
    let err = load_error(
        bound,
        &[(
            "r.yaml",
            "domain: d\ndescriptors:\n  - key: tenant\n    descriptors:\n      - key: tenant\n        value: vip\n        tollgate: {policy: tenants}\n",
        )],
    );
    assert!(
        err.contains("r.yaml: descriptors[0].descriptors[0].tollgate.policy: a rule bound to policy \"tenants\" cannot repeat the key \"tenant\" of a descriptor above it"),
        "{err}"
    );
    // An unbound rule may repeat a key, as envoyproxy/ratelimit allows, and
    // a bound rule below other keys loads.
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(
        dir.path().join("r.yaml"),
        "domain: d\ndescriptors:\n  - key: tenant\n    descriptors:\n      - key: tenant\n        value: vip\n        rate_limit: {unit: second, requests_per_unit: 1}\n      - key: plan\n        tollgate: {policy: tenants}\n",
    )
    .expect("write");
    std::fs::write(dir.path().join("tollgate.yaml"), bound).expect("write");
    ServeConfig::load(&dir.path().join("tollgate.yaml"))
        .expect("repeated keys without a bound policy load");
    let err = load_error(
        "envoy_ratelimit_configs: [a.yaml, b.yaml]\n",
        &[("a.yaml", EXAMPLE_1), ("b.yaml", EXAMPLE_1)],
    );
    assert!(
        err.contains("b.yaml: duplicate domain \"mongo_cps\""),
        "{err}"
    );
    let err = load_error("envoy_ratelimit_configs: [missing.yaml]\n", &[]);
    assert!(err.contains("missing.yaml: cannot read"), "{err}");
    let err = load_error("envoy_ratelimit_configs: []\n", &[]);
    assert!(
        err.contains("envoy_ratelimit_configs must be a non-empty list"),
        "{err}"
    );
}

#[test]
fn every_longer_unit_loads_as_envoyproxy_ratelimit_counts_it() {
    let dir = tempfile::tempdir().expect("dir");
    let file = "domain: units
descriptors:
  - {key: s, rate_limit: {unit: SECOND, requests_per_unit: 1}}
  - {key: w, rate_limit: {unit: week, requests_per_unit: 1}}
  - {key: m, rate_limit: {unit: Month, requests_per_unit: 1}}
  - {key: y, rate_limit: {unit: year, requests_per_unit: 1}}
";
    std::fs::write(dir.path().join("u.yaml"), file).expect("write");
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, "envoy_ratelimit_configs: [u.yaml]\n").expect("write");
    let config = ServeConfig::load(&path).expect("loads");
    let windows: Vec<u64> = config
        .envoy
        .rules
        .iter()
        .map(|r| match &r.kind {
            tollgate::RuleKind::Limited { policy, .. } => policy.limits().window_ms(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(windows, [1_000, 604_800_000, 2_592_000_000, 31_536_000_000]);
}
