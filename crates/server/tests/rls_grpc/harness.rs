//! tollgate with envoyproxy/ratelimit files, its gRPC service on loopback
//! and its clock manual, and the readers of its answers the tests share.

use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tollgate::{App, ServeConfig, serve_grpc};
use tollgate_core::ManualClock;
use tonic::transport::Channel;

use crate::support::T0;

pub const OK: i32 = Code::Ok as i32;
pub const OVER: i32 = Code::OverLimit as i32;
pub const SECOND: i32 = 1;
pub const MINUTE: i32 = 2;
pub const HOUR: i32 = 3;
pub const DAY: i32 = 4;

/// tollgate with envoyproxy/ratelimit files, its gRPC service on loopback.
pub struct Rls {
    pub client: RateLimitServiceClient<Channel>,
    pub addr: String,
    pub app: Arc<App>,
    pub clock: Arc<ManualClock>,
    pub dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
}

impl Rls {
    /// `tollgate_yaml` is the main config; `files` are written beside it.
    pub async fn start(tollgate_yaml: &str, files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
        let config_path = dir.path().join("tollgate.yaml");
        std::fs::write(&config_path, tollgate_yaml).expect("write config");
        let config = ServeConfig::load(&config_path).expect("config loads");
        let clock = Arc::new(ManualClock::new(T0));
        let app = Arc::new(
            App::open(config, config_path, clock.clone())
                .await
                .expect("store opens"),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = format!("http://{}", listener.local_addr().expect("addr"));
        let (tx, rx) = oneshot::channel();
        tokio::spawn(serve_grpc(Arc::clone(&app), listener, async {
            let _ = rx.await;
        }));
        let client = RateLimitServiceClient::connect(addr.clone())
            .await
            .expect("connect");
        Self {
            client,
            addr,
            app,
            clock,
            dir,
            stop: Some(tx),
        }
    }

    /// A config holding only envoyproxy/ratelimit files (one per domain).
    pub async fn envoy_only(files: &[&str]) -> Self {
        let named: Vec<(String, &str)> = files
            .iter()
            .enumerate()
            .map(|(i, f)| (format!("ratelimit/config{i}.yaml"), *f))
            .collect();
        let refs: Vec<(&str, &str)> = named.iter().map(|(n, f)| (n.as_str(), *f)).collect();
        Self::start(
            "server: {watch_interval_ms: 0}\nenvoy_ratelimit_configs: [ratelimit]\n",
            &refs,
        )
        .await
    }

    pub async fn call(
        &mut self,
        request: RateLimitRequest,
    ) -> Result<RateLimitResponse, tonic::Status> {
        self.client
            .should_rate_limit(request)
            .await
            .map(tonic::Response::into_inner)
    }

    pub async fn ask(
        &mut self,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
    ) -> RateLimitResponse {
        self.call(request(domain, descriptors, 0))
            .await
            .expect("answered")
    }

    pub async fn ask_hits(
        &mut self,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
        hits: u32,
    ) -> RateLimitResponse {
        self.call(request(domain, descriptors, hits))
            .await
            .expect("answered")
    }

    /// The first status of `n` identical one-descriptor requests' last answer.
    pub async fn spend(
        &mut self,
        domain: &str,
        entries: &[(&str, &str)],
        n: usize,
    ) -> RateLimitResponse {
        let mut last = None;
        for _ in 0..n {
            last = Some(self.ask(domain, vec![desc(entries)]).await);
        }
        last.expect("n > 0")
    }

    pub fn metrics(&self) -> String {
        self.app.metrics.encode()
    }
}

impl Drop for Rls {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: hits,
    }
}

/// (code, requests_per_unit, unit, remaining) of a status; a status
/// without a limit reads (code, 0, 0, remaining).
pub fn brief(s: &DescriptorStatus) -> (i32, u32, i32, u32) {
    let (rpu, unit) = s
        .current_limit
        .as_ref()
        .map_or((0, 0), |l| (l.requests_per_unit, l.unit));
    (s.code, rpu, unit, s.limit_remaining)
}

pub fn reset_ms(s: &DescriptorStatus) -> u64 {
    let d = s
        .duration_until_reset
        .as_ref()
        .expect("duration_until_reset");
    u64::try_from(d.seconds).expect("seconds") * 1000
        + u64::try_from(d.nanos).expect("nanos") / 1_000_000
}

pub fn metric(text: &str, line_start: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no metric {line_start} in:\n{text}"))
}
