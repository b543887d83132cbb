//! tollgate's RLS for the gRPC tests, one harness for every test target: a
//! config and the files beside it in a temporary directory, the gRPC
//! service on loopback (and, for [`Rls::start`], the HTTP API), the clock
//! manual (a Redis store keeps its own), and a tonic client.
//!
//! A target adds the readers its tests share in an `impl Rls` of its own.

use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tollgate::{App, ServeConfig, serve_app, serve_grpc};
use tollgate_core::ManualClock;
use tonic::transport::Channel;

use super::T0;

pub const OK: i32 = Code::Ok as i32;
pub const OVER: i32 = Code::OverLimit as i32;

/// A running tollgate asked over RLS (and HTTP); stopped on drop.
pub struct Rls {
    pub client: RateLimitServiceClient<Channel>,
    pub app: Arc<App>,
    /// The manual clock tollgate was opened with, for tests to advance.
    pub clock: Arc<ManualClock>,
    /// The gRPC listener's base URL, for clients of its own.
    pub grpc: String,
    /// The HTTP listener's base URL (`/v1/check`, `/metrics`), when served.
    pub http: Option<String>,
    /// Where `tollgate.yaml`, the files beside it and whatever they write live.
    pub dir: tempfile::TempDir,
    stops: Vec<oneshot::Sender<()>>,
}

impl Rls {
    /// `config` (store, policies) with `rules` as its one
    /// envoyproxy/ratelimit file, `rules.yaml`.
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
        let main = format!(
            "server: {{watch_interval_ms: 0{server}}}\n{config}envoy_ratelimit_configs: [rules.yaml]\n"
        );
        Self::launch(&main, &[("rules.yaml", rules)], env, true).await
    }

    /// `tollgate_yaml` as the main config, as written, and `files` written
    /// beside it (their directories made); the gRPC service alone, the
    /// config reading the process's environment as `tollgate serve` does.
    pub async fn start_files(tollgate_yaml: &str, files: &[(&str, &str)]) -> Self {
        Self::launch(tollgate_yaml, files, process_env, false).await
    }

    /// Writes the files, loads the config and serves gRPC, and HTTP when
    /// `http`: HTTP's upkeep (sweeps, leases, the watcher) runs only then.
    async fn launch(
        tollgate_yaml: &str,
        files: &[(&str, &str)],
        env: impl Fn(&str) -> Option<String>,
        http: bool,
    ) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
        let path = dir.path().join("tollgate.yaml");
        std::fs::write(&path, tollgate_yaml).expect("write config");
        let config = ServeConfig::load_with_env(&path, env).expect("config loads");
        let clock = Arc::new(ManualClock::new(T0));
        let app = Arc::new(
            App::open(config, path, clock.clone())
                .await
                .expect("store opens"),
        );
        let (grpc_tx, grpc_rx) = oneshot::channel::<()>();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let grpc = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(serve_grpc(Arc::clone(&app), listener, async {
            let _ = grpc_rx.await;
        }));
        let client = RateLimitServiceClient::connect(grpc.clone())
            .await
            .expect("connect");
        let mut stops = vec![grpc_tx];
        let http = if http {
            let (http_tx, http_rx) = oneshot::channel::<()>();
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let base = format!("http://{}", listener.local_addr().expect("addr"));
            tokio::spawn(serve_app(Arc::clone(&app), listener, async {
                let _ = http_rx.await;
            }));
            stops.push(http_tx);
            Some(base)
        } else {
            None
        };
        Self {
            client,
            app,
            clock,
            grpc,
            http,
            dir,
            stops,
        }
    }

    /// One `ShouldRateLimit` of `request`, as sent: the answer or its status.
    pub async fn send(
        &mut self,
        request: RateLimitRequest,
    ) -> Result<RateLimitResponse, tonic::Status> {
        self.client
            .should_rate_limit(request)
            .await
            .map(tonic::Response::into_inner)
    }

    /// One call of `descriptors` in domain `api`: the overall code and each
    /// (code, remaining), or the gRPC error's code.
    pub async fn call(
        &mut self,
        descriptors: Vec<RateLimitDescriptor>,
    ) -> Result<(i32, Vec<(i32, u32)>), tonic::Code> {
        let r = self
            .send(RateLimitRequest {
                domain: "api".to_owned(),
                descriptors,
                hits_addend: 0,
            })
            .await
            .map_err(|s| s.code())?;
        let statuses = r
            .statuses
            .iter()
            .map(|s| (s.code, s.limit_remaining))
            .collect();
        Ok((r.overall_code, statuses))
    }

    /// `POST /v1/check` of `body`: the answer.
    pub async fn check(&self, body: &str) -> serde_json::Value {
        let http = self.http.as_deref().expect("HTTP is served (Rls::start)");
        super::check_json(&reqwest::Client::new(), http, body.to_owned()).await
    }
}

impl Drop for Rls {
    fn drop(&mut self) {
        for tx in self.stops.drain(..) {
            let _ = tx.send(());
        }
    }
}

/// What `ServeConfig::load` reads: a variable that is not UTF-8, lossily.
fn process_env(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}
