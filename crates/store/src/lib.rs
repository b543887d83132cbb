//! Where decisions are made atomically.
//!
//! Design notes:
//! - [`Store`] is the one seam between the decision core and where state
//!   lives. A store owns its notion of time (the memory store an injected
//!   clock, Redis its own `TIME`), so callers never pass a clock around.
//! - Every store makes each key's transition atomic, and decides several
//!   checks all-or-nothing: nothing is consumed unless every check admits.
//! - Every store is bounded: keys expire once idle, and there is a maximum.

#![deny(missing_docs)]
// The Redis store's nested futures (replay's decisions at a given clock)
// need a deeper layout query.
#![recursion_limit = "256"]

mod breaker;
mod check;
mod contract;
mod error;
mod fallback;
mod memory;
mod redis;
mod request_id;

pub use self::redis::{
    BatchConfig, LIVE_REFRESH_MS, LeaseAsk, LeaseGrant, LeaseLimit, LeaseWant, MAX_GIVEN_MS,
    MAX_IDENTITIES_A_CALL, MAX_INSTANCES_A_REGION, MAX_TAG, PrefixHolds, RedisConfig,
    RedisConfigFault, RedisStore, SentinelConfig, gcra_scale_tag, key_slot, ledger_epoch_key,
    ledger_key, lua_source, redact_url, state_key,
};
pub use breaker::{Admission, BreakerConfig, CircuitBreaker, CircuitState};
pub use check::{Check, Store};
pub use contract::{Admin, AtClock, Blocks, Decide, Ledger, StoreStats};
pub use error::StoreError;
pub use fallback::{
    DecidedBy, FAIL_CLOSED_RETRY_MS, Guarded, GuardedCheck, GuardedDecisions, OnStoreFailure,
    local_policy,
};
pub use memory::{MemoryStore, MemoryStoreConfig};
pub use request_id::{
    DEFAULT_RETRY_IDS, DEFAULT_RETRY_WINDOW_MS, MAX_REPLAYS, MAX_REQUEST_ID_BYTES, RETRY_IDS_RANGE,
    RETRY_WINDOW_RANGE_MS, Replay, RequestDigest, RequestHasher, RequestId, RequestIdError,
    Retried, Retry,
};
