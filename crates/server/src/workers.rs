//! The workers: one current-thread runtime per core, each serving the
//! connections that a single acceptor hands it in turn, HTTP/1.1 on the
//! HTTP listener and gRPC (HTTP/2) on the gRPC listener, each listener with
//! its own workers.
//!
//! Why not one work-stealing runtime: a decision is a few hundred
//! nanoseconds; what costs is moving a request between threads. A worker
//! that owns its connections runs each request from read to write on one
//! core, with no cross-core wake-ups (docs/benchmarks.md has the figures).
//! The acceptor deals connections round-robin so workers stay balanced, and
//! refuses those the connection gate does not admit ([`crate::connections`]:
//! `max_connections`, per peer, the trusted proxies' reserve) before a byte
//! is read. A peer that is not a trusted proxy has `server.header_timeout_ms`
//! to send each request head (gRPC: its first byte); a trusted proxy's idle
//! connections are kept `proxy_idle_timeout_ms`. The proxy socket
//! (`server.proxy_socket`) serves HTTP/1.1 to the proxy alone.
//!
//! The hot endpoints (`POST /v1/check`, `/v1/authorize`, `ShouldRateLimit`)
//! go straight to their handlers; everything else goes through the axum
//! router (tonic's, for gRPC), so both paths answer identically. A Redis
//! store batches each runtime's calls on that runtime's own lane
//! (tollgate_store's `batch`), for both protocols.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::Request;
use axum::response::Response;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

use crate::ServeError;
use crate::app::App;
use crate::connections::{Caller, Refused, Slot};
use crate::http;
use crate::http::linger::{LingerFlag, LingerOnClose, Lingering};
use crate::metrics::RuleLabels;
use crate::tls::EdgeStream;
use tollgate_http::Peer;

/// Accepted connections waiting for a busy worker, per worker.
const HANDOFF_QUEUE: usize = 1024;
/// The pause after a failed accept (e.g. out of file descriptors), so the
/// acceptor does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);
/// hyper's own default read buffer limit (8 KiB + 100 × 4 KiB).
const MIN_READ_BUFFER: usize = 8192 + 4096 * 100;
/// Concurrent gRPC calls per HTTP/2 connection (Envoy multiplexes many).
const MAX_CONCURRENT_STREAMS: u32 = 1_024;
/// An HTTP/2 connection's receive window: many small calls in flight at
/// once never wait for a WINDOW_UPDATE (a stream's stays HTTP/2's 64 KiB,
/// far above one RLS request).
const CONNECTION_WINDOW: u32 = 1 << 20;

/// What a listener speaks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Protocol {
    /// HTTP/1.1: the HTTP API and forward auth.
    Http,
    /// gRPC over HTTP/2: Envoy's rate limit service and gRPC health.
    Grpc,
}

impl Protocol {
    fn name(self) -> &'static str {
        match self {
            Protocol::Http => "HTTP",
            Protocol::Grpc => "gRPC",
        }
    }
}

/// What a listener accepts on.
enum Listener {
    Tcp(TcpListener),
    /// `server.proxy_socket`.
    Unix(UnixListener),
}

impl Listener {
    /// The next connection, as a stream a worker's runtime can take, and
    /// its peer.
    async fn accept(&self) -> std::io::Result<(Stream, Peer)> {
        match self {
            Listener::Tcp(listener) => {
                let (stream, peer) = listener.accept().await?;
                let _ = stream.set_nodelay(true);
                Ok((Stream::Tcp(stream.into_std()?), Peer::Addr(peer)))
            }
            Listener::Unix(listener) => {
                let (stream, _) = listener.accept().await?;
                Ok((Stream::Unix(stream.into_std()?), Peer::ProxySocket))
            }
        }
    }
}

