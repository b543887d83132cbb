//! Per-policy scopes across regions (docs/design.md §7): named stores, each
//! instance's region, and each policy's scope deciding on its store — with
//! real tollgate processes in two regions, each region a redis-server of its
//! own, and one global redis-server. What every scope admits in total is
//! exactly what `tollgate explain --json` says it admits at most.

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use support::{TollgateProcess, explain_json};
use tollgate_testkit::RedisServer;

/// Four policies alike but for their scope: a bucket of 10 that refills one
/// token an hour, so nothing refills while the test runs.
fn config(a: &str, b: &str, global: &str) -> String {
    format!(
        r#"server: {{watch_interval_ms: 0}}
regions:
  a: {{instances: 2}}
  b: {{instances: 2}}
stores:
  local: memory
  regional:
    a: {{redis: {{url: "{a}"}}}}
    b: {{redis: {{url: "{b}"}}}}
  global: {{redis: {{url: "{global}"}}}}
policies:
  - {{name: g, algorithm: token_bucket, capacity: 10, refill: {{tokens: 1, per: 1h}}, scope: global}}
  - {{name: r, algorithm: token_bucket, capacity: 10, refill: {{tokens: 1, per: 1h}}, scope: region}}
  - {{name: s, algorithm: token_bucket, capacity: 10, refill: {{tokens: 1, per: 1h}}, scope: split}}
  - {{name: i, algorithm: token_bucket, capacity: 10, refill: {{tokens: 1, per: 1h}}, scope: instance}}
"#
    )
}

/// `tollgate explain --json` for `region`: each policy's `admitted_at_most`.
fn bounds(config: &Path, region: &str) -> Vec<(String, u64)> {
    explain_json(config, &["--region", region])["policies"]
        .as_array()
        .expect("policies")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().expect("name").to_owned(),
                p["scope"]["bound"]["admitted_at_most"]
                    .as_u64()
                    .expect("a number"),
            )
        })
        .collect()
}

async fn check(client: &reqwest::Client, base: &str, body: &str) -> Value {
    client
        .post(format!("{base}/v1/check"))
        .body(body.to_owned())
        .send()
        .await
        .expect("check")
        .json()
        .await
        .expect("JSON")
}

async fn metrics_text(client: &reqwest::Client, base: &str) -> String {
    client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text")
}

