//! tollgate's HTTP contract, shared by every HTTP door: the server's
//! `/v1/check` and `/v1/authorize`, and a tower layer in a service. A
//! client sees one contract whichever door decided, so it is written once,
//! here, over the `http` crate's types (`HeaderMap`, `Response`) and
//! plain strings: no server framework, so axum, hyper and tonic users
//! convert at their edge, and a door cannot drift from another.
//!
//! - **Rejection** (`response`): the 429 problem+json (RFC 9457) naming the
//!   violated policies, `Retry-After` rounded up, `Cache-Control: no-store`;
//!   [`Problem`] for every other refusal.
//! - **Admission** (`response`, `ratelimit_fields`): the RateLimit fields
//!   (one writer, also for Envoy's RLS, which hands Envoy the strings) and
//!   the `Tollgate-Degraded` / `Tollgate-Replayed` marks.
//! - **`/v1/check`** (`check_body`, `check_decision`): the request and the
//!   answer, one serde schema each, read and written by the server and a
//!   client alike (the server's bytes are the derive's); `check_fault`
//!   names why a body was refused, in tollgate's words, not serde's.
//! - **The answer to a decided request** (`answer`): admit with these
//!   fields, or the denial; forward auth and the tower layer both use it.
//!   A client's request id from a header (`request_id`).
//! - **gRPC callers** (`grpc`): an answer of tollgate's own to a gRPC call
//!   as a gRPC status (`RESOURCE_EXHAUSTED` for a rejection), the fields
//!   kept as metadata, since a gRPC client reads any body as frames.
//! - **Keys** (`key`): the identity a client names by key, bounded.
//! - **Requests** (`request`, `peer`, `forward_auth`): a request as a
//!   proxy describes it ([`Forwarded::read`], believed only from a trusted
//!   proxy) or as a service receives it ([`Forwarded::own`]), the client's
//!   address behind trusted proxies, and a policy's match, identity and
//!   cost from it ([`policy_check`]) by `tollgate-config`'s rules.
//!
//! **Features.** Those requests and the answer to a decided one are the
//! `request` feature, off by default: reading a request by a config's
//! rules and answering it from the limiter's decisions take the config
//! crate and the limiter, and with them the stores a config names, Redis
//! and TLS among them.
//! A client of `/v1/check` alone (the wire types, the RateLimit fields, a
//! rejection's reading) depends on this crate as it comes and compiles
//! none of that (tollgate-testkit's `tests/dependency_trees.rs` holds it
//! to that); a door asks for `request`: the server, and `tollgate-tower`, whose config-driven layer
//! reads requests as the server does (its remote client needs only the
//! wire types, but the crate also opens the file's stores).

#![deny(missing_docs)]

#[cfg(feature = "request")]
mod answer;
mod check_body;
mod check_decision;
mod check_fault;
mod forward_auth;
mod grpc;
mod key;
mod peer;
mod policy_value;
mod ratelimit_fields;
#[cfg(feature = "request")]
mod request;
#[cfg(feature = "request")]
mod request_id;
mod response;

#[cfg(feature = "request")]
pub use answer::{Admission, Answer, Matched, answer};
pub use check_body::{CheckBody, CheckItem, CheckKey, Object, Text, parse_check_body};
pub use check_decision::{
    BatchDecision, CheckDecision, ReleaseAnswer, ReleaseBody, parse_release_body,
};
pub use check_fault::diagnose_check_body;
pub use forward_auth::ForwardAuth;
pub use grpc::{GRPC_MESSAGE, GRPC_STATUS, grpc_answer, grpc_code, is_grpc};
pub use key::{parts_identity, value_identity};
pub use peer::{Peer, is_trusted};
pub use policy_value::{MAX_STATIC_POLICY_VALUES, policy_value};
pub use ratelimit_fields::{
    RateLimitFields, policy_item, ratelimit_draft, ratelimit_fields, retry_after_seconds,
};
#[cfg(feature = "request")]
pub use request::{
    Forwarded, RequestFault, client_ip, cost_of, identity_of, policy_check, single_header,
};
#[cfg(feature = "request")]
pub use request_id::{request_id_from_header, request_id_mismatch};
pub use response::{
    DEGRADED_HEADER, PROBLEM_HEADER, PROBLEM_HEADER_MAX_BYTES, Problem, QUOTA_EXCEEDED,
    REPLAYED_HEADER, Rejection, degraded_header, problem_header, ratelimit_headers, rejection,
    replayed_header,
};