/// An accepted connection on its way to a worker's runtime.
enum Stream {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

struct Accepted {
    stream: Stream,
    peer: Peer,
    /// A trusted proxy's connection (or one on the proxy socket).
    trusted: bool,
    /// Its place under the gate, given back when the connection ends.
    slot: Slot,
}

/// How many workers `server.http_workers` asks for (0: one per core).
pub fn worker_count(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Serves HTTP on `listener` until `shutdown` resolves; then stops
/// accepting, lets in-flight requests finish and closes idle connections.
pub async fn serve_http(
    app: Arc<App>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    serve_listener(app, Listener::Tcp(listener), Protocol::Http, shutdown).await
}

/// Serves HTTP on `server.proxy_socket`, every peer a trusted proxy, as
/// `serve_http` does on TCP (never TLS: the socket is local).
pub(crate) async fn serve_proxy_socket(
    app: Arc<App>,
    listener: UnixListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    serve_listener(app, Listener::Unix(listener), Protocol::Http, shutdown).await
}

/// Serves Envoy's rate limit service (`ShouldRateLimit`, `crate::rls`)
/// and the standard gRPC health service on `listener` until `shutdown`
/// resolves, as `serve_http` does HTTP.
pub async fn serve_grpc(
    app: Arc<App>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    serve_listener(app, Listener::Tcp(listener), Protocol::Grpc, shutdown).await
}

/// Serves `protocol` on `listener` until `shutdown` resolves: one worker
/// a core, each on its own thread, fed connections by this acceptor.
async fn serve_listener(
    app: Arc<App>,
    listener: Listener,
    protocol: Protocol,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let (workers, limits) = {
        let settings = &app.live.load().config.server;
        (
            worker_count(settings.http_workers),
            HeadLimits {
                request_timeout: Duration::from_millis(settings.request_timeout_ms),
                header_timeout: Duration::from_millis(settings.header_timeout_ms),
                proxy_idle_timeout: Duration::from_millis(settings.proxy_idle_timeout_ms),
                max_headers: settings.max_headers,
                max_header_bytes: settings.max_header_bytes,
            },
        )
    };
    let tls = app
        .live
        .load()
        .config
        .edge_tls()?
        .map(|tls| match protocol {
            Protocol::Http => tls.acceptor(),
            Protocol::Grpc => tls.grpc_acceptor(),
        });
    let routes = match protocol {
        Protocol::Http => Routes::Http(http::operations_router(Arc::clone(&app))),
        Protocol::Grpc => Routes::Grpc(crate::rls::other_methods().await),
    };
    let mut handoffs = Vec::with_capacity(workers);
    let mut finished = Vec::with_capacity(workers);
    for index in 0..workers {
        let worker = Worker {
            app: Arc::clone(&app),
            routes: routes.clone(),
            limits,
            tls: tls.clone(),
        };
        let (handoff, done) = start_worker(worker, protocol, index).await?;
        handoffs.push(handoff);
        finished.push(done);
    }
    let mut shutdown = std::pin::pin!(shutdown);
    let mut next = 0usize;
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let Some(accepted) = admit(&app, stream, peer) else {
            continue;
        };
        let handoff = &handoffs[next % workers];
        next = next.wrapping_add(1);
        // A worker gone drops the connection, and its slot with it.
        let _ = handoff.send(accepted).await;
    }
    drop(handoffs);
    for done in finished {
        let _ = done.await;
    }
    Ok(())
}

/// The connection with its slot, or `None` (counted, and the connection
/// closed) when the gate refuses it. Who is trusted is read from the live
/// config, so a reload of `trusted_proxies` applies to the next accept.
fn admit(app: &App, stream: Stream, peer: Peer) -> Option<Accepted> {
    let trusted = peer.is_trusted(&app.live.load().config.server.trusted_proxies);
    let caller = match peer.ip() {
        Some(ip) if !trusted => Caller::Other(ip),
        _ => Caller::Proxy,
    };
    match app.connections.admit(caller) {
        Ok(slot) => Some(Accepted {
            stream,
            peer,
            trusted,
            slot,
        }),
        Err(Refused::Full) => {
            app.metrics.refused_connections.inc();
            None
        }
        Err(rule) => {
            app.metrics
                .refused_by_rule
                .get_or_create(&RuleLabels { rule: rule.rule() })
                .inc();
            tracing::debug!(%peer, rule = rule.rule(), "connection refused");
            None
        }
    }
}

/// Starts `worker` on a thread of its own, on its own current-thread
/// runtime: the sender that hands it connections, and what says when it
/// has finished.
async fn start_worker(
    worker: Worker,
    protocol: Protocol,
    index: usize,
) -> Result<(mpsc::Sender<Accepted>, oneshot::Receiver<()>), ServeError> {
    let (tx, rx) = mpsc::channel(HANDOFF_QUEUE);
    let (done_tx, done_rx) = oneshot::channel();
    let (ready_tx, ready_rx) = oneshot::channel();
    std::thread::Builder::new()
        .name(format!(
            "tollgate-{}-{index}",
            protocol.name().to_lowercase()
        ))
        .spawn(move || {
            // Built (and dropped) on its own thread, outside any runtime.
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => {
                    let _ = ready_tx.send(Ok(()));
                    runtime.block_on(worker.serve(rx));
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            }
            let _ = done_tx.send(());
        })
        .map_err(|source| ServeError::Worker {
            protocol: protocol.name(),
            index,
            source,
        })?;
    ready_rx
        .await
        .map_err(|_| ServeError::WorkerGone {
            protocol: protocol.name(),
            index,
        })?
        .map_err(|source| ServeError::Worker {
            protocol: protocol.name(),
            index,
            source,
        })?;
    Ok((tx, done_rx))
}

/// What a request's head may take, read at start.
#[derive(Clone, Copy)]
struct HeadLimits {
    /// `server.request_timeout_ms`: a request's body (`http/body.rs`), and
    /// a trusted proxy's TLS handshake.
    request_timeout: Duration,
    /// `server.header_timeout_ms`: each request head (gRPC: the first
    /// byte) and the TLS handshake of a peer that is not a trusted proxy.
    header_timeout: Duration,
    /// `server.proxy_idle_timeout_ms`: each request head of a trusted
    /// proxy, so how long its idle keep-alive connections are kept.
    proxy_idle_timeout: Duration,
    /// `server.max_headers` and `server.max_header_bytes`: beyond them hyper
    /// answers 431 and closes (docs/forward-auth.md says what a proxy
    /// makes of it).
    max_headers: usize,
    max_header_bytes: usize,
}

/// What a worker routes besides its protocol's hot paths.
#[derive(Clone)]
enum Routes {
    /// The HTTP operations endpoints.
    Http(Router),
    /// The gRPC methods other than `ShouldRateLimit`.
    Grpc(tonic::service::Routes),
}

struct Worker {
    app: Arc<App>,
    routes: Routes,
    limits: HeadLimits,
    /// `server.tls`: every TCP connection is TLS.
    tls: Option<tokio_rustls::TlsAcceptor>,
}

/// One connection's task: what it needs from its worker.
struct Connection {
    app: Arc<App>,
    routes: Routes,
    peer: Peer,
    trusted: bool,
    /// The TLS handshake's (or, for gRPC, the first byte's) deadline.
    opening_timeout: Duration,
    http1: http1::Builder,
    http2: http2::Builder<SpawnBoxed>,
    watcher: Watcher,
}

impl Worker {
    /// Runs on the worker's own thread until the acceptor hangs up and
    /// every connection has finished.
    async fn serve(self, mut handoff: mpsc::Receiver<Accepted>) {
        let graceful = GracefulShutdown::new();
        let http1_proxy = self.http1(self.limits.proxy_idle_timeout);
        let http1_other = self.http1(self.limits.header_timeout);
        let http2 = self.http2();
        while let Some(accepted) = handoff.recv().await {
            let Accepted {
                stream,
                peer,
                trusted,
                slot,
            } = accepted;
            // A trusted proxy's head may wait its idle bound; its handshake
            // is a request's. Anyone else has the header timeout for both.
            let (opening_timeout, http1) = if trusted {
                (self.limits.request_timeout, &http1_proxy)
            } else {
                (self.limits.header_timeout, &http1_other)
            };
            let connection = Connection {
                app: Arc::clone(&self.app),
                routes: self.routes.clone(),
                peer,
                trusted,
                opening_timeout,
                http1: http1.clone(),
                http2: http2.clone(),
                watcher: graceful.watcher(),
            };
            let tls = self.tls.clone();
            tokio::spawn(async move {
                match stream {
                    Stream::Tcp(stream) => {
                        if let Ok(stream) = TcpStream::from_std(stream) {
                            connection.serve_tcp(stream, tls).await;
                        }
                    }
                    Stream::Unix(stream) => {
                        if let Ok(stream) = UnixStream::from_std(stream) {
                            connection.serve(stream).await;
                        }
                    }
                }
                drop(slot);
            });
        }
        graceful.shutdown().await;
    }

