//! tollgate as a tower layer: exact rate limits on any tower `Service`
//! over `http` types (axum, hyper, tonic), decided by the same limiter as
//! `tollgate serve` — in process on the embedded store or Redis, or by a
//! remote tollgate through [`RemoteTollgate`] — and answered with the
//! server's contract (tollgate-http): the RateLimit fields on an
//! admission, the 429 problem+json with `Retry-After` on a rejection.
//!
//! Rules come from the config file `tollgate serve` reads ([`Configured`],
//! [`rules_of`]) or from code ([`Rule`], closures over the request's head).
//!
//! The flow: request → each [`Rule`]'s identity and cost → one
//! all-or-nothing [`Decider::decide`](tollgate_limiter::Decider) → the
//! inner service, or the rejection. A concurrency policy's permit is held
//! by the response's body ([`LayerBody`]) and released when it ends
//! or is dropped.

#![deny(missing_docs)]

mod configured;
mod layer;
mod permit;
mod remote;
mod response;
mod rule;

pub use configured::{ConfigError, Configured, Reloaded, rules_of};
pub use layer::{RateLimit, RateLimitLayer};
pub use permit::{HeldPermits, LayerBody, MAX_PENDING_RELEASES, PermitBody};
pub use remote::{RemoteConfig, RemoteError, RemoteTollgate};
pub use response::ResponseFuture;
pub use rule::{Applies, Rule};
