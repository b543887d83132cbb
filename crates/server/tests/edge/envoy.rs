//! A real Envoy calls a real `tollgate serve` over TLS with the check token
//! as its initial metadata: decided with the right token, failed closed
//! with a wrong one.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use tokio::net::TcpListener;

use crate::harness::*;
use crate::pki::*;
use crate::support::{TollgateProcess, envoy_binary, free_port, metric, tollgate_bin};

/// Spawns `tollgate serve` on `config` with `env`; returns the process and
/// its gRPC address (from its second stdout line).
fn spawn_serve(config: &Path, env: &[(&str, &str)], stderr: Stdio) -> (TollgateProcess, String) {
    let mut cmd = Command::new(tollgate_bin());
    cmd.args(["serve", "--config"])
        .arg(config)
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(stderr);
    for var in [
        "TOLLGATE_CHECK_TOKEN",
        "TOLLGATE_ADMIN_TOKEN",
        "TOLLGATE_METRICS_TOKEN",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("TOLLGATE_IDENTITY_KEY", "k".repeat(32));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn tollgate serve");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let (mut first, mut second) = (String::new(), String::new());
    stdout.read_line(&mut first).expect("listen line");
    stdout.read_line(&mut second).expect("grpc line");
    let base = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {first:?}"))
        .to_owned();
    let grpc = second
        .trim()
        .strip_prefix("grpc listening on ")
        .unwrap_or_else(|| panic!("unexpected second line: {second:?}"))
        .to_owned();
    (TollgateProcess { child, base }, grpc)
}

/// An Envoy listener whose rate limit filter calls tollgate's gRPC service
/// with `token` as `initial_metadata`, failing closed.
fn envoy_listener(name: &str, port: u16, token: &str) -> String {
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
                  - actions:
                    - request_headers: {{header_name: x-tenant, descriptor_key: tenant}}
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: edge
              failure_mode_deny: true
              timeout: 2s
              rate_limit_service:
                transport_api_version: V3
                grpc_service:
                  envoy_grpc: {{cluster_name: ratelimit}}
                  initial_metadata:
                  - {{key: authorization, value: "Bearer {token}"}}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#
    )
}

/// Envoy's two clusters: the upstream, and tollgate's RLS over TLS (HTTP/2,
/// the test CA trusted, the certificate's name checked).
fn envoy_clusters(upstream: u16, rls: u16, ca: &Path) -> String {
    let ca = ca.display();
    format!(
        r#"
  - name: upstream
    connect_timeout: 1s
    type: STATIC
    load_assignment:
      cluster_name: upstream
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {upstream}}}}}}}
  - name: ratelimit
    connect_timeout: 1s
    type: STATIC
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: localhost
        common_tls_context:
          alpn_protocols: [h2]
          validation_context:
            trusted_ca: {{filename: {ca}}}
            match_typed_subject_alt_names:
            - san_type: DNS
              matcher: {{exact: localhost}}
    load_assignment:
      cluster_name: ratelimit
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {rls}}}}}}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_calls_tollgate_over_tls_with_the_check_token_as_initial_metadata() {
    let pki = Pki::new();
    let config = pki.config("  grpc_listen: 127.0.0.1:0\n");
    let (tollgate, grpc) = spawn_serve(
        &config,
        &[
            ("TOLLGATE_CHECK_TOKEN", CHECK_TOKEN),
            ("TOLLGATE_METRICS_TOKEN", METRICS_TOKEN),
        ],
        Stdio::inherit(),
    );
    let rls_port: u16 = grpc
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("grpc port");
    std::fs::write(pki.path("ca.pem"), &pki.ca_pem).expect("write ca");

    let up = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let up_port = up.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let app = axum::Router::new().fallback(|| async { "upstream says hi" });
        let _ = axum::serve(up, app).await;
    });
    let (right_port, wrong_port, admin_port) = (free_port(), free_port(), free_port());
    let envoy_yaml = pki.path("envoy.yaml");
    std::fs::write(
        &envoy_yaml,
        format!(
            "admin:\n  address: {{socket_address: {{address: 127.0.0.1, port_value: {admin_port}}}}}\nstatic_resources:\n  listeners:{}{}\n  clusters:{}",
            envoy_listener("right", right_port, CHECK_TOKEN),
            envoy_listener("wrong", wrong_port, WRONG_TOKEN),
            envoy_clusters(up_port, rls_port, &pki.path("ca.pem")),
        ),
    )
    .expect("write envoy config");
    let envoy = Command::new(envoy_binary())
        .arg("-c")
        .arg(&envoy_yaml)
        .args([
            "--disable-hot-restart",
            "--concurrency",
            "1",
            "-l",
            "warning",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn envoy");
    // Killed on drop, like tollgate.
    let mut envoy = TollgateProcess {
        child: envoy,
        base: String::new(),
    };
    let client = reqwest::Client::new();
    let mut ready = false;
    for _ in 0..300 {
        if let Some(status) = envoy.child.try_wait().expect("try_wait") {
            panic!("envoy exited early: {status}");
        }
        ready = client
            .get(format!("http://127.0.0.1:{admin_port}/ready"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200);
        if ready {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(ready, "envoy did not become ready");
    let get = |port: u16| {
        client
            .get(format!("http://127.0.0.1:{port}/orders"))
            .header("x-tenant", "acme")
            .send()
    };

    // The wrong token: tollgate answers UNAUTHENTICATED, Envoy fails closed.
    let r = get(wrong_port).await.expect("through envoy");
    assert_eq!(r.status(), 500);
    // The right token: five a year for acme, the refusal above spent none.
    for _ in 0..5 {
        let r = get(right_port).await.expect("through envoy");
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.expect("body"), "upstream says hi");
    }
    let r = get(right_port).await.expect("through envoy");
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["x-envoy-ratelimited"], "true");

    let (_, _, metrics) = answer(
        pki.client()
            .get(format!("{}/metrics", tollgate.base))
            .bearer_auth(METRICS_TOKEN),
    )
    .await;
    assert_eq!(
        metric(
            &metrics,
            "tollgate_unauthorized_requests_total{endpoint=\"rls\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(&metrics, "tollgate_rls_requests_total{code=\"ok\"}"),
        Some(5.0)
    );
    assert_eq!(
        metric(&metrics, "tollgate_rls_requests_total{code=\"over_limit\"}"),
        Some(1.0)
    );
    drop(envoy);
}