    /// HTTP/1.1 whose every request head must arrive within
    /// `head_timeout` of the connection's start or of the previous answer.
    fn http1(&self, head_timeout: Duration) -> http1::Builder {
        let mut builder = http1::Builder::new();
        builder
            // One flat buffer and one send(2) a response: its headers and a
            // small body are cheaper copied together than gathered by
            // writev(2) (docs/benchmarks.md).
            .writev(false)
            .timer(TokioTimer::new())
            .header_read_timeout(head_timeout)
            .max_headers(self.limits.max_headers)
            .max_header_size(self.limits.max_header_bytes)
            // The read buffer must hold the largest head allowed.
            .max_buf_size(MIN_READ_BUFFER.max(self.limits.max_header_bytes + 8192));
        builder
    }

    /// HTTP/2 for many small unary calls: many streams a connection, a
    /// connection window that never throttles them, no `date` header
    /// (gRPC has no use for it).
    fn http2(&self) -> http2::Builder<SpawnBoxed> {
        let mut builder = http2::Builder::new(SpawnBoxed);
        builder
            .timer(TokioTimer::new())
            .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_header_list_size(u32::try_from(self.limits.max_header_bytes).unwrap_or(u32::MAX))
            .auto_date_header(false);
        builder
    }
}

impl Connection {
    /// A TCP connection: its TLS handshake first when `server.tls` is set,
    /// bounded like its first head; for gRPC without TLS, its first byte.
    async fn serve_tcp(self, stream: TcpStream, tls: Option<tokio_rustls::TlsAcceptor>) {
        let (app, peer) = (Arc::clone(&self.app), self.peer);
        let Some(acceptor) = tls else {
            if matches!(self.routes, Routes::Grpc(_)) && !self.first_byte(&stream).await {
                return;
            }
            return self.serve(EdgeStream::Plain(stream)).await;
        };
        match tokio::time::timeout(self.opening_timeout, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => self.serve(EdgeStream::Tls(Box::new(tls))).await,
            Ok(Err(e)) => {
                app.metrics.tls_handshake_failures.inc();
                tracing::debug!(%peer, error = %e, "TLS handshake failed; connection dropped");
            }
            Err(_) => {
                app.metrics.tls_handshake_failures.inc();
                tracing::debug!(%peer, "TLS handshake timed out; connection dropped");
            }
        }
    }

