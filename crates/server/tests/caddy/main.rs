//! A real Caddy in front of a small upstream, asking a real `tollgate serve`
//! before every request (forward auth). What runs is examples/Caddyfile as
//! it is (free ports in its three environment variables) and
//! examples/caddy-tollgate.yaml, so the examples are what these tests hold
//! to the 429 contract of docs/design.md §8.
//!
//! `harness` starts the stack; each other module is one concern.

#[path = "../support/proxy_stack.rs"]
mod proxy_stack;
#[path = "../support/mod.rs"]
mod support;

mod bypass;
mod contract;
mod fail_closed;
mod harness;
mod shipped;
