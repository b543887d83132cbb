//! The edge is authenticated when asked: bearer tokens on the decision API,
//! the admin endpoints and `/metrics` (each from its own environment
//! variable), and TLS on the HTTP and gRPC listeners — all driven by real
//! clients (reqwest, tonic) over real loopback connections. Without tokens
//! or TLS, nothing changes.
//!
//! `harness` holds the tokens and the HTTP calls, `pki` a test CA and
//! tollgate over TLS; each other module is one concern.

#[path = "../support/mod.rs"]
mod support;

mod binary;
mod envoy;
mod harness;
mod pki;
mod tls;
mod tokens;
