//! The tollgate server as a library. The `tollgate` binary is a thin CLI
//! over it; tests drive it in-process with a manual clock over real
//! loopback HTTP and gRPC.
//!
//! Layers, each importing only those above it in this list (no cycles; see
//! docs/design.md §2):
//!
//! 1. **config** — what a file says, loaded and validated once for
//!    `validate` and `serve` alike: [`config`], [`envoy_rules`],
//!    [`failure_mode`], [`listen`], [`matching`], [`request_path`], [`scope`], [`tls`],
//!    [`tokens`].
//! 2. **limiter** — the one decision seam: [`limiter`] (stores, failure
//!    modes, clock, decision metrics) over the [`live`] config, with
//!    [`metrics`], [`hot`] and [`decision_log`]; [`app`] is the state every
//!    adapter shares.
//! 3. **protocol adapters** — input → checks → [`limiter::Limiter::decide`]
//!    → answer: HTTP ([`http`], one file an endpoint), Envoy RLS ([`rls`]),
//!    [`replay`]; both doors write RateLimit fields by [`ratelimit_fields`].
//! 4. **serve** — [`workers`] and [`serve`]: listen, reload, shut down.
//!
//! A `/v1/check` walks: [`workers`] accepts → `http::route` → the body
//! parsed into checks → [`limiter::Limiter::decide`] → the store → the
//! decision written back by [`http`].

// The guarded Redis store's nested futures need a deeper layout query.
#![deny(missing_docs)]
#![recursion_limit = "256"]

// 1. config
pub mod config;
pub mod envoy_rules;
pub mod failure_mode;
pub mod listen;
pub mod matching;
pub mod request_path;
pub use config::scope;
pub mod tls;
pub mod tokens;

// 2. limiter
pub mod app;
mod deadline;
pub mod live;
pub mod metrics;
/// The limiter, its own crate: a Rust service can depend on it alone.
pub use tollgate_limiter as limiter;

// 3. protocol adapters
pub mod explain;
pub mod http;
pub mod ratelimit_fields;
pub mod replay;
pub mod rls;

// 4. serve
mod error;
pub mod serve;
pub mod workers;

pub use error::ServeError;