/// Admitted of `tries` single checks of `policy` on each of `bases`.
async fn admitted(client: &reqwest::Client, bases: &[&str], policy: &str, tries: usize) -> usize {
    let mut admitted = 0;
    for base in bases {
        for _ in 0..tries {
            let body = format!(r#"{{"policy":"{policy}","key":"k"}}"#);
            if check(client, base, &body).await["allowed"] == true {
                admitted += 1;
            }
        }
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_scope_admits_exactly_what_explain_bounds_it_to_across_two_regions() {
    let (ra, rb, rg) = (
        RedisServer::start().expect("region a's redis"),
        RedisServer::start().expect("region b's redis"),
        RedisServer::start().expect("the global redis"),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, config(&ra.url(), &rb.url(), &rg.url())).expect("write config");
    let stated = bounds(&path, "a");
    assert_eq!(
        stated,
        [
            ("g".to_owned(), 10),
            ("r".to_owned(), 20),
            ("s".to_owned(), 10),
            ("i".to_owned(), 40),
        ]
    );
    let processes: Vec<TollgateProcess> = ["a", "a", "b", "b"]
        .iter()
        .map(|region| TollgateProcess::spawn(&path, &[("TOLLGATE_REGION", region)]))
        .collect();
    let bases: Vec<&str> = processes.iter().map(|p| p.base.as_str()).collect();
    let client = reqwest::Client::new();

    // Each instance says what its scopes leave it to enforce.
    let metrics = metrics_text(&client, bases[0]).await;
    for line in [
        r#"tollgate_scope_limit{policy="g",scope="global",region="a"} 10"#,
        r#"tollgate_scope_limit{policy="s",scope="split",region="a"} 5"#,
        r#"tollgate_scope_limit{policy="i",scope="instance",region="a"} 10"#,
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line}:\n{metrics}"
        );
    }
    // All traffic in region a first: split gives it its share, 5 of 10,
    // and counts what the share turned away while b's 5 stayed unused.
    assert_eq!(admitted(&client, &bases[..2], "s", 10).await, 5);
    let mut turned_away = 0;
    for base in &bases[..2] {
        let text = metrics_text(&client, base).await;
        let prefix = r#"tollgate_split_turned_away_units_total{policy="s",region="a"} "#;
        turned_away += text
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix}:\n{text}"))
            .parse::<u64>()
            .expect("a count");
    }
    assert_eq!(turned_away, 15, "20 asked in region a, 5 admitted");
    // Then everywhere: each scope admits exactly its stated bound.
    for (policy, bound) in &stated {
        let total = admitted(&client, &bases, policy, 15).await;
        let already = if policy == "s" { 5 } else { 0 };
        assert_eq!(total + already, *bound as usize, "policy {policy}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_spanning_stores_is_decided_store_by_store_cheapest_first() {
    let (ra, rb, rg) = (
        RedisServer::start().expect("region a's redis"),
        RedisServer::start().expect("region b's redis"),
        RedisServer::start().expect("the global redis"),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, config(&ra.url(), &rb.url(), &rg.url())).expect("write config");
    let process = TollgateProcess::spawn(&path, &[("TOLLGATE_REGION", "a")]);
    let client = reqwest::Client::new();
    let base = process.base.as_str();
    let remaining = |v: &Value, i: usize| v["decisions"][i]["remaining"].as_u64();

    // Exhaust the global policy.
    for _ in 0..10 {
        check(&client, base, r#"{"policy":"g","key":"k"}"#).await;
    }
    // The local store (instance) is asked first and spends; the global one
    // then rejects: the request is rejected, and what the local store spent
    // stays spent (never more admitted than a policy allows).
    let both = r#"{"checks":[{"policy":"g","key":"k"},{"policy":"i","key":"k"}]}"#;
    let v = check(&client, base, both).await;
    assert_eq!(v["allowed"], false);
    assert_eq!((remaining(&v, 0), remaining(&v, 1)), (Some(0), Some(9)));
    // Exhaust the local one: now it rejects first, and the global store is
    // only peeked.
    for _ in 0..9 {
        check(&client, base, r#"{"policy":"i","key":"k"}"#).await;
    }
    let one_global = r#"{"checks":[{"policy":"i","key":"k"},{"policy":"r","key":"k"}]}"#;
    let v = check(&client, base, one_global).await;
    assert_eq!(v["allowed"], false);
    assert_eq!((remaining(&v, 0), remaining(&v, 1)), (Some(0), Some(10)));
    let v = check(&client, base, r#"{"policy":"r","key":"k"}"#).await;
    assert_eq!(v["remaining"], 9, "the peek spent nothing");
}

/// Where each case's fault is: the policy's `scope` (or the policy, when
/// it has none), a store or the region list.
const AT: [&str; 17] = [
    "5:5", "5:62", "5:62", "5:62", "6:62", "6:62", "6:62", "6:62", "6:62", "6:62", "6:62", "5:62",
    "5:62", "2:3", "2:3", "2:3", "1:1",
];

/// The configs `tollgate validate` must refuse, one a case: the YAML, the
/// region in TOLLGATE_REGION (if any) and the message; [`AT`] holds where
/// each case's fault is.
fn refused_cases() -> [(String, Option<&'static str>, &'static str); AT.len()] {
    let policy = |scope: &str| {
        format!("  - {{name: p, algorithm: fixed_window, limit: 2, window: 1s, scope: {scope}}}\n")
    };
    let two_stores =
        "stores:\n  local: memory\n  global: {redis: {url: \"redis://127.0.0.1:1\"}}\n";
    let two_regional = "stores:\n  regional: {redis: {url: \"redis://127.0.0.1:1\"}}\n  global: {redis: {url: \"redis://127.0.0.1:2\"}}\n";
    [
        (
            format!("{two_stores}policies:\n  - {{name: p, algorithm: fixed_window, limit: 2, window: 1s}}\n"),
            None,
            "policy \"p\": scope: missing: this config names several stores (local, global), so say which scope (instance, region, split, leased, global)",
        ),
        (
            format!("{two_stores}policies:\n{}", policy("region")),
            None,
            "policy \"p\": scope: region needs a regional store (stores.regional)",
        ),
        (
            format!("{two_stores}policies:\n{}", policy("leased")),
            Some("a"),
            "policy \"p\": scope: leased needs the regions listed (regions:), for their floors and weights",
        ),
        (
            format!("regions: {{a: {{}}}}\nstores:\n  regional: {{redis: {{url: \"redis://127.0.0.1:1\"}}}}\npolicies:\n{}", policy("leased")),
            Some("a"),
            "policy \"p\": scope: leased needs a global store (stores.global): its ledger lives there",
        ),
        (
            format!("regions: {{a: {{}}, b: {{}}, c: {{}}}}\n{two_regional}policies:\n{}", policy("leased")),
            Some("a"),
            "policy \"p\": scope: leased: region \"b\"'s floor is 0 of the limit 2 (50% split by weight): a region cut off from the ledger could admit nothing; raise floor or the limit",
        ),
        (
            format!("regions: {{a: {{}}, b: {{}}}}\n{two_regional}policies:\n{}", policy("{leased: {term: 1s, renew: 600ms}}")),
            Some("a"),
            "policy \"p\": scope: leased.renew: 600ms must be above 0 and at most half the term (1s), so a lease is renewed before it runs out even when one renewal is lost",
        ),
        (
            format!("regions: {{a: {{}}, b: {{}}}}\n{two_regional}policies:\n{}", policy("{leased: {term: 50ms}}")),
            Some("a"),
            "policy \"p\": scope: leased.term: 50ms is outside 200ms..=1d",
        ),
        (
            format!("regions: {{a: {{}}, b: {{}}}}\n{two_regional}policies:\n{}", policy("{leased: {floor: 120%}}")),
            Some("a"),
            "policy \"p\": scope: leased.floor: must be a percentage 0%..100%, got \"120%\"",
        ),
        (
            format!("regions: {{a: {{}}, b: {{}}}}\n{two_regional}policies:\n{}", policy("{leased: {identities: 0}}")),
            Some("a"),
            "policy \"p\": scope: leased.identities: must be a whole number 1..=100000, got 0",
        ),
        (
            format!("regions: {{a: {{}}, b: {{}}}}\n{two_regional}policies:\n{}", policy("{leased: {identities: many}}")),
            Some("a"),
            "policy \"p\": scope: leased.identities: must be a whole number such as 1000, got string \"many\"",
        ),
        (
            format!("regions: {{a: {{}}, b: {{}}}}\n{two_regional}policies:\n{}", policy("{leased: {terms: 1s}}")),
            Some("a"),
            "policy \"p\": scope: leased.terms: unknown field, did you mean term? (expected: term, renew, floor, identities)",
        ),
        (
            "regions: {a: {}, b: {}, c: {}}\nstores:\n  regional: {redis: {url: \"redis://127.0.0.1:1\"}}\npolicies:\n  - {name: p, algorithm: fixed_window, limit: 2, window: 1s, scope: split}\n".to_owned(),
            Some("a"),
            "policy \"p\": scope: split: region \"c\"'s share of the limit 2 is 0: it could admit nothing (lower its count of regions or raise the limit)",
        ),
        (
            "regions: {a: {}, b: {}}\nstores:\n  regional: {redis: {url: \"redis://127.0.0.1:1\"}}\npolicies:\n  - {name: p, algorithm: fixed_window, limit: 2, window: 1s, scope: split}\n".to_owned(),
            None,
            "policy \"p\": scope: split needs this instance's region (region:, --region or TOLLGATE_REGION)",
        ),
        (
            "stores:\n  regional: {a: {redis: {url: \"redis://127.0.0.1:1\"}}}\npolicies:\n  - {name: p, algorithm: fixed_window, limit: 2, window: 1s}\n".to_owned(),
            Some("b"),
            "config: stores.regional: no store for this instance's region \"b\" (it names: a)",
        ),
        (
            "stores:\n  global: memory\npolicies:\n  - {name: p, algorithm: fixed_window, limit: 2, window: 1s}\n".to_owned(),
            None,
            "config: stores.global: must be a redis store (a memory store is one instance's, not a global one)",
        ),
        (
            "stores:\n  remote: memory\npolicies:\n  - {name: p, algorithm: fixed_window, limit: 2, window: 1s}\n".to_owned(),
            None,
            "config: stores.remote: unknown role (expected: local, regional, global)",
        ),
        (
            "regions: {a: {}}\nregion: z\npolicies:\n  - {name: p, algorithm: fixed_window, limit: 2, window: 1s}\n".to_owned(),
            None,
            "config: region: \"z\" is not among regions (a)",
        ),
    ]
}

#[test]
fn scopes_are_refused_with_the_reason_when_the_config_cannot_keep_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (i, (yaml, env, message)) in refused_cases().into_iter().enumerate() {
        let path = dir.path().join(format!("case-{i}.yaml"));
        std::fs::write(&path, &yaml).expect("write");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
        cmd.args(["validate", "--config"]).arg(&path);
        cmd.env_remove("TOLLGATE_REGION");
        if let Some(region) = env {
            cmd.env("TOLLGATE_REGION", region);
        }
        let out = cmd.output().expect("tollgate validate runs");
        // The message, then where the fault is (the lines around it follow).
        let stderr = String::from_utf8_lossy(&out.stderr);
        let head: Vec<&str> = stderr.lines().take(2).collect();
        let shown = path.display();
        assert_eq!(
            (out.status.code(), head.join("\n")),
            (
                Some(1),
                format!("tollgate: {shown}: {message}\n --> {shown}:{}", AT[i])
            ),
            "case {i}"
        );
    }
}

#[test]
fn the_shipped_regions_example_is_explained_with_numbers() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/regions.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["explain", "--region", "us", "--config"])
        .arg(&example)
        .output()
        .expect("tollgate explain runs");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    // Each field whole, its wrapped lines included.
    for block in [
        "region: us; regions: ap (1 instance), eu (2 instances), us (2 instances)",
        "  bound: the limit, 5 per 10m, exact: one Redis decides every request, atomically on its own clock\n      \
        (while it keeps its data: one restarted empty forgets what was spent, up to one more limit).",
        "  bound: at most 3 × the limit: a burst of 300 then 300 per 1s, across the 3 regions `regions:`\n      \
        lists.",
        "  split: shares of 100: ap 34, eu 33, us 33 (largest remainder, ties to the first region by name;\n      \
        they sum to 100; a bucket's refill splits exactly by weight); this instance (us) enforces a\n      \
        burst of 33 then 5 per 3s. With all traffic in one region at most its share is admitted: at\n      \
        least 66 of the 100 strands in the quiet regions (what a busy region's share turns away:\n      \
        tollgate_split_turned_away_units_total).",
        "  split: shares of 10: ap 3, eu 5, us 2 (largest remainder, ties to the first region by name; they\n      \
        sum to 10; a bucket's refill splits exactly by weight); this instance (us) enforces 2 per 1h.\n      \
        With all traffic in one region at most its share is admitted: at least 5 of the 10 strands in\n      \
        the quiet regions (what a busy region's share turns away:\n      \
        tollgate_split_turned_away_units_total).",
        "  bound: at most 5 × the limit: 250 per 1s, across the 5 instances `regions:` lists.",
        "  bound: at most the limit, a burst of 600 then 10 per 1s: floors and live leases never sum above\n      \
        it, and units moving between regions rest first.",
        "  lease:\n    \
        floors: 50% of 600, by region weight, never leased away: ap 100, eu 100, us 100.\n    \
        spare: 300, leased by demand from the ledger in the global store (standalone, keys\n        \
        tollgate:lease:{tollgate-lease}:search:<identity>).\n    \
        term: 10s, renewed every 2500ms; units one region lets go rest 1m (the policy's time to forget a\n        \
        use) before another may lease them.\n    \
        converges: a busy region gets what a quiet one let go within 77750ms of a shift in demand:\n        \
        term + rest + 3 × renew + a round trip to the global store (at most its timeout, 250ms). A\n        \
        renewal reports the period before it, so the quiet region is still granted up to 2 renewals\n        \
        after the shift (several instances a region: each keeps its last report until it renews);\n        \
        that grant runs a term and rests, and the busy region takes it at its next renewal.\n    \
        this instance (us): spends its floor 100 plus what it holds; cut off from the ledger it falls to\n        \
        its floor at most a term after its last renewal.\n    \
        a ledger restarted empty: grants nothing for a term and a rest (every region on its floor\n        \
        meanwhile: at least 300 of the 600 unused).\n    \
        per identity: every identity has its own floor in each region (ap 100, eu 100, us 100) and\n        \
        leases its own spare by its own demand, so the bound, at most the limit (600), holds for\n        \
        each identity, and a tenant busy in one region gets nearly its whole limit there whoever is\n        \
        busy elsewhere.\n    \
        ledger cost: identities within their floor cost nothing; those wanting more are renewed\n        \
        together, 1 call per instance every 2500ms (0.4 calls/s per instance) carrying up to 100\n        \
        identities, 10 calls every 2500ms (4 calls/s) at this instance's bound of 1000 leased\n        \
        identities (beyond it an identity spends its floor, counted); 2 calls/s for the 5 instances\n        \
        `regions:` lists while each has up to 100.",
        "  span: each process: exact per window (windows aligned to the Unix epoch), yet any 1s span can see\n      \
        up to 100: 50 either side of a boundary. Across the 5 instances `regions:` lists, 5 × each\n      \
        figure.",
        "  span: a burst, then a rate: from any instant to T later (both included), at most\n      \
        600 + ⌊10 × T / 1s⌋, the full burst then the refill: 610 within 1s.",
    ] {
        assert!(
            text.contains(&format!("{block}\n")),
            "missing {block:?} in:\n{text}"
        );
    }
}

/// One region's config: its own regional Redis, the global one reached
/// through `global` (a delay proxy: this region's link to it).
fn region_config(regional: &str, global: &str) -> String {
    format!(
        r#"server: {{watch_interval_ms: 0}}
regions: {{a: {{}}, b: {{}}}}
stores:
  regional: {{redis: {{url: "{regional}"}}}}
  global: {{redis: {{url: "{global}", timeout: 1s, rejected_cache: 0}}}}
policies:
  - {{name: g, algorithm: token_bucket, capacity: 10, refill: {{tokens: 1, per: 1h}}, scope: global, on_store_failure: fail_closed}}
  - {{name: r, algorithm: token_bucket, capacity: 10, refill: {{tokens: 1, per: 1h}}, scope: region}}
"#
    )
}

/// (allowed, the path that decided) of one check.
async fn decided(client: &reqwest::Client, base: &str, policy: &str) -> (bool, String) {
    let v = check(
        client,
        base,
        &format!(r#"{{"policy":"{policy}","key":"k"}}"#),
    )
    .await;
    (
        v["allowed"] == true,
        v["path"].as_str().unwrap_or("shared").to_owned(),
    )
}

/// A region cut off from the global store, 30–80 ms away each way: its
/// global policy fails as declared (closed) while its regional one decides
/// exactly; the other region keeps the global state, and the cut-off region
/// rejoins it exactly once the link is back. Never more than the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_cut_off_from_the_global_store_keeps_every_bound() {
    use std::time::Duration;
    use tollgate_testkit::{Delay, DelayProxy, Link};
    let (ra, rb, rg) = (
        RedisServer::start().expect("region a's redis"),
        RedisServer::start().expect("region b's redis"),
        RedisServer::start().expect("the global redis"),
    );
    let far = Delay {
        min: Duration::from_millis(30),
        max: Duration::from_millis(80),
    };
    let global_addr = format!("127.0.0.1:{}", rg.port())
        .parse()
        .expect("global address");
    let link_a = DelayProxy::start(global_addr, far).expect("region a's link");
    let link_b = DelayProxy::start(global_addr, far).expect("region b's link");
    let dir = tempfile::tempdir().expect("temp dir");
    let (path_a, path_b) = (dir.path().join("a.yaml"), dir.path().join("b.yaml"));
    std::fs::write(&path_a, region_config(&ra.url(), &link_a.url())).expect("write a");
    std::fs::write(&path_b, region_config(&rb.url(), &link_b.url())).expect("write b");
    let a = TollgateProcess::spawn(&path_a, &[("TOLLGATE_REGION", "a")]);
    let b = TollgateProcess::spawn(&path_b, &[("TOLLGATE_REGION", "b")]);
    let client = reqwest::Client::new();

    // Four global decisions from each region, through the slow links.
    for base in [&a.base, &b.base] {
        for _ in 0..4 {
            assert_eq!(decided(&client, base, "g").await, (true, "shared".into()));
        }
    }
    // Region a cut off: its global policy fails closed, its regional one
    // is untouched.
    link_a.set_link(Link::BlackHole);
    for _ in 0..3 {
        assert_eq!(
            decided(&client, &a.base, "g").await,
            (false, "fail_closed".into())
        );
    }
    for _ in 0..10 {
        assert_eq!(
            decided(&client, &a.base, "r").await,
            (true, "shared".into())
        );
    }
    assert_eq!(
        decided(&client, &a.base, "r").await,
        (false, "shared".into())
    );
    // Region b still holds the global state: 2 of 10 left.
    let mut b_outcomes = Vec::new();
    for _ in 0..3 {
        b_outcomes.push(decided(&client, &b.base, "g").await);
    }
    assert_eq!(
        b_outcomes,
        [
            (true, "shared".into()),
            (true, "shared".into()),
            (false, "shared".into())
        ]
    );
    // The link back: once region a's circuit closes again it decides on
    // the global state, which is spent.
    link_a.set_link(Link::Pass);
    let mut rejoined = decided(&client, &a.base, "g").await;
    for _ in 0..100 {
        if rejoined.1 == "shared" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        rejoined = decided(&client, &a.base, "g").await;
    }
    assert_eq!(rejoined, (false, "shared".into()));
}

/// The global Redis killed and restarted without persistence: while it is
/// down the global policy fails as declared (closed); once back it has
/// forgotten what was spent, so it admits one more limit — exactly what
/// `explain` states ("one restarted empty forgets what was spent, up to one
/// more limit") — and no more; the regional policy never noticed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_store_restarted_empty_admits_at_most_one_more_limit() {
    use std::time::Duration;
    let ra = RedisServer::start().expect("region a's redis");
    let mut rg = RedisServer::start().expect("the global redis");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("a.yaml");
    std::fs::write(&path, region_config(&ra.url(), &rg.url())).expect("write");
    let a = TollgateProcess::spawn(&path, &[("TOLLGATE_REGION", "a")]);
    let client = reqwest::Client::new();
    let mut admitted = 0;
    for _ in 0..12 {
        admitted += usize::from(decided(&client, &a.base, "g").await.0);
    }
    assert_eq!(admitted, 10);
    rg.kill().expect("kill the global redis");
    assert_eq!(
        decided(&client, &a.base, "g").await,
        (false, "fail_closed".into())
    );
    rg.restart().expect("restart it empty");
    // Wait until it decides on the store again (its circuit closes).
    let mut first = decided(&client, &a.base, "g").await;
    for _ in 0..100 {
        if first.1 == "shared" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        first = decided(&client, &a.base, "g").await;
    }
    assert_eq!(first, (true, "shared".into()), "the spent state is gone");
    let mut again = 1;
    for _ in 0..12 {
        again += usize::from(decided(&client, &a.base, "g").await.0);
    }
    assert_eq!(admitted + again, 20, "one more limit, and no more");
    // The regional policy was decided on its own store throughout.
    let mut regional = 0;
    for _ in 0..12 {
        regional += usize::from(decided(&client, &a.base, "r").await.0);
    }
    assert_eq!(regional, 10);
}

/// `explain` keeps a policy's declared limit apart from its region's share,
/// and says what it limits and per what.
#[test]
fn explain_states_the_declared_limit_the_regions_share_the_match_and_the_identity() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("split.yaml");
    std::fs::write(
        &path,
        r#"regions: {eu: {instances: 1}, us: {instances: 1}}
stores:
  regional:
    eu: {redis: {url: "redis://127.0.0.1:1"}}
    us: {redis: {url: "redis://127.0.0.1:2"}}
policies:
  - name: exports
    algorithm: fixed_window
    limit: 10
    window: 1h
    scope: {split: {eu: 4, us: 1}}
    match: {methods: [POST], path_prefix: /exports}
    identity: [{header: X-Tenant}, client_ip]
"#,
    )
    .expect("write");
    let json = explain_json(&path, &["--region", "us"]);
    let p = &json["policies"][0];
    assert_eq!(
        (&p["limit"], &p["window"], &p["region_share"]),
        (
            &serde_json::json!(10),
            &serde_json::json!("1h"),
            &serde_json::json!({"limit": 2, "window": "1h"})
        )
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["explain", "--region", "us", "--config"])
        .arg(&path)
        .env_remove("TOLLGATE_REGION")
        .output()
        .expect("tollgate explain runs");
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    let policy: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("exports:"))
        .take(3)
        .collect();
    assert_eq!(
        policy,
        [
            "exports: fixed_window limit 10 per 1h",
            "  match: methods POST; path_prefix /exports",
            "  identity: one budget per header:x-tenant + client_ip",
        ],
        "{text}"
    );
}
