//! The hot identity series name each identity by its injective encoding:
//! two identities whose display forms share a 128-byte prefix, or print
//! alike (the value `x-tenant=acme` and the part `x-tenant: acme`), are two
//! label values, never two samples of one series, raw or hashed, and the
//! scrape stays valid Prometheus text.

mod support;

use std::collections::HashSet;

use support::TestServer;

const CONFIG: &str = r#"
policies:
  - name: api
    algorithm: token_bucket
    capacity: 1
    refill: { tokens: 1, per: 1h }
    identity: [{ header: X-Tenant }]
"#;

const KEY: &str = "hot-labels-test-identity-key-of-32-bytes";

/// A sample: its metric name, its labels (values unescaped), its value.
type Sample = (String, Vec<(String, String)>, f64);

/// One sample line of the text format, read strictly; `None` when
/// malformed.
fn sample(line: &str) -> Option<Sample> {
    let (name, mut rest) = line.split_at(line.find(['{', ' '])?);
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = after;
        loop {
            let (label, after) = rest.split_once("=\"")?;
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next()? {
                    (i, '"') => break i,
                    (_, '\\') => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        c @ ('\\' | '"') => value.push(c),
                        _ => return None,
                    },
                    (_, '\n') => return None,
                    (_, c) => value.push(c),
                }
            };
            labels.push((label.to_owned(), value));
            rest = &after[end + 1..];
            if let Some(after) = rest.strip_prefix(',') {
                rest = after;
            } else {
                rest = rest.strip_prefix('}')?;
                break;
            }
        }
    }
    let value = rest.strip_prefix(' ')?.parse().ok()?;
    Some((name.to_owned(), labels, value))
}

/// Every hot identity sample of a scrape; panics on a malformed line or
/// a label set given twice.
fn hot_samples(text: &str) -> Vec<Sample> {
    let mut seen = HashSet::new();
    let mut hot = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let parsed = sample(line).unwrap_or_else(|| panic!("not Prometheus text: {line:?}"));
        assert!(
            seen.insert((parsed.0.clone(), parsed.1.clone())),
            "a series given twice: {line}"
        );
        if parsed.0.starts_with("tollgate_hot_identity_") {
            hot.push(parsed);
        }
    }
    assert!(text.ends_with("# EOF\n"));
    hot
}

/// Spends each identity of a minute: four /v1/check keys and one forward
/// auth header, each asked twice (one admitted, one rejected).
async fn traffic(server: &TestServer, long: &str) {
    server.clock.set(60_000);
    for key in [
        format!("{long}a"),
        format!("{long}b"),
        "x-tenant=acme".to_owned(),
        "evil\n\u{1b}[31m".to_owned(),
    ] {
        let body = serde_json::json!({"policy": "api", "key": key}).to_string();
        for _ in 0..2 {
            server.check(&body).await;
        }
    }
    for _ in 0..2 {
        let r = server
            .client
            .get(server.url("/v1/authorize"))
            .header("x-tenant", "acme")
            .send()
            .await
            .expect("request");
        assert!(r.status() == 200 || r.status() == 429);
    }
    server.clock.set(120_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identities_sharing_a_long_prefix_are_distinct_series_raw_or_hashed() {
    let long = "t".repeat(200);
    let raw = TestServer::start(&format!("server:\n  hot_identity_metrics: raw\n{CONFIG}")).await;
    let hashed = TestServer::start_with_env(CONFIG, |name| {
        (name == "TOLLGATE_IDENTITY_KEY").then(|| KEY.to_owned())
    })
    .await;
    for server in [&raw, &hashed] {
        traffic(server, &long).await;
        let text = server.text("/metrics").await;
        let hot = hot_samples(&text);
        // Five identities, each decided twice and rejected once.
        for (name, count) in [
            ("tollgate_hot_identity_decisions", 2.0),
            ("tollgate_hot_identity_rejections", 1.0),
        ] {
            let values: HashSet<&str> = hot
                .iter()
                .filter(|(n, _, v)| n == name && *v == count)
                .map(|(_, labels, _)| labels[1].1.as_str())
                .collect();
            assert_eq!(values.len(), 5, "{name}: {text}");
            for value in values {
                assert!(value.len() <= 200, "{value}");
                assert!(!value.contains(&long), "{value}");
                assert!(!value.chars().any(char::is_control), "{value:?}");
            }
        }
        assert!(!text.contains('\u{1b}'));
    }
    raw.stop().await;
    hashed.stop().await;
}
