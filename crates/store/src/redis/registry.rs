//! gcra scales registered and resolved on Redis, through a connection
//! (the cache, and the registry's commands and answers: scales.rs).

use std::sync::Arc;

use super::connection::Connection;
use super::errors::from_redis;
use super::scales::{Scale, Scales, parse_registry, registration_by, registry_key, tag_of};
use crate::error::StoreError;

impl Scales {
    /// The tag to write `policy`'s `scale` with now, never waiting on
    /// Redis: the cached tag (`None`: none yet, or none to have; a text
    /// state says its scale itself). When the scale is not cached, or due
    /// to be registered again, a registration starts in the background, so
    /// a decision never pays a registry round trip.
    pub fn tag_now(
        self: &Arc<Self>,
        connection: &Connection,
        prefix: &str,
        policy: &Arc<str>,
        scale: Scale,
        margin_ms: u64,
    ) -> Option<u16> {
        let tag = match self.cached_or_due(policy, scale) {
            Ok(tag) => return tag,
            Err(tag) => tag,
        };
        let (scales, connection, prefix, policy) = (
            Arc::clone(self),
            connection.clone(),
            prefix.to_owned(),
            Arc::clone(policy),
        );
        tokio::spawn(async move {
            let registered = register(&connection, &prefix, &policy, scale, margin_ms).await;
            scales.settle(&policy, scale, registered);
        });
        tag
    }

    /// Registers `policy`'s `scale` now (see [`super::RedisStore::prepare`]).
    pub async fn register_now(
        &self,
        connection: &Connection,
        prefix: &str,
        policy: &Arc<str>,
        scale: Scale,
        margin_ms: u64,
    ) -> Result<Option<u16>, StoreError> {
        let registered = register(connection, prefix, policy, scale, margin_ms).await;
        let failed = registered.as_ref().err().cloned();
        let tag = self.settle(policy, scale, registered);
        failed.map_or(Ok(tag), Err)
    }

    /// The scale `policy` tagged `tag`, from the registry when not cached;
    /// `[0, 0, 0]` (an empty bucket) when the registry no longer knows it.
    pub async fn resolve(
        &self,
        connection: &Connection,
        prefix: &str,
        policy: &Arc<str>,
        tag: u16,
    ) -> Result<Scale, StoreError> {
        if let Some(scale) = self.known_scale(policy, tag) {
            return Ok(scale);
        }
        let entries = connection
            .query(redis::cmd("HGETALL").arg(registry_key(prefix, policy)))
            .await
            .map_err(from_redis)?;
        let mut found = [0; 3];
        for (text, entry_tag) in parse_registry(&entries)? {
            if entry_tag == tag {
                found = text;
            }
            self.remember(policy, entry_tag, text);
        }
        if found == [0; 3] {
            tracing::warn!(
                policy = %policy,
                tag,
                "a gcra state names a scale its registry has lost; it is read as an empty bucket"
            );
        }
        Ok(found)
    }
}

async fn register(
    connection: &Connection,
    prefix: &str,
    policy: &str,
    scale: Scale,
    margin_ms: u64,
) -> Result<Option<u16>, StoreError> {
    let reply = connection
        .evaluate(|by| Ok(registration_by(prefix, policy, scale, margin_ms, by)))
        .await?
        .map_err(from_redis)?;
    tag_of(reply)
}
