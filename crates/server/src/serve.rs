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

use crate::app::App;
use crate::config::ServeConfig;
use crate::http::router;

/// How often idle keys are swept from the memory store.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

pub async fn run(config_path: PathBuf, listen: Option<SocketAddr>) -> Result<(), String> {
    let config = ServeConfig::load(&config_path)?;
    let addr = listen.unwrap_or(config.server.listen);
    let app = Arc::new(App::open(config, config_path, Arc::new(SystemClock)).await?);
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    // The first line on stdout says where we listen (tests and scripts read it).
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on http://{local}");
        let _ = out.flush();
    }
    tracing::info!(%local, policies = app.runtime.load().policies.len(), "tollgate serving");
    let mut hangups =
        signal(SignalKind::hangup()).map_err(|e| format!("cannot watch SIGHUP: {e}"))?;
    let reloader = Arc::clone(&app);
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let _ = reloader.reload();
        }
    });
    serve_app(app, listener, shutdown_signal()).await?;
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
) -> Result<(), String> {
    let mut upkeep = tokio::task::JoinSet::new();
    let watch_ms = app.runtime.load().config.server.watch_interval_ms;
    if watch_ms > 0 {
        let watcher = Arc::clone(&app);
        upkeep.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(watch_ms));
            let mut last = file_stamp(&watcher.config_path);
            loop {
                tick.tick().await;
                let stamp = file_stamp(&watcher.config_path);
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
            sweeper.store.sweep();
        }
    });
    let served = axum::serve(
        listener,
        router(app).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
    .map_err(|e| format!("server error: {e}"));
    upkeep.abort_all();
    served
}

/// What identifies a version of the config file: its content's hash.
fn file_stamp(path: &std::path::Path) -> Option<blake3::Hash> {
    std::fs::read(path).ok().map(|bytes| blake3::hash(&bytes))
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