    /// Whether a byte arrived within the opening bound: HTTP/2 has no head
    /// timeout of its own, and a client that never sends its preface would
    /// hold its slot for as long as it liked.
    async fn first_byte(&self, stream: &TcpStream) -> bool {
        let mut byte = [0u8; 1];
        match tokio::time::timeout(self.opening_timeout, stream.peek(&mut byte)).await {
            Ok(Ok(read)) => read > 0,
            Ok(Err(_)) => false,
            Err(_) => {
                if !self.trusted {
                    self.app.metrics.header_timeouts.inc();
                }
                false
            }
        }
    }

    /// Serves the connection's protocol on `stream` until it closes.
    async fn serve<S>(self, stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Connection {
            app,
            routes,
            peer,
            trusted,
            http1,
            http2,
            watcher,
            ..
        } = self;
        let metrics = Arc::clone(&app.metrics);
        let served = match routes {
            Routes::Http(router) => {
                let linger = LingerFlag::default();
                let stream = TokioIo::new(Lingering::new(stream, linger.clone()));
                let service = service_fn(move |req| {
                    dispatch(Arc::clone(&app), router.clone(), peer, linger.clone(), req)
                });
                watcher.watch(http1.serve_connection(stream, service)).await
            }
            Routes::Grpc(others) => {
                let service =
                    service_fn(move |req| crate::rls::route(Arc::clone(&app), others.clone(), req));
                watcher
                    .watch(http2.serve_connection(TokioIo::new(stream), service))
                    .await
            }
        };
        if let Err(e) = served
            && e.is_timeout()
            && !trusted
        {
            metrics.header_timeouts.inc();
            tracing::debug!(%peer, "no request head within server.header_timeout_ms; connection closed");
        }
    }
}

/// hyper's HTTP/2 executor: each stream's future (its call, from headers
/// to trailers) boxed, then spawned on the worker's runtime.
///
/// Why boxed: spawning moves the future by value through several layers
/// of tokio before it lands in its task, one copy each; a call's future is
/// a few kilobytes, and those copies cost more than the decision
/// (docs/benchmarks.md). Boxed, it is copied once and the rest move a
/// pointer.
#[derive(Clone, Copy)]
struct SpawnBoxed;

impl<F> hyper::rt::Executor<F> for SpawnBoxed
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        tokio::spawn(Box::pin(future));
    }
}

async fn dispatch(
    app: Arc<App>,
    router: Router,
    peer: Peer,
    linger: LingerFlag,
    req: Request<Incoming>,
) -> Result<Response, Infallible> {
    let response = http::route(&app, router, peer, req).await;
    if response.extensions().get::<LingerOnClose>().is_some() {
        linger.set();
    }
    Ok(response)
}
