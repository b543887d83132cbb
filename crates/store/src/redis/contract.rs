//! The Redis store's side of the store contract (crate::contract): its own
//! decisions on Redis's clock, blocks, the lease ledger and
//! administration. Each can fail; crate::Guarded puts the store behind a
//! breaker and the failure modes.

use std::future::Future;
use std::pin::Pin;

use tollgate_core::{Decision, Identity, PermitId, Policy, Released, Taken};

use super::RedisStore;
use super::script::{At, Item};
use crate::check::{self, Check};
use crate::contract::{Admin, Blocks, Ledger, Store, StoreStats};
use crate::error::StoreError;
use crate::lease::{LeaseAsk, LeaseGrant};
use crate::request_id::{Replay, RequestId, Retried, Retry};

/// A Redis call's future, boxed once where it leaves the store: redis-rs's
/// futures nest deep, and a caller's future that held one inline (a
/// guarded decision, the limiter's, a server's handler) grew with it until
/// the compiler needed a raised `recursion_limit` to lay it out. One
/// allocation a call, beside a network round trip; the memory store's
/// futures stay inline.
type Boxed<'s, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 's>>;

impl Store for RedisStore {
    fn decide<'s>(
        &'s self,
        check: Check<'_>,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        let item = self.item(&check);
        let boxed: Boxed<'s, Decision> = Box::pin(self.decide_one(item));
        boxed
    }

    fn known(&self, check: Check<'_>) -> Option<Decision> {
        self.known_rejection(&self.item(&check))
    }

    /// All-or-nothing. Checks of one identity share a hash tag, so in a
    /// Cluster too they are one script call: nothing is consumed unless
    /// every check admits, atomically. Checks spanning Cluster slots
    /// (different identities) cannot share a script; they are decided in
    /// two phases: every slot's verdict is taken (writing nothing), and
    /// only if all admit is each slot consumed, atomically within the slot,
    /// in slot order; otherwise each slot is decided again consuming
    /// nothing. Guaranteed: no policy ever admits beyond its limit, and a
    /// rejection seen in the first phase consumes nothing anywhere. Not
    /// guaranteed: if another instance consumes between the phases so
    /// that a later slot now rejects, the slots already consumed stay
    /// consumed (a refund could mint capacity that others were refused);
    /// the request is reported rejected.
    fn decide_all<'s>(
        &'s self,
        checks: &[Check<'_>],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        let mut items: Vec<Item> = checks.iter().map(|c| self.item(c)).collect();
        let never = check::never_fit_in_batch(checks);
        let boxed: Boxed<'s, Vec<Decision>> = Box::pin(async move {
            // One check is a plain decision: batched, and cached when rejected.
            if items.len() == 1
                && let Some(item) = items.pop()
            {
                return self.decide_one(item).await.map(|d| vec![d]);
            }
            self.shared.tag_all(&mut items);
            let mut decisions = self
                .all_or_nothing(&items, At::StoreClock, self.shared.margin_ms)
                .await?;
            check::mark_never_fits(&never, &mut decisions);
            Ok(decisions)
        });
        boxed
    }

    /// Under a request id: never answered from the rejected-until cache (a
    /// replay admits). One check is batched with other single checks under
    /// ids (`decide_each_once.lua`); several are one `decide_once.lua` call
    /// per slot (see `RedisStore::once_or_nothing`).
    fn decide_once<'s>(
        &'s self,
        checks: &[Check<'_>],
        retry: Retry<'_>,
    ) -> impl Future<Output = Result<Retried, StoreError>> + Send {
        let mut items = self.items_once(checks, &retry);
        let never = check::never_fit_in_batch(checks);
        let once = self.once(&items, retry);
        let boxed: Boxed<'s, Retried> = Box::pin(async move {
            let Some(once) = once else {
                return Ok(Retried {
                    decisions: Vec::new(),
                    replay: Replay::Fresh,
                });
            };
            if items.len() == 1
                && let Some(item) = items.pop()
            {
                return self.decide_one_once(item, once).await;
            }
            self.shared.tag_all(&mut items);
            let mut retried = self
                .once_or_nothing(&items, &once, At::StoreClock, self.shared.margin_ms)
                .await?;
            if retried.replay == Replay::Fresh {
                check::mark_never_fits(&never, &mut retried.decisions);
            }
            Ok(retried)
        });
        boxed
    }

    fn release<'s>(
        &'s self,
        policy: &Policy,
        identity: &Identity,
        permit: PermitId,
    ) -> impl Future<Output = Result<Released, StoreError>> + Send {
        let key = (policy.clone(), identity.clone());
        let boxed: Boxed<'s, Released> =
            Box::pin(async move { RedisStore::release(self, &key.0, &key.1, permit).await });
        boxed
    }
}

impl Blocks for RedisStore {
    async fn take(&self, check: Check<'_>) -> Result<(Decision, Taken), StoreError> {
        RedisStore::take(self, check).await
    }

    async fn give_back(&self, check: Check<'_>, taken: Taken) -> Result<u64, StoreError> {
        RedisStore::give_back(self, check, taken).await
    }

    /// Alone, always: trust is the breaker's to withdraw (crate::Guarded).
    fn trusted(&self) -> bool {
        true
    }
}

impl Ledger for RedisStore {
    async fn lease(&self, ask: &LeaseAsk<'_>) -> Result<Vec<LeaseGrant>, StoreError> {
        RedisStore::lease(self, ask).await
    }
}

impl Admin for RedisStore {
    async fn forget(&self, policy: &Policy, identity: &Identity) -> Result<bool, StoreError> {
        RedisStore::forget(self, policy, identity).await
    }

    async fn forget_request_id(
        &self,
        policy: &Policy,
        identity: &Identity,
        id: &RequestId,
    ) -> Result<(), StoreError> {
        RedisStore::forget_request_id(self, policy, identity, id).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        RedisStore::ping(self).await
    }

    /// Redis holds the keys; this process counts only its calls.
    fn stats(&self) -> StoreStats {
        StoreStats {
            answered_locally: self.answered_locally(),
            script_calls: self.script_calls(),
            ..StoreStats::default()
        }
    }

    /// Redis expires its own keys.
    fn sweep(&self) {}
}
