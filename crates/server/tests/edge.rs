//! The edge is authenticated when asked: bearer tokens on the decision API,
//! the admin endpoints and `/metrics` (each from its own environment
//! variable), and TLS on the HTTP and gRPC listeners — all driven by real
//! clients (reqwest, tonic) over real loopback connections. Without tokens
//! or TLS, nothing changes.

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use serde_json::{Value, json};
use support::{T0, TestServer, TollgateProcess, envoy_binary, free_port, tollgate_bin};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tollgate::{App, ServeConfig, serve_app, serve_grpc};
use tollgate_core::ManualClock;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

const CHECK_TOKEN: &str = "check-token-0123456789abcdef";
const ADMIN_TOKEN: &str = "admin-token-0123456789abcdef";
const METRICS_TOKEN: &str = "metrics-token-0123456789abcdef";
const WRONG_TOKEN: &str = "wrong-token-fedcba9876543210";

const POLICIES: &str = "policies:
  - name: api
    algorithm: token_bucket
    capacity: 10
    refill: { tokens: 10, per: 1s }
  - name: per-client
    algorithm: token_bucket
    capacity: 10
    refill: { tokens: 10, per: 1s }
    identity: [bearer]
";

/// The envoyproxy/ratelimit rules the gRPC tests ask about (a year-long
/// window: the real-process tests never straddle a boundary).
const RATELIMIT_YAML: &str = "domain: edge
descriptors:
  - key: tenant
    rate_limit:
      unit: year
      requests_per_unit: 5
";

/// The decision for the first unit taken from a fresh `api` bucket.
fn first_decision() -> Value {
    json!({"allowed": true, "policy": "api", "limit": 10, "remaining": 9, "retry_after_ms": 0, "reset_after_ms": 100})
}

fn all_tokens(name: &str) -> Option<String> {
    match name {
        "TOLLGATE_CHECK_TOKEN" => Some(CHECK_TOKEN.to_owned()),
        "TOLLGATE_ADMIN_TOKEN" => Some(ADMIN_TOKEN.to_owned()),
        "TOLLGATE_METRICS_TOKEN" => Some(METRICS_TOKEN.to_owned()),
        "TOLLGATE_IDENTITY_KEY" => Some("k".repeat(32)),
        _ => None,
    }
}

fn only_identity_key(name: &str) -> Option<String> {
    (name == "TOLLGATE_IDENTITY_KEY").then(|| "k".repeat(32))
}

/// The 401 body for an endpoint guarded by `var`.
fn unauthorized_body(var: &str) -> Value {
    json!({
        "type": "about:blank",
        "title": "Unauthorized",
        "status": 401,
        "detail": format!("this endpoint needs `Authorization: Bearer <token>` ({var})"),
    })
}

/// An answer as (status, `WWW-Authenticate`, body text).
async fn answer(request: reqwest::RequestBuilder) -> (u16, Option<String>, String) {
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().expect("ascii").to_owned());
    (status, challenge, response.text().await.expect("body"))
}

fn with_token(request: reqwest::RequestBuilder, token: Option<&str>) -> reqwest::RequestBuilder {
    match token {
        Some(t) => request.bearer_auth(t),
        None => request,
    }
}

fn check_call(
    client: &reqwest::Client,
    base: &str,
    token: Option<&str>,
) -> reqwest::RequestBuilder {
    with_token(
        client
            .post(format!("{base}/v1/check"))
            .header("content-type", "application/json")
            .body(r#"{"policy":"api","key":"acme"}"#),
        token,
    )
}

/// Asserts that `request` is refused with the 401 of `var`.
async fn assert_unauthorized(request: reqwest::RequestBuilder, var: &str) {
    let (status, challenge, body) = answer(request).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(challenge.as_deref(), Some("Bearer realm=\"tollgate\""));
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("json"),
        unauthorized_body(var)
    );
}

fn metric(text: &str, line_start: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no metric {line_start} in:\n{text}"))
}

