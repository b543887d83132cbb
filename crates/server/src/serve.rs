//! `tollgate serve`: bind, serve until SIGTERM/SIGINT (in-flight requests
//! finish), reload on SIGHUP and when the config file changes.

use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};
use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinHandle;

use tollgate_core::SystemClock;

use crate::ServeError;
use crate::app::App;
use crate::config::{Overrides, ServeConfig, ServerSettings, StoreSettings};
use crate::descriptors::{Descriptors, raise_descriptor_limit};
use crate::listen::ListenAddress;
use crate::proxy_socket;
use crate::workers::{serve_grpc, serve_http, serve_proxy_socket};

/// How long gRPC connections may drain after HTTP has: a client that never
/// acknowledges HTTP/2's GOAWAY would otherwise hold the process forever.
const GRPC_DRAIN: Duration = Duration::from_secs(5);

/// What `tollgate serve` was told on its command line (or environment).
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// The config file.
    pub config: PathBuf,
    /// Over `server.listen`.
    pub listen: Option<ListenAddress>,
    /// Over `server.grpc_listen`.
    pub grpc_listen: Option<ListenAddress>,
    /// `--region` and `--store` over the file, at start and on reload.
    pub overrides: Overrides,
    /// Announce the listeners on stdout as JSON objects rather than text
    /// (`--log-format json`), so that stdout and stderr merged by a log
    /// collector still parse one object a line.
    pub announce_json: bool,
}

/// Serves until SIGTERM or SIGINT, reloading on SIGHUP; an error if it
/// could not start or a listener failed.
pub async fn serve(options: ServeOptions) -> Result<(), ServeError> {
    let ServeOptions {
        config: config_path,
        listen,
        grpc_listen,
        overrides,
        announce_json,
    } = options;
    let config = ServeConfig::load_overridden(&config_path, &overrides)?;
    let addr = listen.unwrap_or_else(|| config.server.listen.clone());
    // On the listeners it will open: `--listen 0.0.0.0:8080` without
    // tokens is the hazard the file alone does not show.
    let grpc_addr = grpc_listen.or_else(|| config.server.grpc_listen.clone());
    for warning in config.warnings_serving(&addr, grpc_addr.as_ref()) {
        tracing::warn!("{warning}");
    }
    let descriptors = descriptors_for(&config.server)?;
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let stores = describe_stores(&config);
    let shared_stores = config
        .stores
        .list
        .iter()
        .any(|(_, settings)| !matches!(settings, StoreSettings::Memory { .. }));
    let region = config.deployment.region.clone();
    let clock: Arc<dyn tollgate_core::Clock> = Arc::new(SystemClock);
    let app = Arc::new(
        App::open(config, config_path, Arc::clone(&clock))
            .await
            .map_err(ServeError::Store)?
            .with_overrides(overrides)
            .with_connection_limit(descriptors.max_connections),
    );
    let bind = |addr: ListenAddress, what: &'static str| async move {
        TcpListener::bind(addr.as_str())
            .await
            .map_err(|source| ServeError::Listen {
                what,
                addr: addr.to_string(),
                source,
            })
    };
    let listener = bind(addr, "").await?;
    let local = listener.local_addr().map_err(ServeError::BoundAddress)?;
    let grpc_listener = match grpc_addr {
        Some(addr) => Some(bind(addr, " for gRPC").await?),
        None => None,
    };
    let grpc_local = grpc_listener.as_ref().and_then(|l| l.local_addr().ok());
    let proxy_socket = bind_proxy_socket(&app)?;
    // Signals are caught before anyone is told we listen: a SIGHUP or
    // SIGTERM sent right after the first line must not kill the process.
    let watch = |kind: SignalKind, name: &'static str| {
        signal(kind).map_err(|source| ServeError::Signal {
            signal: name,
            source,
        })
    };
    let mut hangups = watch(SignalKind::hangup(), "SIGHUP")?;
    let terms = watch(SignalKind::terminate(), "SIGTERM")?;
    let interrupts = watch(SignalKind::interrupt(), "SIGINT")?;
    // The first line on stdout says where we listen (tests and scripts read
    // it); the second, when served, where gRPC listens.
    announce(&format!("{scheme}://{local}"), grpc_local, announce_json);
    tracing::info!(
        http = %format_args!("{scheme}://{local}"),
        grpc = %grpc_local.map_or_else(|| "off".to_owned(), |g| format!("{scheme}://{g}")),
        proxy_socket = %proxy_socket
            .as_ref()
            .map_or_else(|| "off".to_owned(), |(_, bound)| bound.path.display().to_string()),
        stores = %stores,
        region = %region.as_deref().unwrap_or("none"),
        policies = app.live.load().policies.len(),
        max_connections = descriptors.max_connections,
        open_files = descriptors.soft,
        "tollgate serving"
    );
    if shared_stores {
        tokio::spawn(warn_unreachable_stores(Arc::clone(&app)));
    }
    let reloader = Arc::clone(&app);
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let _ = reloader.reload();
        }
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal(terms, interrupts).await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let grpc = grpc_listener.map(|listener| {
        tokio::spawn(serve_grpc(
            Arc::clone(&app),
            listener,
            stopped(stop_rx.clone()),
        ))
    });
    let proxy = proxy_socket.map(|(listener, bound)| {
        let (app, stop) = (Arc::clone(&app), stopped(stop_rx.clone()));
        tokio::spawn(async move {
            let served = serve_proxy_socket(app, listener, stop).await;
            // Its file goes once nothing is served on it.
            drop(bound);
            served
        })
    });
    serve_app(app, listener, stopped(stop_rx)).await?;
    drain_others(proxy, grpc).await?;
    tracing::info!("tollgate stopped");
    Ok(())
}

