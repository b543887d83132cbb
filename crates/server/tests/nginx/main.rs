//! A real nginx in front of a small upstream, asking a real `tollgate serve`
//! through `auth_request`. What runs is examples/nginx.conf (with free ports
//! in place of its three addresses) and examples/nginx-tollgate.yaml, so the
//! examples are what these tests hold to the 429 contract of docs/design.md §8.
//!
//! `harness` starts the stack; each other module is one concern
//! (`access_log`: nginx's own access logs made traces and replayed).

#[path = "../support/proxy_stack.rs"]
mod proxy_stack;
#[path = "../support/mod.rs"]
mod support;

mod access_log;
mod bypass;
mod client_bytes;
mod connections;
mod contract;
mod fail_closed;
mod harness;
mod operators;
mod shipped;