// ---------- bearer tokens over HTTP ----------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tokens_every_endpoint_stays_open() {
    let server = TestServer::start_with_env(POLICIES, only_identity_key).await;
    let client = &server.client;
    for token in [None, Some(WRONG_TOKEN)] {
        let (status, challenge, body) = answer(check_call(client, &server.base, token)).await;
        assert_eq!((status, challenge), (200, None));
        assert_eq!(body_json(&body)["allowed"], true);
        for path in ["/v1/policies", "/metrics", "/healthz", "/readyz"] {
            let (status, _, _) = answer(with_token(client.get(server.url(path)), token)).await;
            assert_eq!(status, 200, "{path} with {token:?}");
        }
    }
    let metrics = server.text("/metrics").await;
    assert!(
        !metrics.contains("tollgate_unauthorized_requests_total{"),
        "{metrics}"
    );
    server.stop().await;
}

fn body_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| panic!("not JSON: {text:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_token_guards_the_decision_api_and_a_refusal_spends_nothing() {
    let server = TestServer::start_with_env(POLICIES, |name| {
        (name == "TOLLGATE_CHECK_TOKEN")
            .then(|| CHECK_TOKEN.to_owned())
            .or_else(|| only_identity_key(name))
    })
    .await;
    let client = &server.client;
    let var = "TOLLGATE_CHECK_TOKEN";
    assert_unauthorized(check_call(client, &server.base, None), var).await;
    assert_unauthorized(check_call(client, &server.base, Some(WRONG_TOKEN)), var).await;
    // The token, but not as a bearer token.
    assert_unauthorized(
        check_call(client, &server.base, None).header("authorization", CHECK_TOKEN),
        var,
    )
    .await;
    assert_unauthorized(
        check_call(client, &server.base, None).basic_auth("user", Some(CHECK_TOKEN)),
        var,
    )
    .await;
    // Another endpoint's token does not open this one.
    assert_unauthorized(check_call(client, &server.base, Some(ADMIN_TOKEN)), var).await;
    let (status, challenge, body) =
        answer(check_call(client, &server.base, Some(CHECK_TOKEN))).await;
    assert_eq!((status, challenge), (200, None));
    assert_eq!(
        body_json(&body),
        first_decision(),
        "the five refusals took nothing from the bucket"
    );
    // The other endpoints stay open.
    for path in ["/v1/policies", "/metrics", "/healthz", "/readyz"] {
        let (status, _, _) = answer(client.get(server.url(path))).await;
        assert_eq!(status, 200, "{path}");
    }
    let metrics = server.text("/metrics").await;
    assert_eq!(
        metric(
            &metrics,
            "tollgate_unauthorized_requests_total{endpoint=\"check\"}"
        ),
        5
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_and_metrics_tokens_guard_their_own_endpoints_only() {
    let server = TestServer::start_with_env(POLICIES, |name| {
        matches!(name, "TOLLGATE_ADMIN_TOKEN" | "TOLLGATE_METRICS_TOKEN")
            .then(|| all_tokens(name))
            .flatten()
            .or_else(|| only_identity_key(name))
    })
    .await;
    let client = &server.client;
    let get = |path: &str, token: Option<&str>| with_token(client.get(server.url(path)), token);
    for (path, var, right, other) in [
        (
            "/v1/policies",
            "TOLLGATE_ADMIN_TOKEN",
            ADMIN_TOKEN,
            METRICS_TOKEN,
        ),
        (
            "/metrics",
            "TOLLGATE_METRICS_TOKEN",
            METRICS_TOKEN,
            ADMIN_TOKEN,
        ),
    ] {
        assert_unauthorized(get(path, None), var).await;
        assert_unauthorized(get(path, Some(WRONG_TOKEN)), var).await;
        assert_unauthorized(get(path, Some(other)), var).await;
        let (status, challenge, _) = answer(get(path, Some(right))).await;
        assert_eq!((status, challenge), (200, None), "{path}");
    }
    let (_, _, policies) = answer(get("/v1/policies", Some(ADMIN_TOKEN))).await;
    assert_eq!(body_json(&policies)["policies"][0]["name"], "api");
    // No check token: the decision API is open, the probes always are.
    let (status, _, body) = answer(check_call(client, &server.base, None)).await;
    assert_eq!((status, body_json(&body)), (200, first_decision()));
    assert_eq!(server.text("/healthz").await, "ok\n");
    let (status, _, _) = answer(get("/readyz", None)).await;
    assert_eq!(status, 200);
    let (_, _, metrics) = answer(get("/metrics", Some(METRICS_TOKEN))).await;
    for (endpoint, count) in [("policies", 3), ("metrics", 3)] {
        assert_eq!(
            metric(
                &metrics,
                &format!("tollgate_unauthorized_requests_total{{endpoint=\"{endpoint}\"}}")
            ),
            count,
            "{endpoint}"
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_auth_is_not_token_guarded_its_authorization_is_the_clients() {
    let server = TestServer::start_with_env(POLICIES, all_tokens).await;
    // The bearer token of the client being limited is its identity, not a
    // credential for tollgate: /v1/authorize answers with or without one.
    let (status, challenge, _) = answer(
        server
            .client
            .get(server.url("/v1/authorize"))
            .bearer_auth("a-client-of-the-proxied-api"),
    )
    .await;
    assert_eq!((status, challenge), (200, None));
    let (status, _, body) = answer(server.client.get(server.url("/v1/authorize"))).await;
    assert_eq!(status, 400, "the bearer identity part is missing: {body}");
    server.stop().await;
}

#[test]
fn empty_or_short_tokens_are_refused_at_load_without_being_echoed() {
    let parse = |var: &'static str, value: &'static str| {
        ServeConfig::parse(POLICIES, move |name| {
            (name == var)
                .then(|| value.to_owned())
                .or_else(|| only_identity_key(name))
        })
        .expect_err("refused")
        .to_string()
    };
    assert_eq!(
        parse("TOLLGATE_CHECK_TOKEN", ""),
        "config: TOLLGATE_CHECK_TOKEN is set but empty (unset it to leave the endpoint open)"
    );
    assert_eq!(
        parse("TOLLGATE_ADMIN_TOKEN", "short-secret"),
        "config: TOLLGATE_ADMIN_TOKEN is shorter than 16 bytes; use a longer, random token"
    );
    assert_eq!(
        parse("TOLLGATE_METRICS_TOKEN", "a token with spaces in it"),
        "config: TOLLGATE_METRICS_TOKEN must be printable ASCII without spaces (it is sent in an `Authorization: Bearer` header)"
    );
    // `tollgate validate` refuses the same, through the same load.
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, POLICIES).expect("write");
    let (code, stdout, stderr) = validate(&config, &[("TOLLGATE_ADMIN_TOKEN", "short-secret")]);
    assert_eq!((code, stdout.as_str()), (1, ""));
    assert_eq!(
        stderr,
        format!(
            "tollgate: {}: config: TOLLGATE_ADMIN_TOKEN is shorter than 16 bytes; use a longer, random token\n",
            config.display()
        )
    );
    assert!(!stderr.contains("short-secret"));
}

// ---------- TLS ----------

/// A test CA and a certificate it signed for 127.0.0.1 and localhost, as
/// PEM files in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
    ca_pem: String,
}

impl Pki {
    fn new() -> Self {
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "tollgate test CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().expect("ca key");
        let ca_cert = ca.self_signed(&ca_key).expect("ca cert");
        let issuer = Issuer::new(ca, ca_key);
        let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("leaf params");
        let leaf_key = KeyPair::generate().expect("leaf key");
        let leaf_cert = leaf.signed_by(&leaf_key, &issuer).expect("leaf cert");
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("cert.pem"), leaf_cert.pem()).expect("write cert");
        std::fs::write(dir.path().join("key.pem"), leaf_key.serialize_pem()).expect("write key");
        Self {
            dir,
            ca_pem: ca_cert.pem(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A reqwest client that trusts only the test CA.
    fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(
                reqwest::Certificate::from_pem(self.ca_pem.as_bytes()).expect("ca pem"),
            )
            .build()
            .expect("client")
    }

    /// A gRPC client over TLS that trusts only the test CA.
    async fn grpc(&self, addr: &str) -> RateLimitServiceClient<Channel> {
        let tls = ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&self.ca_pem));
        let channel = Endpoint::from_shared(format!("https://{addr}"))
            .expect("endpoint")
            .tls_config(tls)
            .expect("tls config")
            .connect()
            .await
            .expect("connect over TLS");
        RateLimitServiceClient::new(channel)
    }

    /// Writes `tollgate.yaml` (TLS on, the gRPC rules beside it).
    fn config(&self, extra_server: &str) -> PathBuf {
        std::fs::write(self.path("ratelimit.yaml"), RATELIMIT_YAML).expect("write rules");
        let path = self.path("tollgate.yaml");
        std::fs::write(
            &path,
            format!(
                "server:\n  watch_interval_ms: 0\n  tls: {{cert: cert.pem, key: key.pem}}\n{extra_server}envoy_ratelimit_configs: [ratelimit.yaml]\n{POLICIES}"
            ),
        )
        .expect("write config");
        path
    }
}

/// tollgate in-process with TLS on both listeners, on a manual clock.
struct TlsServer {
    http: String,
    grpc: String,
    _stop: watch::Sender<()>,
}

impl TlsServer {
    async fn start(pki: &Pki, env: fn(&str) -> Option<String>) -> Self {
        let path = pki.config("");
        let config = ServeConfig::load_with_env(&path, env).expect("config loads");
        let clock = Arc::new(ManualClock::new(T0));
        let app = Arc::new(
            App::open(config, path, clock.clone())
                .await
                .expect("store opens"),
        );
        let http = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let grpc = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let (http_addr, grpc_addr) = (
            http.local_addr().expect("addr").to_string(),
            grpc.local_addr().expect("addr").to_string(),
        );
        let (stop, rx) = watch::channel(());
        let stopped = |mut rx: watch::Receiver<()>| async move {
            let _ = rx.changed().await;
        };
        tokio::spawn(serve_app(Arc::clone(&app), http, stopped(rx.clone())));
        tokio::spawn(serve_grpc(app, grpc, stopped(rx)));
        Self {
            http: format!("https://{http_addr}"),
            grpc: grpc_addr,
            _stop: stop,
        }
    }
}

fn rls_request(token: Option<&str>) -> tonic::Request<RateLimitRequest> {
    let mut request = tonic::Request::new(RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "tenant".to_owned(),
                value: "acme".to_owned(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    });
    if let Some(token) = token {
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("ascii metadata"),
        );
    }
    request
}

/// (overall code, requests_per_unit, remaining) of a one-descriptor answer.
fn rls_brief(r: &RateLimitResponse) -> (i32, u32, u32) {
    let status = &r.statuses[0];
    let limit = status
        .current_limit
        .as_ref()
        .map_or(0, |l| l.requests_per_unit);
    (r.overall_code, limit, status.limit_remaining)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_over_https_gives_the_exact_decision_and_plain_http_is_refused() {
    let pki = Pki::new();
    let server = TlsServer::start(&pki, only_identity_key).await;
    let client = pki.client();
    let (status, _, body) = answer(check_call(&client, &server.http, None)).await;
    assert_eq!((status, body_json(&body)), (200, first_decision()));
    let (status, _, body) = answer(client.get(format!("{}/healthz", server.http))).await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    // Plain HTTP to the TLS port gets no answer.
    let plain = format!("http://{}", server.http.trim_start_matches("https://"));
    let refused = reqwest::Client::new()
        .get(format!("{plain}/healthz"))
        .send()
        .await;
    assert!(refused.is_err(), "plain HTTP was answered: {refused:?}");
    // A client that does not trust the CA does not get through either.
    let untrusting = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .build()
        .expect("client");
    let refused = untrusting
        .get(format!("{}/healthz", server.http))
        .send()
        .await;
    assert!(refused.is_err(), "an untrusted certificate was accepted");
    // The listener still serves after the failed handshakes.
    let (status, _, body) = answer(check_call(&client, &server.http, None)).await;
    assert_eq!(status, 200);
    assert_eq!(body_json(&body)["remaining"], 8);
    // Both failed handshakes are counted (by the worker, maybe just after
    // the client saw its connection close: polled, bounded).
    let mut failures = 0;
    for _ in 0..200 {
        let (_, _, metrics) = answer(client.get(format!("{}/metrics", server.http))).await;
        failures = metric(&metrics, "tollgate_tls_handshake_failures_total");
        if failures == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(failures, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_tls_together_over_https() {
    let pki = Pki::new();
    let server = TlsServer::start(&pki, all_tokens).await;
    let client = pki.client();
    assert_unauthorized(
        check_call(&client, &server.http, Some(WRONG_TOKEN)),
        "TOLLGATE_CHECK_TOKEN",
    )
    .await;
    let (status, _, body) = answer(check_call(&client, &server.http, Some(CHECK_TOKEN))).await;
    assert_eq!((status, body_json(&body)), (200, first_decision()));
    assert_unauthorized(
        client.get(format!("{}/metrics", server.http)),
        "TOLLGATE_METRICS_TOKEN",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_over_tls_answers_and_the_check_token_guards_should_rate_limit() {
    let pki = Pki::new();
    // Without a check token: answered over TLS.
    let open = TlsServer::start(&pki, only_identity_key).await;
    let mut client = pki.grpc(&open.grpc).await;
    let r = client
        .should_rate_limit(rls_request(None))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(rls_brief(&r), (Code::Ok as i32, 5, 4));
    // A plain-text gRPC client cannot talk to the TLS port.
    let plain = Endpoint::from_shared(format!("http://{}", open.grpc))
        .expect("endpoint")
        .connect()
        .await;
    match plain {
        Err(_) => {}
        Ok(channel) => {
            let refused = RateLimitServiceClient::new(channel)
                .should_rate_limit(rls_request(None))
                .await;
            assert!(refused.is_err(), "plain gRPC was answered: {refused:?}");
        }
    }

    // With the check token: refused without it or with a wrong one.
    let guarded = TlsServer::start(&pki, all_tokens).await;
    let mut client = pki.grpc(&guarded.grpc).await;
    for token in [None, Some(WRONG_TOKEN), Some(ADMIN_TOKEN)] {
        let status = client
            .should_rate_limit(rls_request(token))
            .await
            .expect_err("refused");
        assert_eq!(status.code(), tonic::Code::Unauthenticated, "{token:?}");
        assert_eq!(
            status.message(),
            "ShouldRateLimit needs the metadata `authorization: Bearer <token>` (TOLLGATE_CHECK_TOKEN)"
        );
    }
    let r = client
        .should_rate_limit(rls_request(Some(CHECK_TOKEN)))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(
        rls_brief(&r),
        (Code::Ok as i32, 5, 4),
        "the refusals spent nothing"
    );
    let (_, _, metrics) = answer(
        pki.client()
            .get(format!("{}/metrics", guarded.http))
            .bearer_auth(METRICS_TOKEN),
    )
    .await;
    assert_eq!(
        metric(
            &metrics,
            "tollgate_unauthorized_requests_total{endpoint=\"rls\"}"
        ),
        3
    );
}

// ---------- the real binary ----------

/// Runs `tollgate validate --config` with only `env` among tollgate's
/// variables; returns (exit code, stdout, stderr).
fn validate(config: &Path, env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(tollgate_bin());
    cmd.args(["validate", "--config"]).arg(config);
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
    let out = cmd.output().expect("run tollgate validate");
    (
        out.status.code().expect("exit code"),
        String::from_utf8(out.stdout).expect("utf-8"),
        String::from_utf8(out.stderr).expect("utf-8"),
    )
}

#[test]
fn validate_refuses_bad_tls_files_naming_the_file() {
    let pki = Pki::new();
    let config = pki.config("");
    let (code, stdout, _) = validate(&config, &[]);
    assert_eq!(code, 0, "a good certificate and key validate: {stdout}");

    let refused = |cert: &str, key: &str| {
        let path = pki.path("bad.yaml");
        std::fs::write(
            &path,
            format!("server:\n  tls: {{cert: {cert}, key: {key}}}\n{POLICIES}"),
        )
        .expect("write");
        let (code, stdout, stderr) = validate(&path, &[]);
        assert_eq!((code, stdout.as_str()), (1, ""));
        let prefix = format!("tollgate: {}: ", path.display());
        stderr
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("{stderr:?} does not start with {prefix:?}"))
            .to_owned()
    };
    let dir = pki.dir.path().display().to_string();
    assert_eq!(
        refused("missing.pem", "key.pem"),
        format!(
            "server.tls.cert: cannot read {dir}/missing.pem: No such file or directory (os error 2)\n"
        )
    );
    assert_eq!(
        refused("cert.pem", "missing-key.pem"),
        format!(
            "server.tls.key: cannot read {dir}/missing-key.pem: No such file or directory (os error 2)\n"
        )
    );
    std::fs::write(pki.path("garbage.pem"), "this is not PEM\n").expect("write");
    assert_eq!(
        refused("garbage.pem", "key.pem"),
        format!("server.tls.cert: {dir}/garbage.pem holds no PEM certificate\n")
    );
    assert_eq!(
        refused("cert.pem", "garbage.pem"),
        format!(
            "server.tls.key: {dir}/garbage.pem holds no PEM private key (PKCS#8, PKCS#1 or SEC1)\n"
        )
    );
    // A key, but not the certificate's.
    std::fs::write(
        pki.path("other-key.pem"),
        KeyPair::generate().expect("key").serialize_pem(),
    )
    .expect("write");
    let mismatch = refused("cert.pem", "other-key.pem");
    assert_eq!(
        mismatch,
        format!(
            "server.tls: the key {dir}/other-key.pem does not serve the certificate {dir}/cert.pem: keys may not be consistent: KeyMismatch\n"
        )
    );
    // The key's content is never quoted.
    let key = std::fs::read_to_string(pki.path("other-key.pem")).expect("read");
    let body = key.lines().nth(1).expect("a base64 line");
    assert!(!mismatch.contains(body));
}

#[test]
fn tokens_never_appear_in_debug_logs_or_metrics() {
    let pki = Pki::new();
    let config = pki.config("  grpc_listen: 127.0.0.1:0\n");
    let log_path = pki.path("stderr.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut cmd = Command::new(tollgate_bin());
    cmd.args(["serve", "--config"])
        .arg(&config)
        .args(["--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "debug")
        .env("TOLLGATE_CHECK_TOKEN", CHECK_TOKEN)
        .env("TOLLGATE_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("TOLLGATE_METRICS_TOKEN", METRICS_TOKEN)
        .env("TOLLGATE_IDENTITY_KEY", "k".repeat(32))
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log));
    let mut child = cmd.spawn().expect("spawn tollgate serve");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    let mut second = String::new();
    stdout.read_line(&mut first).expect("listen line");
    stdout.read_line(&mut second).expect("grpc line");
    let base = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {first:?}"))
        .to_owned();
    assert!(base.starts_with("https://127.0.0.1:"), "{base}");
    let grpc = second
        .trim()
        .strip_prefix("grpc listening on ")
        .unwrap_or_else(|| panic!("unexpected second line: {second:?}"))
        .to_owned();
    let process = TollgateProcess { child, base };

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let metrics = runtime.block_on(async {
        let client = pki.client();
        let base = &process.base;
        for token in [WRONG_TOKEN, CHECK_TOKEN] {
            let _ = answer(check_call(&client, base, Some(token))).await;
        }
        for (path, right) in [("/v1/policies", ADMIN_TOKEN), ("/metrics", METRICS_TOKEN)] {
            for token in [WRONG_TOKEN, right] {
                let _ = answer(client.get(format!("{base}{path}")).bearer_auth(token)).await;
            }
        }
        // The client being limited sends its own bearer token to forward auth.
        let _ = answer(
            client
                .get(format!("{base}/v1/authorize"))
                .bearer_auth("client-token-of-the-proxied-api"),
        )
        .await;
        let mut rls = pki.grpc(&grpc).await;
        for token in [WRONG_TOKEN, CHECK_TOKEN] {
            let _ = rls.should_rate_limit(rls_request(Some(token))).await;
        }
        let (status, _, metrics) = answer(
            client
                .get(format!("{base}/metrics"))
                .bearer_auth(METRICS_TOKEN),
        )
        .await;
        assert_eq!(status, 200);
        metrics
    });
    process.signal("TERM");
    drop(process);
    let logs = std::fs::read_to_string(&log_path).expect("read logs");
    assert!(
        logs.contains("tollgate serving"),
        "stderr was not captured: {logs}"
    );
    assert!(logs.contains("DEBUG"), "debug logging was not on: {logs}");
    for endpoint in ["check", "rls", "policies", "metrics"] {
        assert_eq!(
            metric(
                &metrics,
                &format!("tollgate_unauthorized_requests_total{{endpoint=\"{endpoint}\"}}")
            ),
            1,
            "{endpoint}"
        );
    }
    for secret in [
        CHECK_TOKEN,
        ADMIN_TOKEN,
        METRICS_TOKEN,
        WRONG_TOKEN,
        "client-token-of-the-proxied-api",
    ] {
        assert!(!logs.contains(secret), "{secret} is in the logs");
        assert!(!metrics.contains(secret), "{secret} is in the metrics");
    }
}

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
        1
    );
    assert_eq!(
        metric(&metrics, "tollgate_rls_requests_total{code=\"ok\"}"),
        5
    );
    assert_eq!(
        metric(&metrics, "tollgate_rls_requests_total{code=\"over_limit\"}"),
        1
    );
    drop(envoy);
}