/// Once HTTP has drained: waits for the proxy socket, stopped with it, and
/// the gRPC listener, for at most [`GRPC_DRAIN`].
async fn drain_others(
    proxy: Option<JoinHandle<Result<(), ServeError>>>,
    grpc: Option<JoinHandle<Result<(), ServeError>>>,
) -> Result<(), ServeError> {
    if let Some(proxy) = proxy {
        proxy.await.map_err(ServeError::ProxySocketTask)??;
    }
    if let Some(grpc) = grpc {
        match tokio::time::timeout(GRPC_DRAIN, grpc).await {
            Ok(joined) => joined.map_err(ServeError::GrpcTask)??,
            Err(_) => tracing::warn!(
                "gRPC connections still open {} s after HTTP drained; closing them",
                GRPC_DRAIN.as_secs()
            ),
        }
    }
    Ok(())
}

/// `server.proxy_socket`, bound (its path relative to the config file),
/// when the config sets one.
fn bind_proxy_socket(
    app: &App,
) -> Result<Option<(UnixListener, proxy_socket::BoundSocket)>, ServeError> {
    let Some(socket) = app.live.load().config.server.proxy_socket.clone() else {
        return Ok(None);
    };
    let base = app.config_path.parent().unwrap_or(Path::new("."));
    proxy_socket::bind(&socket, base)
        .map(Some)
        .map_err(|source| ServeError::Listen {
            what: " for the proxy",
            addr: base.join(&socket.path).display().to_string(),
            source,
        })
}

/// A standalone or Sentinel Redis connects lazily, so a store that is down
/// at start does not stop the server: say so at once, one line for each
/// store that is down, naming only it.
async fn warn_unreachable_stores(app: Arc<App>) {
    for store in app.limiter.store_answers().await {
        if let Err(error) = store.answer {
            tracing::warn!(
                store = %store.name.role,
                region = store.name.region.as_deref().unwrap_or("none"),
                kind = error.kind(),
                %error,
                "store {} unreachable at start; its policies answer per their failure mode",
                store.name
            );
        }
    }
}

/// Every store by role and kind, for the start line (never a password).
fn describe_stores(config: &ServeConfig) -> String {
    config
        .stores
        .list
        .iter()
        .map(|(role, settings)| format!("{role}: {}", settings.describe()))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets
/// in-flight requests finish. Also runs the background upkeep: the
/// limiter's (sweeping idle keys, giving back unspent blocks, renewing
/// leases, of the live config's plans), watching the config file and
/// refreshing the stores' live marks.
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
            // None: the first look reloads (a no-op for the file loaded
            // at start), so an edit made before the watcher started is seen.
            let mut last = None;
            loop {
                tick.tick().await;
                let stamp = Some(file_stamp(&watcher));
                if stamp != last {
                    let _ = match last {
                        None => watcher.reload_first_look(),
                        Some(_) => watcher.reload(),
                    };
                    last = stamp;
                }
            }
        });
    }
    upkeep.spawn(Arc::clone(&app).keep_live_marks());
    let live = Arc::clone(&app);
    let limiter_upkeep = app.limiter.upkeep(move || live.live.load_full());
    let served = serve_http(Arc::clone(&app), listener, shutdown).await;
    upkeep.abort_all();
    // In-flight requests are done: what hot-lease blocks hold goes back.
    limiter_upkeep.stop().await;
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

async fn shutdown_signal(
    mut terms: tokio::signal::unix::Signal,
    mut interrupts: tokio::signal::unix::Signal,
) {
    tokio::select! {
        _ = terms.recv() => {}
        _ = interrupts.recv() => {}
    }
    tracing::info!("shutting down: finishing in-flight requests");
}

/// Writes the listen lines on stdout: `listening on <url>` and `grpc
/// listening on <addr>`, or as JSON `{"listening":"<url>"}` and
/// `{"grpc_listening":"<addr>"}`.
fn announce(http: &str, grpc: Option<std::net::SocketAddr>, json: bool) {
    let mut out = std::io::stdout().lock();
    if json {
        let _ = writeln!(out, "{}", serde_json::json!({ "listening": http }));
        if let Some(grpc) = grpc {
            let line = serde_json::json!({ "grpc_listening": grpc.to_string() });
            let _ = writeln!(out, "{line}");
        }
    } else {
        let _ = writeln!(out, "listening on {http}");
        if let Some(grpc) = grpc {
            let _ = writeln!(out, "grpc listening on {grpc}");
        }
    }
    let _ = out.flush();
}

/// The file descriptors `serve` may open, raised to the hard limit; the
/// default `max_connections` lowered to fit is said loudly.
fn descriptors_for(server: &ServerSettings) -> Result<Descriptors, ServeError> {
    let descriptors = raise_descriptor_limit(server)?;
    if descriptors.lowered(server) {
        tracing::warn!(
            "server.max_connections: the default {} needs {} file descriptors but this process may open only {} (RLIMIT_NOFILE soft {}, hard {}): serving at most {} connections; raise the limit (ulimit -n, systemd LimitNOFILE=, docker run --ulimit nofile=) or set server.max_connections",
            server.max_connections,
            descriptors.needed,
            descriptors.soft,
            descriptors.soft,
            descriptors.hard,
            descriptors.max_connections,
        );
    }
    Ok(descriptors)
}
