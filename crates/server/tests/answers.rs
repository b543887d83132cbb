//! Answers that say what is true: RateLimit fields a client can use for slow
//! and fast buckets and sub-second windows, a batch that can never pass says
//! so, `/v1/policies` and `explain` agree on the memory store,
//! envoyproxy/ratelimit rules are listed, one identity has one spelling, and
//! the docs' `curl` examples run as written.

mod support;

use std::path::PathBuf;

use support::{TestServer, TollgateProcess};
use tollgate::ServeConfig;

const BUCKETS: &str = r#"
server:
  trusted_proxies: [127.0.0.1]
policies:
  - name: write-api
    algorithm: token_bucket
    capacity: 20
    refill: { tokens: 5, per: 1s }
    match: { methods: [POST], path_prefix: /api/ }
    identity:
      - header: X-Tenant
  - name: per-ip
    algorithm: gcra
    capacity: 50
    refill: { tokens: 1000, per: 1s }
    identity: [client_ip]
"#;

/// One forward-auth call the way nginx makes it.
async fn authorize(server: &TestServer, uri: &str, tenant: &str) -> reqwest::Response {
    server
        .client
        .get(server.url("/v1/authorize"))
        .header("x-original-method", "POST")
        .header("x-original-uri", uri)
        .header("x-tenant", tenant)
        .send()
        .await
        .expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_bucket_states_its_capacity_and_a_fast_one_its_rate_per_second() {
    let server = TestServer::start(BUCKETS).await;
    let r = authorize(&server, "/api/orders", "acme").await;
    assert_eq!(r.status(), 200);
    // 20 at 5/s refills in 4 s; 50 at 1000/s refills within a second, so
    // it states its 1000 a second, not "50 a second".
    assert_eq!(
        r.headers()["ratelimit-policy"],
        "\"write-api\";q=20;w=4, \"per-ip\";q=1000;w=1"
    );
    // One token of write-api is back in 200 ms, of per-ip in 1 ms: both
    // round up to 1 s, within their windows.
    assert_eq!(
        r.headers()["ratelimit"],
        "\"write-api\";r=19;t=1, \"per-ip\";r=49;t=1"
    );
    server.stop().await;
}

const SUB_SECOND: &str = r#"
server:
  trusted_proxies: [127.0.0.1]
policies:
  - name: burst
    algorithm: fixed_window
    limit: 10
    window: 100ms
    identity: [client_ip]
  - name: burst-log
    algorithm: sliding_log
    limit: 10
    window: 100ms
    identity: [client_ip]
  - name: burst-counter
    algorithm: sliding_window
    limit: 10
    window: 100ms
    identity: [client_ip]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_second_window_states_the_whole_windows_of_a_second() {
    let server = TestServer::start(SUB_SECOND).await;
    let r = authorize(&server, "/", "acme").await;
    assert_eq!(r.status(), 200);
    // Ten windows of 10 a second, not "10 a second"; the counter states
    // L − 2 a window, what always fits its weighting.
    assert_eq!(
        r.headers()["ratelimit-policy"],
        "\"burst\";q=100;w=1, \"burst-log\";q=100;w=1, \"burst-counter\";q=80;w=1"
    );
    assert_eq!(
        r.headers()["ratelimit"],
        "\"burst\";r=9;t=1, \"burst-log\";r=9;t=1, \"burst-counter\";r=9;t=1"
    );
    server.stop().await;
}

const FIVE: &str = r#"
policies:
  - name: five
    algorithm: fixed_window
    limit: 5
    window: 1h
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_own_total_exceeds_the_limit_has_no_retry_time() {
    let server = TestServer::start(FIVE).await;
    let (status, body) = server
        .check(r#"{"checks":[{"policy":"five","key":"k","cost":3},{"policy":"five","key":"k","cost":3}]}"#)
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["allowed"], false);
    assert_eq!(body["decisions"][0]["allowed"], true);
    assert_eq!(body["decisions"][1]["allowed"], false);
    assert_eq!(
        body["decisions"][1]["retry_after_ms"],
        serde_json::Value::Null,
        "3 + 3 never fits under 5: {body}"
    );
    // A batch that fits the limit but not what is left waits for the window.
    let (_, body) = server
        .check(r#"{"policy":"five","key":"k","cost":4}"#)
        .await;
    assert_eq!(body["allowed"], true);
    let (_, body) = server
        .check(r#"{"checks":[{"policy":"five","key":"k","cost":1},{"policy":"five","key":"k","cost":1}]}"#)
        .await;
    assert_eq!(body["allowed"], false);
    assert!(
        body["decisions"][1]["retry_after_ms"].as_u64().is_some(),
        "{body}"
    );
    server.stop().await;
}

const MEMORY: &str = r#"
policies:
  - name: api
    algorithm: token_bucket
    capacity: 10
    refill: { tokens: 1, per: 1h }
    on_store_failure: fail_closed
    identity: [{ header: X-Tenant }]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_and_explain_say_the_same_about_a_memory_store_failing() {
    let server = TestServer::start(MEMORY).await;
    let policies: serde_json::Value = server
        .client
        .get(server.url("/v1/policies"))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    server.stop().await;
    let failure = &policies["policies"][0]["on_store_failure"];
    assert_eq!(
        failure,
        &serde_json::json!({
            "mode": "fail_closed",
            "while_degraded": "nothing can fail; the store is in the process",
        })
    );
    let config = ServeConfig::parse(MEMORY, |_| None).expect("valid");
    let explained = tollgate::explain(&config, "tollgate.yaml");
    let said = failure["while_degraded"].as_str().expect("text");
    assert!(
        explained.contains(&format!("\n  on store failure: {said}.\n")),
        "{explained}"
    );
}

const RULES: &str = "domain: shop
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: route
    value: checkout
    descriptors:
      - key: user
        rate_limit:
          unit: hour
          requests_per_unit: 10
";

#[test]
fn a_config_of_envoy_rules_only_lists_them_in_policies_and_explain() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("rules.yaml"), RULES).expect("write rules");
    let config_path = dir.path().join("tollgate.yaml");
    std::fs::write(&config_path, "envoy_ratelimit_configs: [rules.yaml]\n").expect("write");

    let loaded = ServeConfig::load(&config_path).expect("valid");
    let explained = tollgate::explain(&loaded, "tollgate.yaml");
    assert!(
        explained.contains(
            "  envoy rule shop user: 2 per minute (fixed_window)\n  envoy rule shop route_checkout.user: 10 per hour (fixed_window)\n"
        ),
        "{explained}"
    );

    let process = TollgateProcess::spawn(&config_path, &[]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let policies: serde_json::Value = runtime.block_on(async {
        reqwest::get(format!("{}/v1/policies", process.base))
            .await
            .expect("request")
            .json()
            .await
            .expect("json")
    });
    assert_eq!(policies["policies"], serde_json::json!([]));
    assert_eq!(
        policies["envoy_rules"],
        serde_json::json!([
            {"domain": "shop", "key": "user", "limit": "2 per minute (fixed_window)",
             "requests_per_unit": 2, "unit": "minute", "algorithm": "fixed_window"},
            {"domain": "shop", "key": "route_checkout.user", "limit": "10 per hour (fixed_window)",
             "requests_per_unit": 10, "unit": "hour", "algorithm": "fixed_window"},
        ])
    );
    assert_eq!(
        policies["envoy_rules"],
        tollgate::explain_json(&loaded, "tollgate.yaml")["envoy_rules"]
    );
}

const TENANT: &str = r#"
server:
  trusted_proxies: [127.0.0.1]
policies:
  - name: write-api
    algorithm: token_bucket
    capacity: 2
    refill: { tokens: 1, per: 1h }
    match: { methods: [POST], path_prefix: /api/ }
    identity:
      - header: X-Tenant
"#;

/// docs/http-api.md: `"key": "acme"` is not the identity `X-Tenant: acme`
/// makes; `{"x-tenant": "acme"}` is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_identity_is_the_composite_named_by_the_header_not_its_bare_value() {
    let server = TestServer::start(TENANT).await;
    for _ in 0..2 {
        assert_eq!(
            authorize(&server, "/api/orders", "acme").await.status(),
            200
        );
    }
    let (_, bare) = server
        .check(r#"{"policy":"write-api","key":"acme","cost":0}"#)
        .await;
    assert_eq!(bare["remaining"], 2, "a bare value is another identity");
    let (_, named) = server
        .check(r#"{"policy":"write-api","key":{"x-tenant":"acme"},"cost":0}"#)
        .await;
    assert_eq!(
        named["remaining"], 0,
        "the named part is forward auth's identity"
    );
    server.stop().await;
}

/// One `curl` command: method, URL, headers, body.
#[derive(Debug)]
struct Curl {
    method: Option<String>,
    url: String,
    headers: Vec<(String, String)>,
    body: Option<String>,
}

/// Shell words of a ```sh block, single quotes kept together across lines;
/// a newline outside quotes ends a command.
fn commands(block: &str) -> Vec<Vec<String>> {
    let (mut commands, mut words, mut word) = (Vec::new(), Vec::new(), String::new());
    let mut quoted = false;
    for c in block.chars() {
        match c {
            '\'' => quoted = !quoted,
            c if quoted => word.push(c),
            ' ' | '\t' | '\n' => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                if c == '\n' && !words.is_empty() {
                    commands.push(std::mem::take(&mut words));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    if !words.is_empty() {
        commands.push(words);
    }
    commands
}

fn curl(words: &[String]) -> Curl {
    let mut curl = Curl {
        method: None,
        url: String::new(),
        headers: Vec::new(),
        body: None,
    };
    let mut it = words.iter().skip(1);
    while let Some(word) = it.next() {
        let mut value = || it.next().cloned().expect("a value after a flag");
        match word.as_str() {
            "-d" | "--data" => curl.body = Some(value()),
            "-X" => curl.method = Some(value()),
            "-H" => {
                let header = value();
                let (name, v) = header.split_once(':').expect("Name: value");
                curl.headers
                    .push((name.trim().to_owned(), v.trim().to_owned()));
            }
            "-s" | "-i" | "-si" => {}
            url if !url.starts_with('-') => curl.url = url.to_owned(),
            other => panic!("a curl flag the test does not map: {other}"),
        }
    }
    curl
}

/// Every `curl` command of the document's ```sh blocks.
fn curl_examples(markdown: &str) -> Vec<Curl> {
    let mut found = Vec::new();
    let mut block: Option<String> = None;
    for line in markdown.lines() {
        match (&mut block, line.trim_start()) {
            (None, fence) if fence.starts_with("```sh") => block = Some(String::new()),
            (Some(text), "```") => {
                found.extend(
                    commands(text)
                        .into_iter()
                        .filter(|words| words[0] == "curl")
                        .map(|words| curl(&words)),
                );
                block = None;
            }
            (Some(text), _) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, _) => {}
        }
    }
    found
}

#[test]
fn the_docs_curl_examples_run_as_written_against_the_example_config() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(root.join("docs/http-api.md")).expect("docs");
    let examples = curl_examples(&doc);
    assert!(examples.len() >= 4, "{examples:?}");
    let process = TollgateProcess::spawn(&root.join("examples/tollgate.yaml"), &[]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = reqwest::Client::new();
    for example in &examples {
        let path = example
            .url
            .strip_prefix("localhost:8080")
            .unwrap_or_else(|| panic!("an example not on localhost:8080: {example:?}"));
        let method = example.method.clone().unwrap_or_else(|| {
            if example.body.is_some() {
                "POST"
            } else {
                "GET"
            }
            .to_owned()
        });
        let mut request = client.request(
            method.parse().expect("a method"),
            format!("{}{path}", process.base),
        );
        for (name, value) in &example.headers {
            request = request.header(name, value);
        }
        if let Some(body) = &example.body {
            request = request
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body.clone());
        }
        let (status, body) = runtime.block_on(async {
            let r = request.send().await.expect("request");
            (r.status().as_u16(), r.text().await.expect("body"))
        });
        assert!(
            ![400, 404, 422].contains(&status),
            "{example:?} answered {status}: {body}"
        );
    }
}
