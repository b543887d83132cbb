//! `tollgate serve`: bind, serve until SIGTERM/SIGINT (in-flight requests
//! finish), reload on SIGHUP and when the config file changes.

use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

use tollgate_core::SystemClock;

use crate::ServeError;
use crate::app::App;
use crate::config::ServeConfig;
use crate::workers::serve_http;

/// How often idle keys are swept from the memory store.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

pub async fn run(
    config_path: PathBuf,
    listen: Option<SocketAddr>,
    grpc_listen: Option<SocketAddr>,
    region: Option<String>,
) -> Result<(), ServeError> {
    let config = ServeConfig::load_in_region(&config_path, region.as_deref())?;
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    let addr = listen.unwrap_or(config.server.listen);
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let grpc_addr = grpc_listen.or(config.server.grpc_listen);
    let clock: Arc<dyn tollgate_core::Clock> = Arc::new(SystemClock);
    let app = Arc::new(
        App::open(config, config_path, Arc::clone(&clock))
            .await
            .map_err(ServeError::Store)?
            .in_region(region),
    );
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Listen {
            what: "",
            addr,
            source,
        })?;
    let local = listener.local_addr().map_err(ServeError::BoundAddress)?;
    let grpc_listener = match grpc_addr {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Listen {
                    what: " for gRPC",
                    addr,
                    source,
                })?,
        ),
        None => None,
    };
    // The first line on stdout says where we listen (tests and scripts read
    // it); the second, when served, where gRPC listens.
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on {scheme}://{local}");
        if let Some(grpc) = grpc_listener.as_ref().and_then(|l| l.local_addr().ok()) {
            let _ = writeln!(out, "grpc listening on {grpc}");
        }
        let _ = out.flush();
    }
    tracing::info!(%local, policies = app.live.load().policies.len(), "tollgate serving");
    let mut hangups = signal(SignalKind::hangup()).map_err(|source| ServeError::Signal {
        signal: "SIGHUP",
        source,
    })?;
    let reloader = Arc::clone(&app);
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let _ = reloader.reload();
        }
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let grpc = grpc_listener.map(|listener| {
        tokio::spawn(crate::rls::serve_grpc(
            Arc::clone(&app),
            listener,
            stopped(stop_rx.clone()),
        ))
    });
    serve_app(app, listener, stopped(stop_rx)).await?;
    if let Some(grpc) = grpc {
        grpc.await.map_err(ServeError::GrpcTask)??;
    }
    tracing::info!("tollgate stopped");
    Ok(())
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets
/// in-flight requests finish. Also runs the background upkeep: sweeping
/// idle keys and watching the config file.
pub async fn serve_app(
    app: Arc<App>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let mut upkeep = tokio::task::JoinSet::new();
    let watch_ms = app.live.load().config.server.watch_interval_ms;
    if watch_ms > 0 {
        let watcher = Arc::clone(&app);
        upkeep.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(watch_ms));
            let mut last = file_stamp(&watcher);
            loop {
                tick.tick().await;
                let stamp = file_stamp(&watcher);
                if stamp != last {
                    last = stamp;
                    let _ = watcher.reload();
                }
            }
        });
    }
    let sweeper = Arc::clone(&app);
    upkeep.spawn(async move {
        let mut tick = tokio::time::interval(SWEEP_INTERVAL);
        loop {
            tick.tick().await;
            sweeper.limiter.sweep();
        }
    });
    let served = serve_http(app, listener, shutdown).await;
    upkeep.abort_all();
    served
}

/// What identifies a version of the config: its file's content and that
/// of the envoyproxy/ratelimit files it names.
fn file_stamp(app: &App) -> Option<blake3::Hash> {
    let bytes = std::fs::read(&app.config_path).ok()?;
    let mut hasher = blake3::Hasher::new();
    hasher.update(&bytes);
    let envoy = app.live.load().config.envoy_paths(&app.config_path);
    crate::envoy_rules::stamp_into(&mut hasher, &envoy);
    Some(hasher.finalize())
}

async fn shutdown_signal() {
    let term = async {
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
    tracing::info!("shutting down: finishing in-flight requests");
}
