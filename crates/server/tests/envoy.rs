//! A real Envoy, configured as envoyproxy/ratelimit's users configure it
//! (the `envoy.filters.http.ratelimit` filter, an HTTP/2 rate limit
//! cluster), enforces an unmodified envoyproxy/ratelimit file through a
//! real `tollgate serve` process, in front of a small upstream. With
//! tollgate stopped, Envoy's `failure_mode_deny` decides.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use support::{EnvoyProcess, free_port, tollgate_bin};

/// A child process killed on drop.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `tollgate serve` with its gRPC service on `grpc_port`.
fn start_tollgate(config: &Path, grpc_port: u16) -> Process {
    start_tollgate_http(config, grpc_port).0
}

/// [`start_tollgate`], and its HTTP listener's base URL; an identity key
/// set for policies keyed by secrets.
fn start_tollgate_http(config: &Path, grpc_port: u16) -> (Process, String) {
    let mut child = Command::new(tollgate_bin())
        .env(
            "TOLLGATE_IDENTITY_KEY",
            "an identity key of thirty-two bytes or more",
        )
        .args(["serve", "--config"])
        .arg(config)
        .args(["--listen", "127.0.0.1:0", "--grpc-listen"])
        .arg(format!("127.0.0.1:{grpc_port}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn tollgate serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let http = lines.next().expect("a line").expect("read");
    let base = http
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{http}"))
        .to_owned();
    let grpc = lines.next().expect("a line").expect("read");
    assert_eq!(grpc, format!("grpc listening on 127.0.0.1:{grpc_port}"));
    (Process(child), base)
}

const RATELIMIT_FILE: &str = "domain: envoy_test
descriptors:
  # A year-long window: the test never straddles a boundary.
  - key: user
    rate_limit:
      unit: year
      requests_per_unit: 2
  - key: user
    value: vip
    rate_limit:
      unlimited: true
";

/// The `x-user` header as descriptor `user`, in domain `envoy_test`.
const USER_LIMITS: (&str, &str) = (
    "envoy_test",
    "                  - actions:
                    - request_headers: {header_name: x-user, descriptor_key: user}",
);

/// An Envoy config with two listeners, the first with
/// `failure_mode_deny: true`, the second false; `(domain, rate_limits)`
/// the filter's domain and the route's `rate_limits` entries.
fn envoy_config(
    (deny_port, allow_port, admin_port): (u16, u16, u16),
    upstream: u16,
    rls: u16,
    (domain, rate_limits): (&str, &str),
) -> String {
    let listener = |name: &str, port: u16, deny: bool| {
        format!(
            r#"
  - name: {name}
    address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {name}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                route:
                  cluster: upstream
                  rate_limits:
{rate_limits}
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: {domain}
              failure_mode_deny: {deny}
              timeout: 2s
              rate_limit_service:
                transport_api_version: V3
                grpc_service:
                  envoy_grpc: {{cluster_name: ratelimit}}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#
        )
    };
    let cluster = |name: &str, port: u16, http2: bool| {
        let options = if http2 {
            r#"
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}"#
        } else {
            ""
        };
        format!(
            r#"
  - name: {name}
    connect_timeout: 1s
    type: STATIC{options}
    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}
"#
        )
    };
    format!(
        "admin:\n  address: {{socket_address: {{address: 127.0.0.1, port_value: {admin_port}}}}}\nstatic_resources:\n  listeners:{}{}\n  clusters:{}{}",
        listener("deny", deny_port, true),
        listener("allow", allow_port, false),
        cluster("upstream", upstream, false),
        cluster("ratelimit", rls, true),
    )
}

async fn upstream(listener: tokio::net::TcpListener) {
    let app = axum::Router::new().fallback(|| async { "upstream says hi" });
    let _ = axum::serve(listener, app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_enforces_an_envoyproxy_ratelimit_file_through_tollgate() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("envoy_test.yaml"), RATELIMIT_FILE).expect("write");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(
        &config,
        "server: {watch_interval_ms: 0, grpc_response_headers: true}\nenvoy_ratelimit_configs: [envoy_test.yaml]\n",
    )
    .expect("write");

    let up = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let up_port = up.local_addr().expect("addr").port();
    tokio::spawn(upstream(up));

    let rls_port = free_port();
    let tollgate = start_tollgate(&config, rls_port);

    let (deny_port, allow_port, admin_port) = (free_port(), free_port(), free_port());
    let envoy_yaml = dir.path().join("envoy.yaml");
    std::fs::write(
        &envoy_yaml,
        envoy_config(
            (deny_port, allow_port, admin_port),
            up_port,
            rls_port,
            USER_LIMITS,
        ),
    )
    .expect("write");
    let client = reqwest::Client::new();
    let _envoy = EnvoyProcess::start(&envoy_yaml, admin_port).await;

    let get = |port: u16, user: &'static str| {
        let client = client.clone();
        async move {
            client
                .get(format!("http://127.0.0.1:{port}/orders"))
                .header("x-user", user)
                .send()
                .await
                .expect("request through envoy")
        }
    };

    // Two requests a year for alice: 200, 200, then 429.
    for remaining in ["1", "0"] {
        let r = get(deny_port, "alice").await;
        assert_eq!(r.status(), 200);
        let state = r.headers()["ratelimit"].to_str().expect("ascii").to_owned();
        assert!(
            state.starts_with(&format!("\"envoy_test.user\";r={remaining};t=")),
            "{state}"
        );
        assert_eq!(
            r.headers()["ratelimit-policy"],
            "\"envoy_test.user\";q=2;w=31536000"
        );
        assert_eq!(r.text().await.expect("body"), "upstream says hi");
    }
    let r = get(deny_port, "alice").await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["x-envoy-ratelimited"], "true");
    assert_eq!(
        r.headers()["ratelimit-policy"],
        "\"envoy_test.user\";q=2;w=31536000"
    );
    let state = r.headers()["ratelimit"].to_str().expect("ascii").to_owned();
    let t = state
        .strip_prefix("\"envoy_test.user\";r=0;t=")
        .unwrap_or_else(|| panic!("{state}"));
    // A fixed window's wait is its reset: Retry-After says the same seconds.
    assert_eq!(r.headers()["retry-after"].to_str().expect("ascii"), t);
    assert!(t.parse::<u64>().expect("seconds") > 0);
    // Another user, and the unlimited one, pass.
    assert_eq!(get(deny_port, "bob").await.status(), 200);
    for _ in 0..3 {
        assert_eq!(get(deny_port, "vip").await.status(), 200);
    }
    // The other listener asks the same tollgate: alice is over there too.
    assert_eq!(get(allow_port, "alice").await.status(), 429);

    // tollgate stopped: failure_mode_deny true → 500, false → 200.
    drop(tollgate);
    assert_eq!(get(deny_port, "carol").await.status(), 500);
    assert_eq!(get(allow_port, "carol").await.status(), 200);
}

