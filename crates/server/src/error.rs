//! What stops `tollgate serve` (at start, or a listener failing while
//! serving): each says what it could not do and why, for the one line the
//! binary prints before exiting 1.

use std::io;

use tollgate_store::StoreError;

use crate::config::{ConfigLoadError, TlsNotLoaded};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigLoadError),
    #[error("cannot open the store: {0}")]
    Store(StoreError),
    #[error("cannot listen{what} on {addr}: {source}")]
    Listen {
        /// `""` for HTTP, `" for gRPC"`.
        what: &'static str,
        /// As given: an address, or a host name resolved at bind.
        addr: String,
        source: io::Error,
    },
    #[error("cannot read the bound address: {0}")]
    BoundAddress(io::Error),
    #[error("cannot watch {signal}: {source}")]
    Signal {
        signal: &'static str,
        source: io::Error,
    },
    #[error("cannot start {protocol} worker {index}: {source}")]
    Worker {
        protocol: &'static str,
        index: usize,
        source: io::Error,
    },
    #[error("{protocol} worker {index} stopped while starting")]
    WorkerGone {
        protocol: &'static str,
        index: usize,
    },
    #[error(transparent)]
    TlsNotLoaded(#[from] TlsNotLoaded),
    #[error("gRPC server task failed: {0}")]
    GrpcTask(tokio::task::JoinError),
}
