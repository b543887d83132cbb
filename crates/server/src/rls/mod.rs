//! Envoy's rate limit service (RLS v3 gRPC), a drop-in for
//! envoyproxy/ratelimit: its YAML config read unchanged
//! ([`crate::envoy_rules`], part of the config) and `ShouldRateLimit`
//! answered through the limiter ([`service`]). The serving layer
//! (`workers.rs`, `serve_grpc`) calls it: this module answers calls and
//! knows nothing of listeners or workers.
//!
//! One difference on purpose: every descriptor of a request is decided in
//! one all-or-nothing store call, so a request over any limit consumes
//! nothing from the others (envoyproxy/ratelimit counts each descriptor
//! independently, so a rejected request still spends the limits it passed).

mod answer;
mod identity;
mod resolve;
pub mod service;
mod unary;
mod wire;

pub(crate) use service::{other_methods, route};
pub use unary::GrpcBody;