/// The client's address (Envoy's `remote_address`, read from
/// `X-Forwarded-For` as Envoy does by default) keys `login`; `X-Api-Key`
/// keys `keyed`.
const IDENTITY_LIMITS: (&str, &str) = (
    "edge",
    "                  - actions:
                    - remote_address: {}
                  - actions:
                    - request_headers: {header_name: x-api-key, descriptor_key: api_key}",
);

const IDENTITY_CONFIG: &str = "server: {watch_interval_ms: 0}
envoy_ratelimit_configs: [edge.yaml]
policies:
  - {name: login, algorithm: fixed_window, limit: 5, window: 1h, identity: [client_ip]}
  - {name: keyed, algorithm: fixed_window, limit: 5, window: 1h, identity: [{api_key: X-Api-Key}]}
";

const IDENTITY_RULES: &str = "domain: edge
descriptors:
  - key: remote_address
    tollgate: {policy: login}
  - key: api_key
    tollgate: {policy: keyed}
";

/// Through a real Envoy whose `failure_mode_deny` is false: one IPv6 /64
/// is one client (5 of 8 admitted), a mapped IPv4 address spends its IPv4
/// address's budget, an API key is kept only hashed, and an empty key is
/// refused with 429 (never an error Envoy would let through).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_descriptors_bound_to_a_policy_key_by_its_identity_rules() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("edge.yaml"), IDENTITY_RULES).expect("write");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, IDENTITY_CONFIG).expect("write");
    let up = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let up_port = up.local_addr().expect("addr").port();
    tokio::spawn(upstream(up));
    let rls_port = free_port();
    let (_tollgate, base) = start_tollgate_http(&config, rls_port);
    let (deny_port, allow_port, admin_port) = (free_port(), free_port(), free_port());
    let envoy_yaml = dir.path().join("envoy.yaml");
    let ports = (deny_port, allow_port, admin_port);
    std::fs::write(
        &envoy_yaml,
        envoy_config(ports, up_port, rls_port, IDENTITY_LIMITS),
    )
    .expect("write");
    let client = reqwest::Client::new();
    let _envoy = EnvoyProcess::start(&envoy_yaml, admin_port).await;
    let get = |from: String, key: Option<&'static str>| {
        let mut request = client
            .get(format!("http://127.0.0.1:{allow_port}/login"))
            .header("x-forwarded-for", from);
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        async move { request.send().await.expect("request through envoy") }
    };
    let mut statuses = Vec::new();
    for host in 1..=8 {
        statuses.push(
            get(format!("2001:db8:7:7::{host:x}"), None)
                .await
                .status()
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);
    let mut statuses = Vec::new();
    for from in [
        "1.2.3.4",
        "::ffff:1.2.3.4",
        "1.2.3.4",
        "::ffff:1.2.3.4",
        "1.2.3.4",
        "::ffff:1.2.3.4",
    ] {
        statuses.push(get(from.to_owned(), None).await.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429]);
    let empty = get("198.51.100.1".to_owned(), Some("")).await;
    assert_eq!(empty.status(), 429);
    assert_eq!(
        empty.headers()["tollgate-problem"],
        "descriptors[1]: policy keyed: identity part api_key is empty"
    );
    let keyed = get("198.51.100.2".to_owned(), Some("sk_live_through_envoy")).await;
    assert_eq!(keyed.status(), 200);
    for path in ["/v1/hot", "/metrics"] {
        let text = client
            .get(format!("{base}{path}"))
            .send()
            .await
            .expect("GET")
            .text()
            .await
            .expect("body");
        assert!(text.contains("keyed"), "{path}: {text}");
        assert!(!text.contains("sk_live"), "{path}: {text}");
    }
    // The refused request spent nothing of 198.51.100.1's login budget.
    let checked: serde_json::Value = client
        .post(format!("{base}/v1/check"))
        .body(r#"{"policy":"login","key":{"client_ip":"198.51.100.1"},"cost":0}"#)
        .send()
        .await
        .expect("POST /v1/check")
        .json()
        .await
        .expect("JSON");
    assert_eq!(checked["remaining"], 5, "{checked}");
}
