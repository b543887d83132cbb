//! tollgate as a tower layer: exact rate limits on any tower `Service`
//! over `http` types (axum, hyper, tonic), decided by the same limiter as
//! `tollgate serve` — in process on the embedded store or Redis, or by a
//! remote tollgate through [`RemoteTollgate`].

#![deny(missing_docs)]

mod remote;

pub use remote::{RemoteConfig, RemoteError, RemoteTollgate};
