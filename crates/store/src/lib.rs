//! Where decisions are made atomically.
//!
//! Design notes:
//! - One store contract (contract.rs), the seam between the decision core
//!   and where state lives: [`Store`] (a store's own decisions, which can
//!   fail), [`Decide`] (a request's decisions, which never do: failure
//!   modes answer), [`Blocks`], [`Ledger`] and [`Admin`]. `Store` is folded
//!   in beside the other four rather than into `Decide` because a guard
//!   needs to see a failure that `Decide` has already answered for:
//!   [`Guarded`] is generic over any store of the contract (the memory
//!   store or Redis alike) and turns its `Store` into a `Decide`.
//! - A store owns its notion of time (the memory store an injected clock,
//!   Redis its own `TIME`), so callers never pass a clock around;
//!   [`AtClock`] is Redis deciding at a given clock, for replay.
//! - Every store makes each key's transition atomic, and decides several
//!   checks all-or-nothing: nothing is consumed unless every check admits.
//! - Every store is bounded: keys expire once idle, and there is a maximum.
//! - The modules form layers, each importing only those below it (the
//!   layout guard keeps them free of cycles): `check`, `request_id`, `error`, `lease`,
//!   `breaker`; `fallback` (the failure modes); `contract`; the stores (`memory`,
//!   `redis`, each implementing the contract beside itself); `guarded`.

#![deny(missing_docs)]

mod breaker;
mod check;
mod contract;
mod error;
mod fallback;
mod guarded;
mod lease;
mod memory;
mod permit;
#[cfg(feature = "redis")]
mod redis;
mod redis_config;
mod request_id;

#[cfg(feature = "redis")]
pub use self::redis::{
    AtClock, LIVE_REFRESH_MS, MAX_GIVEN_MS, MAX_INSTANCES_A_REGION, MAX_TAG, PrefixHolds,
    RedisStore, gcra_scale_tag, key_slot, ledger_epoch_key, ledger_key, lua_source, state_key,
};
pub use breaker::{Admission, BreakerConfig, CircuitBreaker, CircuitState};
pub use check::Check;
pub use contract::{Admin, Blocks, Decide, Ledger, Store, StoreStats};
pub use error::StoreError;
pub use fallback::{
    DecidedBy, Decisions, FAIL_CLOSED_RETRY_MS, GuardedCheck, GuardedDecisions, OnStoreFailure,
    local_policy,
};
pub use guarded::Guarded;
pub use lease::{LeaseAsk, LeaseGrant, LeaseLimit, LeaseWant, MAX_IDENTITIES_A_CALL};
pub use memory::{MemoryStore, MemoryStoreConfig};
pub use redis_config::{
    BatchConfig, NO_REDIS, RedisConfig, RedisConfigFault, SentinelConfig, redact_url,
};
pub use request_id::{
    DEFAULT_RETRY_IDS, DEFAULT_RETRY_WINDOW_MS, MAX_REPLAYS, MAX_REQUEST_ID_BYTES, RETRY_IDS_RANGE,
    RETRY_WINDOW_RANGE_MS, Replay, RequestDigest, RequestHasher, RequestId, RequestIdError,
    Retried, Retry,
};
