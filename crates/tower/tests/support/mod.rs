//! The tower tests' harness: an axum app behind the layer, served over
//! real loopback HTTP; tollgate itself in-process on a manual clock.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tollgate::{App, ServeConfig, serve_app};
use tollgate_core::{Clock, Identity, Limits, Policy, Rate};
use tollgate_limiter::{Backend, Decider, Limiter, LimiterMetrics, Plan};
use tollgate_store::OnStoreFailure;
use tollgate_tower::{RateLimitLayer, RemoteConfig, RemoteTollgate, Rule};

/// The Unix time tests start at.
pub const T0: u64 = 1_700_000_000_000;

/// An app served on loopback, and how often its handlers ran.
pub struct Served {
    pub base: String,
    pub handled: Arc<AtomicUsize>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl Served {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
    /// `POST /orders` as `tenant` (`X-Tenant`).
    pub async fn order(&self, tenant: &str) -> reqwest::Response {
        reqwest::Client::new()
            .post(self.url("/orders"))
            .header("X-Tenant", tenant)
            .send()
            .await
            .expect("request")
    }
    /// `GET /items` as `tenant` (`X-Tenant`).
    pub async fn read(&self, tenant: &str) -> reqwest::Response {
        reqwest::Client::new()
            .get(self.url("/items"))
            .header("X-Tenant", tenant)
            .send()
            .await
            .expect("request")
    }
    pub fn handled(&self) -> usize {
        self.handled.load(Ordering::SeqCst)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// `POST /orders` and `GET /items` behind the layer.
pub async fn serve_layered<D: Decider>(layer: RateLimitLayer<D>) -> Served {
    let handled = Arc::new(AtomicUsize::new(0));
    let (orders, items) = (Arc::clone(&handled), Arc::clone(&handled));
    let app = Router::new()
        .route(
            "/orders",
            post(move || async move {
                orders.fetch_add(1, Ordering::SeqCst);
                "{\"order\":\"placed\"}"
            }),
        )
        .route(
            "/items",
            get(move || async move {
                items.fetch_add(1, Ordering::SeqCst);
                "{\"items\":[]}"
            }),
        )
        .layer(layer);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let service = app.into_make_service_with_connect_info::<SocketAddr>();
        let _ = axum::serve(listener, service)
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await;
    });
    Served {
        base,
        handled,
        shutdown: Some(tx),
    }
}

/// The in-process limiter on the embedded store, on `clock`.
pub fn memory_limiter(clock: Arc<dyn Clock>) -> Limiter {
    let mut registry = Registry::default();
    let metrics = Arc::new(LimiterMetrics::register(&mut registry, Arc::clone(&clock)));
    Limiter::new(
        vec![Backend::memory(10_000, Arc::clone(&clock))],
        metrics,
        clock,
    )
}

/// Policy `name` as a token bucket of 2, refilled 1 each 10 s, failing as
/// `on_failure` says.
pub fn two_per_ten_seconds(name: &str, on_failure: OnStoreFailure) -> Plan {
    let rate = Rate::new(2, 1, 10_000).expect("valid rate");
    Plan::new(Policy::new(name, Limits::TokenBucket(rate)), 0).with_failure_mode(on_failure)
}

/// A client of the tollgate at `base`, with time to spare on a loaded test
/// machine: a first call that times out would be decided by the failure
/// mode.
pub fn remote(base: &str, clock: Arc<dyn Clock>) -> RemoteTollgate {
    let config = RemoteConfig {
        timeout: Duration::from_secs(5),
        ..RemoteConfig::new(base)
    };
    RemoteTollgate::new(&config, clock).expect("valid url")
}

/// A fresh directory, removed when dropped.
pub fn temp_dir() -> tempdir::Dir {
    let dir = std::env::temp_dir().join(format!(
        "tollgate-tower-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    tempdir::Dir(dir)
}

/// Writes `yaml` as `dir`'s `tollgate.yaml`, and says where.
pub fn write_config(dir: &Path, yaml: &str) -> PathBuf {
    let path = dir.join("tollgate.yaml");
    std::fs::write(&path, yaml).expect("write config");
    path
}

/// The limiter's `tollgate_store_keys` series as `registry` reads now:
/// keys held by each store, in the config's order.
pub fn store_keys(limiter: &Limiter, registry: &Registry) -> Vec<u64> {
    limiter.maintain_gauges();
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).expect("encodes");
    text.lines()
        .filter(|line| line.starts_with("tollgate_store_keys{"))
        .map(|line| {
            let value = line.rsplit(' ').next().expect("a value");
            value.parse().expect("a count")
        })
        .collect()
}

/// Writes keyed as `tollgate serve` keys `identity: [{header: X-Tenant}]`.
pub fn by_tenant(parts: &http::request::Parts) -> Option<Identity> {
    let tenant = parts.headers.get("x-tenant")?.to_str().ok()?;
    Identity::composite([("x-tenant", tenant)]).ok()
}

/// A rule for POSTs only, keyed by tenant.
pub fn writes_by_tenant(plan: tollgate_limiter::Plan) -> Rule {
    Rule::new(plan, |parts| {
        (parts.method == http::Method::POST)
            .then(|| by_tenant(parts))
            .flatten()
    })
}

/// tollgate served in-process on a manual clock, on `listener`.
pub struct Tollgate {
    pub base: String,
    pub app: Arc<App>,
    pub addr: SocketAddr,
    _dir: Option<tempdir::Dir>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), tollgate::ServeError>>>,
}

pub mod tempdir {
    /// A directory removed when dropped.
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Tollgate {
    /// `yaml` served on `addr` (port 0: any), its stores on `clock`.
    pub async fn start(yaml: &str, clock: Arc<dyn Clock>, addr: &str) -> Self {
        let dir = temp_dir();
        let path = write_config(&dir.0, yaml);
        let mut served = Self::start_file(&path, clock, addr).await;
        served._dir = Some(dir);
        served
    }

    /// The config file at `path` served as `tollgate serve --config` serves
    /// it (loaded, and reloaded, from that file) on `addr`.
    pub async fn start_file(path: &Path, clock: Arc<dyn Clock>, addr: &str) -> Self {
        let config = ServeConfig::load_with_env(path, |_| None).expect("test config is valid");
        let app = Arc::new(
            App::open(config, path.to_owned(), clock)
                .await
                .expect("store opens"),
        );
        let listener = TcpListener::bind(addr).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(serve_app(Arc::clone(&app), listener, async {
            let _ = rx.await;
        }));
        Self {
            base: format!("http://{addr}"),
            app,
            addr,
            _dir: None,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    /// Stops serving and waits until the listener is closed.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await
                .expect("server task")
                .expect("server ran cleanly");
        }
    }

    /// POSTs `body` to its /v1/check.
    pub async fn check(&self, body: &str) -> serde_json::Value {
        reqwest::Client::new()
            .post(format!("{}/v1/check", self.base))
            .body(body.to_owned())
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json")
    }
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A response's header as text ("" when absent).
pub fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}
