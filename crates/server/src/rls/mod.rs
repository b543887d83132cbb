//! Envoy's rate limit service (RLS v3 gRPC), a drop-in for
//! envoyproxy/ratelimit: its YAML config read unchanged ([`rules`]) and
//! `ShouldRateLimit` answered from tollgate's stores ([`service`]).
//!
//! One difference on purpose: every descriptor of a request is decided in
//! one all-or-nothing store call, so a request over any limit consumes
//! nothing from the others (envoyproxy/ratelimit counts each descriptor
//! independently, so a rejected request still spends the limits it passed).

pub mod rules;
pub mod service;

pub use rules::{EnvoyRules, Rule, RuleKind, RulesError, Unit};
pub use service::{LiveRules, RateLimitGrpc, serve_grpc};
