//! The tollgate server as a library: config, the HTTP adapter, metrics and
//! reload. The `tollgate` binary is a thin CLI over it; tests drive it
//! in-process with a manual clock over real loopback HTTP.
//!
//! Flow: request → identity ([`request`]) → policy ([`config`], [`matching`])
//! → store ([`app::Backend`]) → decision → response ([`response`]).

// The guarded Redis store's nested futures need a deeper layout query.
#![recursion_limit = "256"]

pub mod app;
mod check_fault;
pub mod config;
pub mod envoy_rules;
mod error;
pub mod explain;
pub mod hot;
pub mod http;
pub mod limiter;
pub mod linger;
pub mod live;
pub mod matching;
pub mod metrics;
pub mod ratelimit_fields;
pub mod replay;
pub mod request;
pub mod request_path;
pub mod response;
pub mod rls;
pub mod serve;
mod stopwatch;
pub mod tls;
pub mod tokens;
pub mod workers;

pub use error::ServeError;
