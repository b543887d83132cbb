//! tollgate's decision core: pure, exact, and small.
//!
//! Design notes:
//! - Everything is an integer. Time is whole milliseconds; a token bucket
//!   counts in a per-policy fixed-point scale (docs/design.md §3) so refill is
//!   exact and no fraction is ever lost between calls.
//! - Nothing here reads a clock or does I/O. Time arrives as an argument
//!   (or through a [`Clock`] at the edges), so every store and every test
//!   can replay a trace at chosen instants and get the same decisions.
//! - State transitions are functions of (limits, state, now, cost). Stores
//!   supply atomicity around them; the Redis scripts are their twins.
//! - An algorithm is a [`Limits`] variant, and what callers ask of any
//!   algorithm's parameters (the limit, its span, the time to forget a
//!   use, a share of it) are `Limits` methods, so the places a new
//!   algorithm touches are few and listed (docs/design.md §2).

#![deny(missing_docs)]

mod algorithm;
mod clock;
mod config;
mod decision;
mod duration;
mod identity;
mod permit;
mod policy;
mod quote;
mod split;

pub use algorithm::{
    BucketState, GcraState, Held, Intent, LOG_EXACT_ENTRIES, LOG_MAX_ENTRIES, LogState,
    PermitState, Released, SlidingCount, State, Taken, WindowCount, log_bucket_ms,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{
    ConfigError, EXACT_LIMIT, MAX_LEASE_MS, MAX_LOG_LIMIT, MAX_PERMITS, MAX_POLICY_NAME, NodePath,
    PolicySet, Step, describe, did_you_mean, limits_fields, parse_policy, parse_yaml,
    parse_yaml_named, snippet_at, unknown_field,
};
pub use decision::Decision;
pub use duration::{DurationError, format_duration_ms, parse_duration_ms};
pub use identity::{Identity, IdentityError, LABEL_MAX_BYTES, SecretHasher};
pub use permit::{PermitId, PermitIdError};
pub use policy::{Algorithm, Limits, Permits, Policy, Rate, Window};
pub use quote::{QUOTE_MAX_BYTES, escape, quote, quote_bytes, without_controls};
pub use split::{split_policy, split_shares};
