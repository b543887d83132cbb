//! Request ids in the memory store (crate::request_id): the ids recorded
//! with a key as a call's first check, in the key's shard, looked up and
//! recorded under the same locks as the decision.

use std::collections::VecDeque;
use std::sync::Arc;

use tollgate_core::Algorithm;

use super::{MemoryStore, Now, Table, table_for};
use crate::permit;
use crate::request_id::{self, MAX_REPLAYS, Replay, RequestDigest, RequestId, Retried, Retry};
use crate::{Check, StoreError};

/// The request ids recorded with one key as a call's first check.
pub(super) struct Records {
    pub(super) hash: u64,
    policy: Arc<str>,
    algorithm: Algorithm,
    identity: Box<[u8]>,
    /// Oldest first.
    pub(super) ids: VecDeque<Recorded>,
}

pub(super) struct Recorded {
    id: RequestId,
    /// The whole request it admitted: only the same request replays it.
    request: RequestDigest,
    pub(super) until_ms: u64,
    /// The times it answered; at [`MAX_REPLAYS`] it answers no more.
    replays: u32,
}

impl Records {
    pub(super) fn is(&self, hash: u64, check: &Check<'_>) -> bool {
        self.hash == hash
            && self.algorithm == check.policy.algorithm()
            && *self.policy == *check.policy.name()
            && *self.identity == *check.identity.as_bytes()
    }

    /// The record of `id`, while it lives.
    pub(super) fn live(&mut self, id: &RequestId, now: u64) -> Option<&mut Recorded> {
        self.ids
            .iter_mut()
            .find(|r| r.until_ms > now && r.id == *id)
    }

    /// Drops expired ids; returns how many.
    pub(super) fn drop_expired(&mut self, now: u64) -> usize {
        let before = self.ids.len();
        self.ids.retain(|r| r.until_ms > now);
        before - self.ids.len()
    }
}

impl MemoryStore {
    /// Forgets request id `id` recorded with `policy`'s state of
    /// `identity` (a refund of the work it admitted: its retry is charged
    /// again). Nothing when it is not recorded there.
    pub fn forget_request_id(
        &self,
        policy: &tollgate_core::Policy,
        identity: &tollgate_core::Identity,
        id: &RequestId,
    ) {
        let check = Check {
            policy,
            identity,
            cost: 0,
        };
        let hash = self.hash(&check);
        let mut table = self.shard(hash).0.lock();
        let Ok(mut entry) = table.records.find_entry(hash, |r| r.is(hash, &check)) else {
            return;
        };
        let records = entry.get_mut();
        let before = records.ids.len();
        records.ids.retain(|r| r.id != *id);
        let gone = before - records.ids.len();
        if records.ids.is_empty() {
            entry.remove();
        }
        table.ids -= gone;
    }

    /// Decides every check all-or-nothing under a request id, now. See
    /// [`Store::decide_once`](crate::Store::decide_once): the id is looked up and recorded with the
    /// first check's key under the same locks as the decision.
    /// [`StoreError::Full`] when a new key finds no room: nothing is written.
    pub fn decide_once_now(
        &self,
        checks: &[Check<'_>],
        retry: Retry<'_>,
    ) -> Result<Retried, StoreError> {
        let Some(first) = checks.first() else {
            return Ok(Retried {
                decisions: Vec::new(),
                replay: Replay::Fresh,
            });
        };
        let now = self.now();
        let hashes: Vec<u64> = checks.iter().map(|c| self.hash(c)).collect();
        let permits = permit::name_all(checks, &retry);
        let mut guards = self.lock(&hashes);
        let hash = hashes[0];
        // A record of this request answers (and counts) a replay until its
        // replays are used up; then the request is decided as a new one.
        let recorded = table_for(&mut guards, self.shard_index(hash))
            .records
            .find_mut(hash, |r| r.is(hash, first))
            .and_then(|r| r.live(retry.id, now.wall))
            .filter(|r| r.request != retry.request || r.replays < MAX_REPLAYS)
            .map(|r| {
                r.replays += u32::from(r.request == retry.request);
                r.request
            });
        if let Some(recorded) = recorded {
            if recorded != retry.request {
                return Ok(Retried {
                    decisions: Vec::new(),
                    replay: Replay::Mismatch,
                });
            }
            let peeks: Vec<Check<'_>> = checks.iter().map(|c| Check { cost: 0, ..*c }).collect();
            let peeked = self.decide_locked(&mut guards, &peeks, &hashes, &[], now)?;
            let mut decisions = request_id::replayed(peeked);
            permit::name_replayed(checks, &retry, &mut decisions);
            return Ok(Retried {
                decisions,
                replay: Replay::Replayed,
            });
        }
        let decisions = self.decide_locked(&mut guards, checks, &hashes, &permits, now)?;
        if decisions.iter().all(|d| d.allowed) {
            let table = table_for(&mut guards, self.shard_index(hash));
            self.record(table, hash, first, retry, now);
        }
        Ok(Retried {
            decisions,
            replay: Replay::Fresh,
        })
    }

    /// Records `retry.id` with `check`'s key, dropping its expired ids and,
    /// past `max_ids`, its oldest; then holds the shard to its bound, which
    /// forgets an id (there is one: this one) before it evicts any state.
    fn record(&self, table: &mut Table, hash: u64, check: &Check<'_>, retry: Retry<'_>, now: Now) {
        let recorded = Recorded {
            id: retry.id.clone(),
            request: retry.request,
            until_ms: now.wall.saturating_add(retry.window_ms),
            replays: 0,
        };
        let max = usize::try_from(retry.max_ids).unwrap_or(usize::MAX).max(1);
        match table.records.find_mut(hash, |r| r.is(hash, check)) {
            Some(records) => {
                let mut dropped = records.drop_expired(now.wall);
                // A record whose replays were used up is replaced.
                let before = records.ids.len();
                records.ids.retain(|r| r.id != *retry.id);
                dropped += before - records.ids.len();
                while records.ids.len() >= max {
                    records.ids.pop_front();
                    dropped += 1;
                }
                records.ids.push_back(recorded);
                table.ids = table.ids + 1 - dropped;
            }
            None => {
                table.records.insert_unique(
                    hash,
                    Records {
                        hash,
                        policy: Arc::clone(check.policy.name_arc()),
                        algorithm: check.policy.algorithm(),
                        identity: check.identity.as_bytes().into(),
                        ids: VecDeque::from([recorded]),
                    },
                    |r| r.hash,
                );
                table.ids += 1;
            }
        }
        if table.held() > self.max_per_shard {
            self.make_room(table, now, &[]);
        }
    }
}
