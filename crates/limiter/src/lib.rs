//! tollgate's limiter as a library: a Rust service, the tollgate server
//! and every door it serves build [`Check`]s from [`Plan`]s and hand them
//! to one [`Limiter`].
//!
//! Design notes:
//! - **One plan per limit**, built once per config load: the policy, its
//!   store, failure mode, local share, lease, shards, hot lease, request
//!   ids and metric handles. A check is a plan, an identity and a cost, so
//!   a policy is one budget whichever door asks.
//! - **The stores are driven through their contract** (tollgate-store's
//!   `Decide`, `Blocks`, `Ledger`, `Admin`): the limiter adds scope
//!   (which store), leases, shards, hot leases and the metrics; the store
//!   adds atomicity, the breaker and the failure modes.
//! - **A plan without a failure mode never fails open**: when its store
//!   cannot decide, a request it enforces comes back with no decisions
//!   (the store's error said), for its door to answer an error.
//! - **[`Decider`] is what a door needs**: the decision trait above
//!   `Limiter`, which a remote tollgate's client implements too, so a
//!   door takes either.
//! - **One path of records, two ways in**: a request is awaited through
//!   the stores' futures ([`Limiter::decide_request`]), or, when it is
//!   plain and on the memory store, decided at once with no future
//!   ([`Limiter::decide_now`]); both record a decision the same way
//!   (crate::recorded: counters, store metrics, latency, sampled log,
//!   capture).
//! - **Upkeep runs itself**: [`Limiter::upkeep`] sweeps idle keys, gives
//!   back unspent hot-lease blocks and renews leases for the plans a
//!   caller hands it (re-read each turn, so a reload's are kept), until
//!   its [`UpkeepHandle`] is dropped.
//! - **Time is injected**: one [`tollgate_core::Clock`] tells the wall
//!   time decisions are dated by and the monotonic time lease terms and
//!   latencies run on. Nothing here reads a system clock.
//! - **The one crate a caller needs**: what a check is made of (the
//!   core's policies, identities, clocks) and what a store answers or
//!   needs to be built (results, errors, failure modes, request ids,
//!   store configs) are re-exported at this crate's root.
//! - No HTTP, gRPC or YAML: tollgate-config reads the YAML into plans,
//!   tollgate-http writes the HTTP contract, the doors speak their
//!   protocols. Redis sits behind the `redis` feature (on by default):
//!   without it the limiter is memory-only and compiles no redis or TLS
//!   crate.
//!
//! A service deciding in process, on the embedded store:
//!
//! ```
//! use std::sync::Arc;
//!
//! use tollgate_limiter::{
//!     Backend, Check, Clock, Identity, Limiter, LimiterMetrics, Limits, OnStoreFailure, Plan,
//!     Policy, Rate, Registry, SystemClock,
//! };
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let clock: Arc<dyn Clock> = Arc::new(SystemClock);
//! let mut registry = Registry::with_prefix("tollgate");
//! let metrics = Arc::new(LimiterMetrics::register(&mut registry, Arc::clone(&clock)));
//! let limiter = Limiter::new(vec![Backend::memory(100_000, Arc::clone(&clock))], metrics, clock);
//!
//! // Built once: 20 a burst, 5 a second, on store 0.
//! let write_api = Policy::new("write-api", Limits::TokenBucket(Rate::new(20, 5, 1_000).unwrap()));
//! let plan = Plan::new(write_api, 0).with_failure_mode(OnStoreFailure::FailClosed);
//!
//! let acme = Identity::value("acme");
//! let decided = limiter.decide(&[Check::new(&plan, &acme, 2)]).await;
//! assert!(decided.decisions[0].allowed);
//! assert_eq!(decided.decisions[0].remaining, 18);
//! # });
//! ```
//!
//! The memory backend is given the limiter's own clock (the same `Arc`):
//! a request decided at once then reads it twice, once to date and start
//! timing it (the store is handed that reading) and once to end the
//! timing. A store on a clock of its own reads it again itself.

#![deny(missing_docs)]
mod across;
mod backend;
mod blocks;
mod carry;
mod decider;
mod decision_log;
mod hot;
mod hot_lease;
mod latency;
mod lease;
mod limiter;
mod metrics;
mod now;
mod permits;
mod plan;
mod recorded;
mod refund;
mod release;
mod sampled_log;
mod shadow;
mod spans;
mod stores;
mod trace;
mod upkeep;

pub use backend::Backend;
pub use blocks::GIVE_BACK_INTERVAL_MS;
pub use decider::Decider;
pub use decision_log::LOG_INTERVAL_MS;
pub use hot::{HOT_IDENTITIES, HOT_WINDOW_MS, HotIdentities, HotReport, PolicyHot};
pub use hot_lease::{HotLeaseRule, HotLeases, MAX_BLOCKS, MAX_UNSPENT, REFUSED_FLOOR_MS, Unspent};
pub use latency::LatencyHistogram;
pub use lease::{DEFAULT_MAX_IDENTITIES, Lease, Leased, Wanting, instance_id, share_of};
pub use limiter::{Decided, Limiter};
pub use metrics::{
    DecisionLabels, DegradedCounters, DegradedLabels, HotSeries, LeaseCounters, LeaseLabels,
    LeaseOutcomeLabels, LimiterMetrics, PolicyCounters, PolicyLabels, PolicyPathLabels,
};
pub use permits::MAX_TRACKED as MAX_TRACKED_PERMITS;
pub use plan::{Check, Plan, RetryRule};
pub use release::ReleaseError;
pub use sampled_log::{DECISION_TARGET, DecisionSampling, SHADOW_ALLOWED, SHADOW_REJECTED};
pub use shadow::{shadow_looked, would_allow};
pub use spans::{SPANS, set_spans, spans_on};
pub use stores::{StoreHealth, StoreLabels, StoreName, StoreReading, StoreSeries};
pub use trace::TraceSink;
pub use upkeep::{KeptPlans, SWEEP_INTERVAL_MS, UpkeepHandle};

/// Where the limiter's series are registered (the registry a service
/// already exposes, or its own).
pub use prometheus_client::registry::Registry;

// What a caller needs of the stores — results, errors, failure modes,
// request ids and what builds a backend — so a service or a door depends
// on this crate alone.
// A Redis store's settings parse in every build (a memory-only one
// refuses them, naming the feature); the store itself needs `redis`.
#[cfg(feature = "redis")]
pub use tollgate_store::RedisStore;
pub use tollgate_store::{BatchConfig, NO_REDIS, RedisConfig, RedisConfigFault, SentinelConfig};
pub use tollgate_store::{
    DEFAULT_RETRY_IDS, DEFAULT_RETRY_WINDOW_MS, DecidedBy, Decisions, FAIL_CLOSED_RETRY_MS,
    MAX_REPLAYS, MAX_REQUEST_ID_BYTES, MemoryStoreConfig, OnStoreFailure, RETRY_IDS_RANGE,
    RETRY_WINDOW_RANGE_MS, Replay, RequestId, RequestIdError, StoreError,
};
// What a check is made of and what it answers, so a caller's plans and
// checks need no other import.
pub use tollgate_core::{
    Clock, Decision, Identity, Limits, ManualClock, PermitId, Permits, Policy, Rate, SystemClock,
    Window,
};
