//! Asking a leased policy's ledger for a region's share (crates/store/lua/
//! lease.lua holds the rules; docs/config.md (Leased shares) states them for users).
//!
//! The ledger is one hash a policy in the global Redis, changed only by the
//! script on Redis's clock, so Redis is the coordinator and Sentinel or a
//! Cluster give it failover. This side only builds the call and reads the
//! answer; what the region does with a grant (spend it for a term measured
//! from when it asked, fall to its floor after) is the caller's.

use redis::Value;

use super::RedisStore;
use super::connection::from_redis;
use super::script::{SCRIPTS, invocation};
use crate::StoreError;

/// Instances of one region whose demand a ledger records; more are served
/// but not counted (the ledger's hash stays bounded).
pub const MAX_INSTANCES_A_REGION: u64 = 256;

/// One region's renewal: who asks, what it saw, and the policy's terms.
#[derive(Debug, Clone, Copy)]
pub struct LeaseAsk<'a> {
    /// The policy whose ledger this is.
    pub policy: &'a str,
    /// The asking region (letters, digits, '-', '_').
    pub region: &'a str,
    /// The asking instance, unique within its region.
    pub instance: &'a str,
    /// Units this instance was asked for in its last renewal period.
    pub demand: u64,
    /// Units above every region's floor: what the ledger can lease.
    pub spare: u64,
    /// How long a grant lasts.
    pub term_ms: u64,
    /// How long units a region lets go rest before another may lease them.
    pub rest_ms: u64,
}

/// Why a grant is what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseLimit {
    /// The whole target: the spare in proportion to demand.
    Target,
    /// Less: other regions hold (or rest) the rest of the spare.
    HeldByOthers,
    /// Nothing: the ledger is new (or came back empty) and waits out a
    /// term and a rest before it grants.
    NewLedger,
}

/// The ledger's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseGrant {
    /// Units the region may spend above its floor, for a term.
    pub units: u64,
    /// What its demand would have earned.
    pub target: u64,
    /// Why it is not more.
    pub limit: LeaseLimit,
    /// The ledger's clock when it granted (Redis TIME, ms).
    pub granted_at_ms: u64,
    /// The spare nobody holds after this grant: capacity no region's
    /// demand claimed (or that rests), stranded until one asks for it.
    pub unleased: u64,
}

/// The ledger's key for `policy`: one key, so one slot in a Cluster.
pub fn ledger_key(prefix: &str, policy: &str) -> String {
    format!("{prefix}:{policy}:lease")
}

impl RedisStore {
    /// Asks the ledger for `ask.region`'s share of `ask.policy` (one script
    /// call, bounded by the store's timeout). Not retried: a call that
    /// failed after the script ran has moved the ledger, and the next
    /// renewal asks again.
    pub async fn lease(&self, ask: &LeaseAsk<'_>) -> Result<LeaseGrant, StoreError> {
        let key = ledger_key(&self.shared.prefix, ask.policy);
        let reply = self
            .timed(async {
                self.shared
                    .connection
                    .evaluate(|by| {
                        let mut cmd = invocation(&SCRIPTS.lease, by);
                        cmd.arg(1)
                            .arg(&key)
                            .arg(ask.region)
                            .arg(ask.instance)
                            .arg(ask.demand)
                            .arg(ask.spare)
                            .arg(ask.term_ms)
                            .arg(ask.rest_ms)
                            .arg(MAX_INSTANCES_A_REGION);
                        Ok(cmd)
                    })
                    .await?
                    .map_err(from_redis)
            })
            .await?;
        grant(&reply)
    }
}

fn grant(reply: &Value) -> Result<LeaseGrant, StoreError> {
    let bad = || StoreError::Protocol(format!("a lease ledger answered {reply:?}"));
    let Value::Array(items) = reply else {
        return Err(bad());
    };
    let numbers: Vec<u64> = items
        .iter()
        .map(|v| match v {
            Value::Int(n) => u64::try_from(*n).ok(),
            _ => None,
        })
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    let [units, target, why, granted_at_ms, unleased] = numbers[..] else {
        return Err(bad());
    };
    let limit = match why {
        0 => LeaseLimit::Target,
        1 => LeaseLimit::HeldByOthers,
        2 => LeaseLimit::NewLedger,
        _ => return Err(bad()),
    };
    Ok(LeaseGrant {
        units,
        target,
        limit,
        granted_at_ms,
        unleased,
    })
}
