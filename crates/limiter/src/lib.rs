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
//! - **Time is injected**: one [`tollgate_core::Clock`] tells the wall
//!   time decisions are dated by and the monotonic time lease terms and
//!   latencies run on. Nothing here reads a system clock.
//! - No HTTP, gRPC or YAML: those are the server's doors.
//!
//! A service deciding in process, on the embedded store:
//!
//! ```
//! use std::sync::Arc;
//!
//! use prometheus_client::registry::Registry;
//! use tollgate_core::{Clock, Identity, Limits, Policy, Rate, SystemClock};
//! use tollgate_limiter::{Backend, Check, Limiter, LimiterMetrics, Plan};
//! use tollgate_store::OnStoreFailure;
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

#![deny(missing_docs)]
mod across;
mod backend;
mod blocks;
mod carry;
mod decision_log;
mod hot;
mod hot_lease;
mod lease;
mod limiter;
mod metrics;
mod plan;
mod refund;
mod sampled_log;
mod stores;
mod trace;
mod upkeep;

pub use backend::Backend;
pub use blocks::GIVE_BACK_INTERVAL_MS;
pub use decision_log::LOG_INTERVAL_MS;
pub use hot::{HOT_IDENTITIES, HOT_WINDOW_MS, HotIdentities, HotReport, PolicyHot};
pub use hot_lease::{HotLeaseRule, HotLeases, MAX_BLOCKS, MAX_UNSPENT, REFUSED_FLOOR_MS, Unspent};
pub use lease::{DEFAULT_MAX_IDENTITIES, Lease, Leased, Wanting, instance_id, share_of};
pub use limiter::{Decided, Limiter};
pub use metrics::{
    DecisionLabels, DegradedLabels, HotSeries, LeaseCounters, LeaseLabels, LeaseOutcomeLabels,
    LimiterMetrics, PolicyCounters, PolicyLabels,
};
pub use plan::{Check, Plan, RetryRule};
pub use sampled_log::{DECISION_TARGET, DecisionSampling};
pub use stores::{StoreHealth, StoreLabels, StoreName, StoreSeries};
pub use trace::TraceSink;
