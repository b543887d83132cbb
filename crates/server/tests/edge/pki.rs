//! A test CA and its certificate for loopback, tollgate in-process with TLS
//! on both listeners, and the gRPC request the TLS tests send.

use std::path::PathBuf;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tollgate::{App, ServeConfig, serve_app, serve_grpc};
use tollgate_core::ManualClock;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use crate::harness::POLICIES;
use crate::support::T0;

/// The envoyproxy/ratelimit rules the gRPC tests ask about (a year-long
/// window: the real-process tests never straddle a boundary).
const RATELIMIT_YAML: &str = "domain: edge
descriptors:
  - key: tenant
    rate_limit:
      unit: year
      requests_per_unit: 5
";

/// A test CA and a certificate it signed for 127.0.0.1 and localhost, as
/// PEM files in a temporary directory.
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca_pem: String,
}

impl Pki {
    pub fn new() -> Self {
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

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A reqwest client that trusts only the test CA.
    pub fn client(&self) -> reqwest::Client {
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
    pub async fn grpc(&self, addr: &str) -> RateLimitServiceClient<Channel> {
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
    pub fn config(&self, extra_server: &str) -> PathBuf {
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
pub struct TlsServer {
    pub http: String,
    pub grpc: String,
    _stop: watch::Sender<()>,
}

impl TlsServer {
    pub async fn start(pki: &Pki, env: fn(&str) -> Option<String>) -> Self {
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

pub fn rls_request(token: Option<&str>) -> tonic::Request<RateLimitRequest> {
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
pub fn rls_brief(r: &RateLimitResponse) -> (i32, u32, u32) {
    let status = &r.statuses[0];
    let limit = status
        .current_limit
        .as_ref()
        .map_or(0, |l| l.requests_per_unit);
    (r.overall_code, limit, status.limit_remaining)
}
