//! A tollgate config file to plans, for any door: `tollgate serve`'s HTTP
//! and gRPC doors, and a Rust service's own (a tower layer). Every door
//! reads the same file the same way, so a service and the server keyed by
//! one config spend one budget.
//!
//! Layers, each using only those above it:
//!
//! 1. **Small parsers** — `request_path` (a request target as every door
//!    normalizes it), `matching` (a policy's `match`), `failure_mode`
//!    (`on_store_failure`, shared with envoyproxy/ratelimit rules) and
//!    `fields` (how a fault names its field).
//! 2. **The schema** — `regions`, `stores`, `scope`, then `policy_fields`
//!    (a policy with its `match`, `identity` and `cost` from
//!    `request_shaping`, its request ids from `retry`), and what of the
//!    `server` section every door reads (`server_fields`: how a request is
//!    read, [`RequestSettings`]), read in order by `document` into a
//!    validated [`Config`]; `changes` says what one config changes of
//!    another's policies.
//! 3. **The rules every door applies** — `identity`: what a door read for
//!    each identity part, shaped and composed into the identity it keys by.
//! 4. **`live`** — each policy's limiter [`tollgate_limiter::Plan`], built
//!    once per load ([`plan_of`]) into [`LivePolicies`], looked up by name
//!    or by the request a policy matches.
//!
//! What it does not do: read a request (the HTTP contract's crate does,
//! with these rules), write a header, decide, or serve. The `server`
//! section is the server's but for what every door reads of it
//! (`identity_key_env`, `shadow_mode`, `trusted_proxies`, `max_key_bytes`,
//! `request_id_header`); this crate depends on no HTTP server, gRPC or TLS
//! crate.

#![deny(missing_docs)]

// 1. small parsers
mod failure_mode;
mod fields;
mod matching;
mod request_path;

// 2. the schema
mod changes;
mod document;
mod policy_fields;
mod regions;
mod request_shaping;
mod retry;
mod scope;
mod server_fields;
mod stores;

// 3. the rules every door applies
mod identity;

// 4. plans
mod live;

pub use changes::PolicyChanges;
pub use document::{Config, LoadError, check_identity_key, replace_store, top_level};
pub use failure_mode::{DEFAULT_LOCAL_SHARE_PERCENT, FieldFault, parse_failure_mode};
pub use fields::deserialize_at;
pub use identity::{
    ComposeFault, PartFault, RequestFault, Told, address, canonical_host, compose, shape_part,
};
pub use live::{LivePolicies, LivePolicy, PlanContext, plan_after, plan_of, policy_counters};
pub use matching::{FormatSuffix, Matcher, PathPattern, Respelling, TrailingSlash};
pub use policy_fields::{HotLeaseRule, ServePolicy};
pub use regions::{Deployment, REGION_ENV, Region};
pub use request_path::{PathFault, normalize};
pub use request_shaping::{ClientNetworks, CostRule, IdentityPart};
pub use retry::RetryRule;
pub use scope::{Leased, Scope};
pub use server_fields::{
    DEFAULT_IDENTITY_KEY_ENV, DEFAULT_MAX_KEY_BYTES, RequestSettings, ServerFields,
    request_id_header, trusted_proxies,
};
pub use stores::{Readiness, STORE_ROLES, StoreSettings, Stores};
