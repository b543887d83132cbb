//! A small API behind tollgate's tower layer: `POST /orders`, `GET /items`
//! and `POST /reports?ms=N` (a handler that sleeps N ms, for capacity
//! tests), each answering 200 with a short JSON body when admitted.
//! `GET /reports/in_flight` says how many reports are being made now and
//! the most made at once since the start, which a concurrency limit
//! bounds; `POST /reports?ms=N&panic=true` panics after N ms, as a handler
//! with a bug does.
//!
//! ```sh
//! cargo run --release -p tollgate-tower --example axum_app -- \
//!   --config crates/tower/examples/axum_app.yaml --listen 127.0.0.1:3000 \
//!   [--remote http://127.0.0.1:8080]
//! ```
//!
//! The limits come from `--config`, the schema `tollgate serve` reads
//! (`policies` with `match` and `identity`, `store`, and how a request is
//! read: `server.trusted_proxies`, `server.max_key_bytes`); with
//! `--remote` they are decided by that tollgate instead of in this
//! process. Without `--remote`, `kill -HUP` reloads the file.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};
use tollgate_core::{Clock, SystemClock};
use tollgate_limiter::LimiterMetrics;
use tollgate_tower::{
    Configured, RateLimitLayer, Reloaded, RemoteConfig, RemoteTollgate, rules_of,
};

/// `--config FILE --listen ADDR [--remote URL]`.
pub struct Args {
    config: PathBuf,
    listen: SocketAddr,
    remote: Option<String>,
}

/// The arguments after the program's name.
pub fn args(mut given: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut config = None;
    let mut listen = None;
    let mut remote = None;
    while let Some(flag) = given.next() {
        let value = given
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--config" => config = Some(PathBuf::from(value)),
            "--listen" => {
                listen = Some(
                    value
                        .parse()
                        .map_err(|e| format!("--listen {value}: {e}"))?,
                );
            }
            "--remote" => remote = Some(value),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Args {
        config: config.ok_or("--config FILE is required")?,
        listen: listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 3000))),
        remote,
    })
}

#[derive(serde::Deserialize)]
struct Report {
    ms: Option<u64>,
    #[serde(default)]
    panic: bool,
}

/// Reports being made now, and the most at once since the start.
#[derive(Default)]
pub struct InFlight {
    now: AtomicU64,
    most: AtomicU64,
}

impl InFlight {
    /// Reports being made now.
    pub fn now(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }

    /// The most reports made at once since the start.
    pub fn most(&self) -> u64 {
        self.most.load(Ordering::SeqCst)
    }
}

/// One report being made: counted until its handler ends, however it
/// ends (answered, panicked, or dropped when its client left).
struct Making(Arc<InFlight>);

impl Making {
    fn start(in_flight: &Arc<InFlight>) -> Self {
        let now = in_flight.now.fetch_add(1, Ordering::SeqCst) + 1;
        in_flight.most.fetch_max(now, Ordering::SeqCst);
        Self(Arc::clone(in_flight))
    }
}

impl Drop for Making {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn report(
    State(in_flight): State<Arc<InFlight>>,
    Query(report): Query<Report>,
) -> Json<serde_json::Value> {
    let _making = Making::start(&in_flight);
    let ms = report.ms.unwrap_or(0).min(60_000);
    tokio::time::sleep(Duration::from_millis(ms)).await;
    if report.panic {
        panic!("a report failed after {ms} ms");
    }
    Json(json!({"report": "done", "ms": ms}))
}

/// The routes, the reports handler counted in `in_flight`.
pub fn api(in_flight: Arc<InFlight>) -> Router {
    Router::new()
        .route(
            "/orders",
            post(|| async { Json(json!({"order": "placed"})) }),
        )
        .route("/items", get(|| async { Json(json!({"items": []})) }))
        .route("/reports", post(report))
        .route(
            "/reports/in_flight",
            get(|State(in_flight): State<Arc<InFlight>>| async move {
                Json(json!({"now": in_flight.now(), "most": in_flight.most()}))
            }),
        )
        .with_state(in_flight)
}

async fn serve(app: Router, listen: SocketAddr) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("listening on http://{}", listener.local_addr()?);
    // The peer address is what `identity: [client_ip]` keys by.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run(args(std::env::args().skip(1))?).await
}

/// Serves until the process ends.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let in_flight = Arc::new(InFlight::default());
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    match args.remote {
        None => {
            // Kept for as long as the app serves: it runs the limiter's
            // upkeep, and reloads the file on SIGHUP as `tollgate serve` does.
            let configured = Arc::new(Configured::load(&args.config, clock).await?);
            tokio::spawn(reload_on_hangup(Arc::clone(&configured))?);
            serve(api(in_flight).layer(configured.layer()), args.listen).await?;
        }
        Some(url) => {
            // Only the rules are read here: the remote decides on its stores.
            #[allow(clippy::disallowed_methods)] // the config's own env lookups
            let config = tollgate_config::Config::load(&args.config, |v| std::env::var(v).ok())?;
            let mut registry = Registry::default();
            let metrics = LimiterMetrics::register(&mut registry, Arc::clone(&clock));
            let rules = rules_of(&config, &metrics);
            let remote = RemoteTollgate::new(&RemoteConfig::new(url), clock)?;
            let layer = RateLimitLayer::new(remote, rules);
            serve(api(in_flight).layer(layer), args.listen).await?;
        }
    }
    Ok(())
}

/// Reads the config again on every SIGHUP; a file that cannot serve is
/// refused on stderr and the rules before it keep serving.
fn reload_on_hangup(
    configured: Arc<Configured>,
) -> std::io::Result<impl std::future::Future<Output = ()>> {
    let mut hangups = signal(SignalKind::hangup())?;
    Ok(async move {
        while hangups.recv().await.is_some() {
            match configured.reload() {
                Ok(Reloaded::Applied) => println!("config reloaded"),
                Ok(Reloaded::Unchanged) => println!("config unchanged"),
                Err(e) => {
                    eprintln!("config reload refused, the previous config keeps serving: {e}")
                }
            }
        }
    })
}
