//! What a concurrency policy cannot be, refused when the file is read, each
//! with its message: a split or leased scope, shards, a hot lease, a cost
//! other than one permit, and limits out of their bounds.

use tollgate_config::Config;

const TWO_REGIONAL: &str = "regions: {a: {}, b: {}}
stores:
  regional: {redis: {url: \"redis://127.0.0.1:1\"}}
  global: {redis: {url: \"redis://127.0.0.1:2\"}}
";

fn refusal(file: &str, region: Option<&str>) -> String {
    let env = |name: &str| {
        (name == "TOLLGATE_REGION")
            .then(|| region.map(str::to_owned))
            .flatten()
    };
    match Config::parse(file, env) {
        Ok(_) => panic!("accepted:\n{file}"),
        Err(e) => e.to_string(),
    }
}

fn policy(extra: &str) -> String {
    format!(
        "policies:\n  - {{name: reports, algorithm: concurrency, limit: 3, lease: 30s{extra}}}\n"
    )
}

#[test]
fn instance_region_and_global_scopes_are_accepted() {
    let file = format!("{TWO_REGIONAL}{}", policy(", scope: region"));
    assert!(Config::parse(&file, |n| (n == "TOLLGATE_REGION").then(|| "a".into())).is_ok());
    let file = format!("{TWO_REGIONAL}{}", policy(", scope: global"));
    assert!(Config::parse(&file, |n| (n == "TOLLGATE_REGION").then(|| "a".into())).is_ok());
    assert!(Config::parse(&policy(""), |_| None).is_ok());
}

#[test]
fn a_concurrency_policy_refuses_what_divides_a_count_of_units() {
    let cases = [
        (
            format!("{TWO_REGIONAL}{}", policy(", scope: split")),
            "policy \"reports\": scope: split cannot divide a concurrency limit: a region's fixed share of permits is not defined; use instance, region or global",
        ),
        (
            format!("{TWO_REGIONAL}{}", policy(", scope: leased")),
            "policy \"reports\": scope: leased cannot divide a concurrency limit: a leased share is a count of units, and permits are held and released by id; use instance, region or global",
        ),
        (
            policy(", shards: 2"),
            "policy \"reports\": shards: cannot split a concurrency limit: a permit is released by its identity's one key, which shards would spread",
        ),
        (
            policy(", hot_lease: {above: 100}"),
            "policy \"reports\": hot_lease: cannot take blocks of a concurrency limit: permits are released one by one, never given back as units",
        ),
        (
            policy(", cost: 2"),
            "policy \"reports\": cost: a concurrency check takes one permit a request: cost must be 1",
        ),
        (
            "policies:\n  - {name: reports, algorithm: concurrency, limit: 10001, lease: 30s}\n"
                .to_owned(),
            "policy \"reports\": limit: 10001 is too large for concurrency, at most 10000 permits",
        ),
        (
            "policies:\n  - {name: reports, algorithm: concurrency, limit: 3, lease: 2d}\n"
                .to_owned(),
            "policy \"reports\": lease: 2d is too long, at most 1d: a holder that dies keeps its permit this long",
        ),
        (
            "policies:\n  - {name: reports, algorithm: concurrency, limit: 3}\n".to_owned(),
            "policy \"reports\": lease: missing",
        ),
    ];
    for (file, message) in cases {
        let refused = refusal(&file, Some("a"));
        assert!(refused.contains(message), "{refused}\n  wanted: {message}");
    }
}
