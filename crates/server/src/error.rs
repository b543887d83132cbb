//! What stops `tollgate serve` (at start, or a listener failing while
//! serving): each says what it could not do and why, for the one line the
//! binary prints before exiting 1.

use std::io;

use crate::limiter::StoreError;

use crate::config::{ConfigLoadError, TlsNotLoaded};
use crate::descriptors::DescriptorError;

/// Why `tollgate serve` could not start, or stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The config file could not be loaded or is invalid.
    #[error(transparent)]
    Config(#[from] ConfigLoadError),
    /// A configured store could not be opened.
    #[error("cannot open the store: {0}")]
    Store(StoreError),
    /// A listener could not bind its address.
    #[error("cannot listen{what} on {addr}: {source}")]
    Listen {
        /// `""` for HTTP, `" for gRPC"`, `" for the proxy"`.
        what: &'static str,
        /// As given: an address, or a host name resolved at bind.
        addr: String,
        /// The bind failure.
        source: io::Error,
    },
    /// The HTTP listener's bound address could not be read back.
    #[error("cannot read the bound address: {0}")]
    BoundAddress(io::Error),
    /// A signal handler (for reload or shutdown) could not be installed.
    #[error("cannot watch {signal}: {source}")]
    Signal {
        /// The signal's name, such as `SIGHUP`.
        signal: &'static str,
        /// Why installing the handler failed.
        source: io::Error,
    },
    /// A worker thread or its runtime could not be started.
    #[error("cannot start {protocol} worker {index}: {source}")]
    Worker {
        /// `"HTTP"` or `"gRPC"`.
        protocol: &'static str,
        /// The worker's number among its protocol's workers.
        index: usize,
        /// Why the thread or runtime could not start.
        source: io::Error,
    },
    /// A worker thread ended before reporting that it had started.
    #[error("{protocol} worker {index} stopped while starting")]
    WorkerGone {
        /// `"HTTP"` or `"gRPC"`.
        protocol: &'static str,
        /// The worker's number among its protocol's workers.
        index: usize,
    },
    /// `server.tls` is set but the config was not loaded from its file, so
    /// the certificate and key were never read.
    #[error(transparent)]
    TlsNotLoaded(#[from] TlsNotLoaded),
    /// The gRPC server's task panicked or was cancelled.
    #[error("gRPC server task failed: {0}")]
    GrpcTask(tokio::task::JoinError),
    /// The proxy socket's server task panicked or was cancelled.
    #[error("proxy socket server task failed: {0}")]
    ProxySocketTask(tokio::task::JoinError),
    /// The process may not open the file descriptors `server.max_connections`
    /// needs.
    #[error(transparent)]
    Descriptors(#[from] DescriptorError),
}
