//! Asking the ledger of a leased policy for a region's share of each of its
//! identities (crates/store/lua/lease.lua holds the rules; docs/config.md
//! (Leased shares) states them for users).
//!
//! The ledger is one hash per (policy, identity) in the global Redis, plus
//! one epoch key, all on one hash tag: one script call carries every
//! identity an instance renews, on one node of a Cluster. Only the script
//! changes them, on Redis's clock, so Redis is the coordinator and Sentinel
//! or a Cluster give it failover. This side only builds the call and reads
//! the answer; what the region does with a grant (spend it for a term
//! measured from when it asked, fall to its floor after) is the caller's.

use redis::Value;
use tollgate_core::Identity;

use super::RedisStore;
use super::errors::from_redis;
use super::key::push_tag;
use super::script::{SCRIPTS, invocation};
use crate::StoreError;
use crate::lease::{LeaseAsk, LeaseGrant, LeaseLimit, MAX_IDENTITIES_A_CALL};

/// Instances of one region whose demand a ledger entry records; more are
/// served but not counted (each entry's hash stays bounded).
pub const MAX_INSTANCES_A_REGION: u64 = 256;

/// The hash tag every ledger key shares: one Cluster slot holds the ledger.
const LEDGER_TAG: &str = "{tollgate-lease}";

/// The ledger entry of `policy` for `identity`:
/// `<prefix>:lease:{tollgate-lease}:<policy>:<identity's tag>`.
pub fn ledger_key(prefix: &str, policy: &str, identity: &Identity) -> Vec<u8> {
    let mut key = ledger_epoch_key(prefix).into_bytes();
    key.push(b':');
    key.extend_from_slice(policy.as_bytes());
    key.push(b':');
    push_tag(&mut key, identity.as_bytes());
    key
}

/// The ledger's epoch: when it was made, outliving every entry.
pub fn ledger_epoch_key(prefix: &str) -> String {
    format!("{prefix}:lease:{LEDGER_TAG}")
}

impl RedisStore {
    /// Asks the ledger for `ask.region`'s share of each identity in
    /// `ask.wants` (one script call, bounded by the store's timeout); the
    /// grants in `wants`' order. Not retried: a call that failed after the
    /// script ran has moved the ledger, and the next renewal asks again.
    pub async fn lease(&self, ask: &LeaseAsk<'_>) -> Result<Vec<LeaseGrant>, StoreError> {
        if ask.wants.len() > MAX_IDENTITIES_A_CALL {
            return Err(StoreError::Config(format!(
                "a lease renewal carries at most {MAX_IDENTITIES_A_CALL} identities, got {}",
                ask.wants.len()
            )));
        }
        if ask.wants.is_empty() {
            return Ok(Vec::new());
        }
        let prefix = &self.shared.prefix;
        let keys: Vec<Vec<u8>> = ask
            .wants
            .iter()
            .map(|w| ledger_key(prefix, ask.policy, w.identity))
            .collect();
        let epoch = ledger_epoch_key(prefix);
        let reply = self
            .timed(async {
                self.shared
                    .connection
                    .evaluate(|by| {
                        let mut cmd = invocation(&SCRIPTS.lease, by);
                        cmd.arg(1 + keys.len()).arg(&epoch);
                        for key in &keys {
                            cmd.arg(key.as_slice());
                        }
                        cmd.arg(ask.region)
                            .arg(ask.instance)
                            .arg(ask.spare)
                            .arg(ask.term_ms)
                            .arg(ask.rest_ms)
                            .arg(MAX_INSTANCES_A_REGION);
                        for want in ask.wants {
                            cmd.arg(want.demand);
                        }
                        Ok(cmd)
                    })
                    .await?
                    .map_err(from_redis)
            })
            .await?;
        grants(&reply, ask.wants.len())
    }
}

fn grants(reply: &Value, count: usize) -> Result<Vec<LeaseGrant>, StoreError> {
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
    let Some((&granted_at_ms, each)) = numbers.split_first() else {
        return Err(bad());
    };
    if each.len() != 4 * count {
        return Err(bad());
    }
    each.chunks_exact(4)
        .map(|g| {
            let limit = match g[2] {
                0 => LeaseLimit::Target,
                1 => LeaseLimit::HeldByOthers,
                2 => LeaseLimit::NewLedger,
                _ => return Err(bad()),
            };
            Ok(LeaseGrant {
                units: g[0],
                target: g[1],
                limit,
                granted_at_ms,
                unleased: g[3],
            })
        })
        .collect()
}
