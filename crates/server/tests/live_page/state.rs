//! `/ui/state` in-process on a manual clock: exact counts after known
//! traffic, identities named only as the hot identity series name them,
//! off by default (404 on every path of the page), the admin token asked
//! for as `/v1/hot` asks for it, and a store that never answers shown as an
//! open circuit with every decision counted as degraded.

use serde_json::{Value, json};
use tollgate_testkit::RedisServer;

use crate::support::{T0, TestServer, free_port, metric, metrics_text};

const IDENTITY_KEY: &str = "0123456789abcdef0123456789abcdef";
const ADMIN_TOKEN: &str = "ui-admin-token-0123456789";

fn env(name: &str) -> Option<String> {
    match name {
        "TOLLGATE_IDENTITY_KEY" => Some(IDENTITY_KEY.to_owned()),
        _ => None,
    }
}

fn env_with_admin(name: &str) -> Option<String> {
    match name {
        "TOLLGATE_ADMIN_TOKEN" => Some(ADMIN_TOKEN.to_owned()),
        other => env(other),
    }
}

/// GET `path` with an optional bearer token: status, the headers asked
/// for, and the body.
async fn get(
    server: &TestServer,
    path: &str,
    token: Option<&str>,
    headers: &[&str],
) -> (u16, Vec<Option<String>>, String) {
    let mut request = server.client.get(server.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("GET");
    let status = response.status().as_u16();
    let values = headers
        .iter()
        .map(|h| {
            response
                .headers()
                .get(*h)
                .map(|v| v.to_str().expect("ASCII").to_owned())
        })
        .collect();
    (status, values, response.text().await.expect("body"))
}

async fn check(server: &TestServer, policy: &str, key: &str, times: usize) {
    for _ in 0..times {
        let body = format!(r#"{{"policy":"{policy}","key":"{key}"}}"#);
        let (status, answer) = server.check(&body).await;
        assert!(status == 200 || status == 429, "{status} {answer}");
    }
}

async fn state(server: &TestServer, token: Option<&str>) -> Value {
    let (status, _, body) = get(server, "/ui/state", token, &[]).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("/ui/state is JSON")
}

#[tokio::test]
async fn off_by_default_every_path_of_the_page_is_not_found() {
    for server_section in ["", "server: {ui: off}\n"] {
        let yaml = format!(
            "{server_section}policies:\n  - {{name: api, algorithm: fixed_window, limit: 3, window: 1m}}\n"
        );
        let server = TestServer::start(&yaml).await;
        let (_, _, missing) = get(&server, "/no-such-page", None, &[]).await;
        for path in ["/ui", "/ui/ui.js", "/ui/ui.css", "/ui/state"] {
            let (status, headers, body) = get(&server, path, None, &["content-type"]).await;
            assert_eq!(status, 404, "{path} with {server_section:?}");
            assert_eq!(headers[0].as_deref(), Some("application/problem+json"));
            assert_eq!(
                body, missing,
                "{path}: the answer of a path that does not exist"
            );
        }
        server.stop().await;
    }
}

#[tokio::test]
async fn the_state_counts_known_traffic_exactly() {
    let yaml = r#"server: {ui: on, watch_interval_ms: 0}
policies:
  - {name: api, algorithm: fixed_window, limit: 3, window: 1m}
  - {name: watch, algorithm: fixed_window, limit: 2, window: 1m, mode: shadow}
"#;
    let server = TestServer::start_with_env(yaml, env).await;
    check(&server, "api", "alice", 5).await;
    check(&server, "api", "bob", 1).await;
    check(&server, "watch", "alice", 3).await;
    let now = state(&server, None).await;
    let text = now.to_string();
    assert!(
        !text.contains("alice") && !text.contains("bob"),
        "an identity as sent: {text}"
    );

    // A minute on, the hot identity series name the same identities: the
    // page names them as the metrics do.
    server.clock.advance(60_000);
    let metrics = metrics_text(&server.client, &server.base).await;
    let hashed = |policy: &str, count: u64| -> String {
        let prefix = format!("tollgate_hot_identity_decisions{{policy=\"{policy}\",identity=\"");
        metrics
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .find(|l| l.ends_with(&format!("\"}} {count}")))
            .and_then(|l| l.split('"').next())
            .unwrap_or_else(|| panic!("no hot identity of {policy} at {count}:\n{metrics}"))
            .to_owned()
    };
    let alice = hashed("api", 5);
    let bob = hashed("api", 1);
    assert!(alice.starts_with("hash:") && bob.starts_with("hash:"));
    assert_ne!(alice, bob);
    let no_degraded = json!({"fail_open": 0, "fail_closed": 0, "local": 0, "total": 0});
    let empty = json!({"by_decisions": [], "by_rejections": []});
    let config_hash = server.app.live.load().config.hash.clone();
    let expected = json!({
        "now_ms": T0,
        "config_hash": config_hash,
        "region": null,
        "identities": "hashed",
        "hot_window_ms": 60_000,
        "policies": [
            {
                "policy": "api", "mode": "enforced", "scope": "instance", "limit": 3,
                "allowed": 4, "rejected": 2, "shadow_rejected": 0,
                "degraded": no_degraded,
                "hot": {
                    "now": {
                        "by_decisions": [{"identity": alice, "count": 5}, {"identity": bob, "count": 1}],
                        "by_rejections": [{"identity": alice, "count": 2}],
                    },
                    "last": empty,
                },
                "lease": null,
            },
            {
                "policy": "watch", "mode": "shadow", "scope": "instance", "limit": 2,
                "allowed": 2, "rejected": 0, "shadow_rejected": 1,
                "degraded": no_degraded,
                "hot": {
                    "now": {
                        "by_decisions": [{"identity": alice, "count": 3}],
                        "by_rejections": [{"identity": alice, "count": 1}],
                    },
                    "last": empty,
                },
                "lease": null,
            },
        ],
        "stores": [{"role": "local", "region": null, "shared": false, "circuit": null, "keys": 3}],
    });
    assert_eq!(now, expected);
    // And what was now is the last whole window a minute on.
    let later = state(&server, None).await;
    assert_eq!(
        later["policies"][0]["hot"]["last"],
        now["policies"][0]["hot"]["now"]
    );
    assert_eq!(later["policies"][0]["hot"]["now"], empty);
    assert_eq!(later["now_ms"], T0 + 60_000);
    server.stop().await;
}

#[tokio::test]
async fn the_admin_token_guards_the_state_as_it_guards_hot() {
    let yaml = "server: {ui: on}\npolicies:\n  - {name: api, algorithm: fixed_window, limit: 3, window: 1m}\n";
    let server = TestServer::start_with_env(yaml, env_with_admin).await;
    let asked = ["www-authenticate", "content-type"];
    let (hot_status, hot_headers, hot_body) = get(&server, "/v1/hot", None, &asked).await;
    assert_eq!(hot_status, 401);
    for token in [None, Some("not-the-admin-token-at-all")] {
        let (status, headers, body) = get(&server, "/ui/state", token, &asked).await;
        assert_eq!(status, 401, "token {token:?}");
        assert_eq!(headers, hot_headers, "the headers /v1/hot answers with");
        assert_eq!(body, hot_body, "the problem /v1/hot answers with");
    }
    let admitted = state(&server, Some(ADMIN_TOKEN)).await;
    assert_eq!(admitted["policies"][0]["policy"], "api");
    // The page's files hold nothing of the server's: served to anyone, and
    // allowed to load nothing from elsewhere.
    for (path, kind) in [
        ("/ui", "text/html; charset=utf-8"),
        ("/ui/ui.js", "text/javascript; charset=utf-8"),
        ("/ui/ui.css", "text/css; charset=utf-8"),
    ] {
        let (status, headers, body) = get(
            &server,
            path,
            None,
            &["content-type", "content-security-policy"],
        )
        .await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(headers[0].as_deref(), Some(kind));
        let csp = headers[1].as_deref().expect("a Content-Security-Policy");
        assert!(
            csp.starts_with("default-src 'none'; script-src 'self';"),
            "{csp}"
        );
        // The one address in them is the SVG namespace's name, never fetched.
        let elsewhere = body.replace("\"http://www.w3.org/2000/svg\"", "");
        assert!(
            !elsewhere.contains("http://")
                && !elsewhere.contains("https://")
                && !elsewhere.contains("//cdn"),
            "{path} loads from elsewhere"
        );
    }
    let post = server
        .client
        .post(server.url("/ui/state"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("POST");
    assert_eq!(post.status().as_u16(), 405, "read-only");
    let metrics = server
        .client
        .get(server.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert_eq!(
        metric(
            &metrics,
            r#"tollgate_unauthorized_requests_total{endpoint="ui"}"#
        ),
        Some(2.0)
    );
    server.stop().await;
}

#[tokio::test]
async fn a_store_that_never_answers_shows_an_open_circuit_and_degraded_decisions() {
    // Nothing listens on this port: every call fails at once.
    let port = free_port();
    let yaml = format!(
        r#"server: {{ui: on}}
store: {{redis: {{url: "redis://127.0.0.1:{port}", timeout: 200ms}}}}
policies:
  - {{name: api, algorithm: fixed_window, limit: 3, window: 1m, on_store_failure: fail_open}}
  - {{name: login, algorithm: fixed_window, limit: 3, window: 1m, on_store_failure: fail_closed}}
"#
    );
    let server = TestServer::start_with_env(&yaml, env).await;
    check(&server, "api", "alice", 7).await;
    check(&server, "login", "alice", 2).await;
    let now = state(&server, None).await;
    let policy = |name: &str| {
        now["policies"]
            .as_array()
            .expect("policies")
            .iter()
            .find(|p| p["policy"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {now}"))
    };
    let api = policy("api");
    assert_eq!(
        (api["allowed"].clone(), api["rejected"].clone()),
        (json!(7), json!(0))
    );
    assert_eq!(
        api["degraded"],
        json!({"fail_open": 7, "fail_closed": 0, "local": 0, "total": 7})
    );
    let login = policy("login");
    assert_eq!(
        (login["allowed"].clone(), login["rejected"].clone()),
        (json!(0), json!(2))
    );
    assert_eq!(
        login["degraded"],
        json!({"fail_open": 0, "fail_closed": 2, "local": 0, "total": 2})
    );
    // Five failures open the circuit; the manual clock never ends its
    // cool-down.
    assert_eq!(
        now["stores"],
        json!([{"role": "global", "region": null, "shared": true, "circuit": "open", "keys": 0}])
    );
    // The same counts /metrics exports.
    let metrics = metrics_text(&server.client, &server.base).await;
    for (policy, path, n) in [
        ("api", "fail_open", 7.0),
        ("login", "fail_closed", 2.0),
        ("api", "local", 0.0),
    ] {
        let series = format!(
            r#"tollgate_policy_degraded_decisions_total{{policy="{policy}",path="{path}"}}"#
        );
        assert_eq!(metric(&metrics, &series), Some(n), "{series}");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_leased_policy_shows_every_regions_floor_and_this_regions_share() {
    let (regional, global) = (
        RedisServer::start().expect("redis-server"),
        RedisServer::start().expect("redis-server"),
    );
    // 60 a second, half of it floors: 10 for each of three regions, and a
    // spare of 30 leased by demand.
    let yaml = format!(
        r#"server: {{ui: on}}
region: a
regions: {{a: {{instances: 1}}, b: {{instances: 1}}, c: {{instances: 1}}}}
stores:
  regional: {{redis: {{url: "{}"}}}}
  global: {{redis: {{url: "{}"}}}}
policies:
  - {{name: api, algorithm: fixed_window, limit: 60, window: 1s,
      scope: {{leased: {{term: 1s, renew: 250ms, floor: 50%}}}}}}
"#,
        regional.url(),
        global.url()
    );
    let server = TestServer::start_with_env(&yaml, env).await;
    // Within the floor: nothing to lease.
    check(&server, "api", "alice", 4).await;
    let now = state(&server, None).await;
    assert_eq!(now["region"], "a");
    let api = &now["policies"][0];
    assert_eq!(
        (api["scope"].clone(), api["allowed"].clone()),
        (json!("leased"), json!(4))
    );
    assert_eq!(
        api["lease"],
        json!({
            "floor": 10, "spare": 30,
            "floors": [{"region": "a", "floor": 10}, {"region": "b", "floor": 10}, {"region": "c", "floor": 10}],
            "share": 10, "demand": 0, "unleased": 0, "identities": 0,
        })
    );
    assert_eq!(
        now["stores"],
        json!([
            {"role": "regional", "region": "a", "shared": true, "circuit": "closed", "keys": 0},
            {"role": "global", "region": null, "shared": true, "circuit": "closed", "keys": 0},
        ])
    );
    // The same share /metrics exports.
    let metrics = metrics_text(&server.client, &server.base).await;
    assert_eq!(
        metric(&metrics, r#"tollgate_lease_share{policy="api",region="a"}"#),
        Some(10.0)
    );
    server.stop().await;
}
