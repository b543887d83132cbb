//! Releasing a permit on Redis: one script call (crates/store/lua/
//! release.lua) on the key's own slot, on Redis's clock.

use redis::Value;
use tollgate_core::{Identity, PermitId, Policy, Released};

use super::RedisStore;
use super::errors::from_redis;
use super::script::{At, MAX_GIVEN_MS, SCRIPTS, invocation};
use crate::StoreError;

impl RedisStore {
    /// Frees `permit` of `policy`'s state for `identity` if it is held now
    /// (on Redis's clock): what the release found.
    pub async fn release(
        &self,
        policy: &Policy,
        identity: &Identity,
        permit: PermitId,
    ) -> Result<Released, StoreError> {
        self.release_with(policy, identity, permit, At::StoreClock)
            .await
    }

    /// [`RedisStore::release`] at `now_ms` instead of Redis's clock.
    pub async fn release_at(
        &self,
        policy: &Policy,
        identity: &Identity,
        permit: PermitId,
        now_ms: u64,
    ) -> Result<Released, StoreError> {
        self.release_with(policy, identity, permit, At::Ms(now_ms))
            .await
    }

    async fn release_with(
        &self,
        policy: &Policy,
        identity: &Identity,
        permit: PermitId,
        at: At,
    ) -> Result<Released, StoreError> {
        let key = self.key(policy, identity);
        let now = match at {
            At::StoreClock => String::new(),
            At::Ms(ms) if ms < MAX_GIVEN_MS => ms.to_string(),
            At::Ms(ms) => {
                return Err(StoreError::Protocol(format!(
                    "time {ms} ms is beyond what the Redis scripts decide exactly (2^52 ms)"
                )));
            }
        };
        let margin_ms = match at {
            At::StoreClock => self.shared.margin_ms,
            At::Ms(_) => self.given_margin(),
        };
        let reply = self
            .timed(async {
                self.shared
                    .connection
                    .evaluate(|by| {
                        let mut cmd = invocation(&SCRIPTS.release, by);
                        cmd.arg(1)
                            .arg(key.as_slice())
                            .arg(&now)
                            .arg(margin_ms)
                            .arg(permit.to_string());
                        Ok(cmd)
                    })
                    .await?
                    .map_err(from_redis)
            })
            .await?;
        let found = match &reply {
            Value::Array(v) => match v.as_slice() {
                [Value::Int(found)] => *found,
                _ => -1,
            },
            _ => -1,
        };
        match found {
            1 => Ok(Released::Freed),
            2 => Ok(Released::Expired),
            0 => Ok(Released::Unknown),
            _ => Err(StoreError::Protocol(format!(
                "a release answered {reply:?}"
            ))),
        }
    }
}
