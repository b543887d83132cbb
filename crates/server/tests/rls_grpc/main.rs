//! Envoy's rate limit service over real loopback gRPC: envoyproxy/ratelimit's
//! documented config examples, loaded unchanged, decide as its README says;
//! every request field is honoured; bad requests are refused.
//!
//! `support::rls` starts tollgate's gRPC service, `harness` holds what these
//! tests share beside it; each other module is one concern.

#[path = "../support/mod.rs"]
mod support;

mod additions;
mod concurrency;
mod config_faults;
mod examples;
mod harness;
mod policy_identity;
mod redis_lanes;
mod request_fields;
mod store_failures;
