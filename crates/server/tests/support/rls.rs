//! tollgate's RLS for the gRPC tests: a config and one envoyproxy/ratelimit
//! file in a temporary directory, the gRPC service and the HTTP API on
//! loopback, the clock manual (a Redis store keeps its own), and a tonic
//! client asking domain `api`.

use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tollgate::{App, ServeConfig, serve_app, serve_grpc};
use tollgate_core::ManualClock;
use tonic::transport::Channel;

use super::T0;

/// A running tollgate asked over RLS (and HTTP); stopped on drop.
pub struct Rls {
    pub client: RateLimitServiceClient<Channel>,
    pub app: Arc<App>,
    /// The HTTP listener's base URL (`/v1/check`, `/metrics`).
    pub http: String,
    /// Where `tollgate.yaml`, `rules.yaml` and whatever they write live.
    pub dir: tempfile::TempDir,
    stops: Vec<oneshot::Sender<()>>,
}

impl Rls {
    /// `config` (store, policies) with `rules` as its one
    /// envoyproxy/ratelimit file.
    pub async fn start(config: &str, rules: &str) -> Self {
        Self::start_with(config, rules, "", |_| None).await
    }

    /// [`Rls::start`] with more `server` settings (`, trace: {…}`) and
    /// `env` for its variables.
    pub async fn start_with(
        config: &str,
        rules: &str,
        server: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("rules.yaml"), rules).expect("write rules");
        let path = dir.path().join("tollgate.yaml");
        std::fs::write(
            &path,
            format!(
                "server: {{watch_interval_ms: 0{server}}}\n{config}envoy_ratelimit_configs: [rules.yaml]\n"
            ),
        )
        .expect("write config");
        let config = ServeConfig::load_with_env(&path, env).expect("config loads");
        let app = Arc::new(
            App::open(config, path, Arc::new(ManualClock::new(T0)))
                .await
                .expect("store opens"),
        );
        let (grpc_tx, grpc_rx) = oneshot::channel::<()>();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(serve_grpc(Arc::clone(&app), listener, async {
            let _ = grpc_rx.await;
        }));
        let client = RateLimitServiceClient::connect(addr)
            .await
            .expect("connect");
        let (http_tx, http_rx) = oneshot::channel::<()>();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let http = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(serve_app(Arc::clone(&app), listener, async {
            let _ = http_rx.await;
        }));
        Self {
            client,
            app,
            http,
            dir,
            stops: vec![grpc_tx, http_tx],
        }
    }

    /// One call of `descriptors` in domain `api`: the overall code and each
    /// (code, remaining), or the gRPC error's code.
    pub async fn call(
        &mut self,
        descriptors: Vec<RateLimitDescriptor>,
    ) -> Result<(i32, Vec<(i32, u32)>), tonic::Code> {
        let r = self
            .client
            .should_rate_limit(RateLimitRequest {
                domain: "api".to_owned(),
                descriptors,
                hits_addend: 0,
            })
            .await
            .map_err(|s| s.code())?
            .into_inner();
        let statuses = r
            .statuses
            .iter()
            .map(|s| (s.code, s.limit_remaining))
            .collect();
        Ok((r.overall_code, statuses))
    }

    /// `POST /v1/check` of `body`: the answer.
    pub async fn check(&self, body: &str) -> serde_json::Value {
        super::check_json(&reqwest::Client::new(), &self.http, body.to_owned()).await
    }
}

impl Drop for Rls {
    fn drop(&mut self) {
        for tx in self.stops.drain(..) {
            let _ = tx.send(());
        }
    }
}
