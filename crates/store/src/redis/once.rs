//! Request ids on Redis (crate::request_id): a retry is charged once.
//!
//! A call under an id is decided by a script that reads and writes the
//! id's record (`<key>:ids`, same slot) in the same call as the decision:
//! one check is batched with other single checks under ids
//! (`decide_each_once.lua`, crate::redis::batch); several are
//! `decide_once.lua`, one call per slot, the record's slot first across a
//! Cluster's slots. Neither is answered from the rejected-until cache: a
//! replay admits.

use std::collections::BTreeMap;

use tokio::sync::oneshot;
use tollgate_core::Decision;

use super::script::{self, At, Item, Once, SCRIPTS, decisions};
use super::{Answer, RedisStore, batch, errors, key};
use crate::check;
use crate::request_id::{self, Replay, Retried, Retry};
use crate::{Check, StoreError};

/// One slot's part of a call under a request id.
enum Part {
    /// The decisions, and whether the id replayed them.
    Decided(Vec<Decision>, bool),
    /// The id was recorded for another request.
    Mismatch,
}

impl RedisStore {
    /// [`Store::decide_once`](crate::Store::decide_once) at `now_ms` instead of Redis's clock.
    pub async fn decide_once_at(
        &self,
        checks: &[Check<'_>],
        retry: Retry<'_>,
        now_ms: u64,
    ) -> Result<Retried, StoreError> {
        let mut items = self.items_once(checks, &retry);
        self.shared.tag_all(&mut items);
        let Some(once) = self.once(&items, retry) else {
            return Ok(Retried {
                decisions: Vec::new(),
                replay: Replay::Fresh,
            });
        };
        // Boxed: the two phases' futures are deep (redis-rs's within).
        let mut retried =
            Box::pin(self.once_or_nothing(&items, &once, At::Ms(now_ms), self.given_margin()))
                .await?;
        if retried.replay == Replay::Fresh {
            check::mark_never_fits(&check::never_fit_in_batch(checks), &mut retried.decisions);
        }
        Ok(retried)
    }

    /// A request id's arguments: recorded with the first check's key.
    pub(super) fn once(&self, items: &[Item], retry: Retry<'_>) -> Option<Once> {
        let first = items.first()?;
        Some(Once {
            key: key::record_key(&first.key),
            id: retry.id.as_str().to_owned(),
            request: retry.request.to_hex(),
            window_ms: retry.window_ms,
            max_ids: retry.max_ids,
        })
    }

    /// One slot's share of a call under a request id: with `once` on the
    /// slot of the id's record, else a plain all-or-nothing call, or peeks
    /// (cost 0) when `peek`.
    #[allow(clippy::too_many_arguments)]
    async fn part(
        &self,
        items: &[Item],
        group: &[usize],
        at: At,
        margin_ms: u64,
        mode: &'static str,
        once: Option<&Once>,
        peek: bool,
    ) -> Result<Part, StoreError> {
        let peeks: Vec<Item>;
        let group_items: Vec<&Item> = if peek {
            peeks = group
                .iter()
                .map(|&i| Item {
                    cost: 0,
                    ..items[i].clone()
                })
                .collect();
            peeks.iter().collect()
        } else {
            group.iter().map(|&i| &items[i]).collect()
        };
        let lua = match once {
            Some(_) => &SCRIPTS.decide_once,
            None => &SCRIPTS.decide_all,
        };
        let answer = self
            .timed(self.shared.run(
                &self.shared.connection,
                lua,
                &group_items,
                at,
                margin_ms,
                Some(mode),
                once.as_slice(),
            ))
            .await?;
        let mut integers = match answer {
            Answer::Decided(integers) => integers,
            Answer::Mismatch => return Ok(Part::Mismatch),
        };
        let replayed = once.is_some() && integers.pop() == Some(1);
        Ok(Part::Decided(decisions(&group_items, &integers)?, replayed))
    }

    /// All-or-nothing over `items` under a request id recorded with the
    /// first item's key. Keys of one slot are one `decide_once.lua` call.
    /// Across Cluster slots, as [`RedisStore::all_or_nothing`], with the
    /// record's slot first in each phase: its call is where a retry and its
    /// first attempt meet, so only one of them consumes anywhere. Should a
    /// later slot then reject (a race with other traffic), the id is
    /// forgotten again, so the rejected request's retry is decided afresh.
    pub(super) async fn once_or_nothing(
        &self,
        items: &[Item],
        once: &Once,
        at: At,
        margin_ms: u64,
    ) -> Result<Retried, StoreError> {
        let groups = self.record_slot_first(items);
        let Some((record_group, others)) = groups.split_first() else {
            return Ok(Retried {
                decisions: Vec::new(),
                replay: Replay::Fresh,
            });
        };
        let call = OnceCall {
            store: self,
            items,
            once,
            at,
            margin_ms,
        };
        let mut retried = if others.is_empty() {
            call.one_slot(record_group).await?
        } else {
            call.across_slots(record_group, others).await?
        };
        script::settle_permits(&mut retried.decisions);
        Ok(retried)
    }

    /// `items`' indices grouped by Cluster slot (one group off a Cluster),
    /// the record's slot (the first item's) first.
    fn record_slot_first(&self, items: &[Item]) -> Vec<Vec<usize>> {
        let mut groups: Vec<Vec<usize>> = if self.shared.connection.is_cluster() {
            let mut by_slot: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
            for (i, item) in items.iter().enumerate() {
                by_slot.entry(key::slot(&item.key)).or_default().push(i);
            }
            by_slot.into_values().collect()
        } else {
            vec![(0..items.len()).collect()]
        };
        if let Some(at) = groups.iter().position(|g| g.first() == Some(&0)) {
            groups.swap(0, at);
        }
        groups
    }

    /// Forgets a request id recorded by a call that ended rejected.
    async fn forget_id(&self, once: &Once) -> Result<(), StoreError> {
        self.timed(async {
            self.shared
                .connection
                .query(::redis::cmd("HDEL").arg(&once.key[..]).arg(&once.id))
                .await
                .map(drop)
                .map_err(errors::from_redis)
        })
        .await
    }

    /// Forgets request id `id` recorded with `policy`'s state of
    /// `identity` (a refund of the work it admitted: its retry is charged
    /// again). Nothing when it is not recorded there.
    pub async fn forget_request_id(
        &self,
        policy: &tollgate_core::Policy,
        identity: &tollgate_core::Identity,
        id: &request_id::RequestId,
    ) -> Result<(), StoreError> {
        let records = key::record_key(&self.key(policy, identity));
        self.timed(async {
            self.shared
                .connection
                .query(::redis::cmd("HDEL").arg(records).arg(id.as_str()))
                .await
                .map(drop)
                .map_err(errors::from_redis)
        })
        .await
    }

    /// One check under a request id, batched with other single checks
    /// under ids (crate::redis::batch); never answered from the
    /// rejected-until cache, since a replay admits.
    pub(super) async fn decide_one_once(
        &self,
        mut item: Item,
        once: Once,
    ) -> Result<Retried, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.timed(async {
            self.shared.tag(&mut item);
            self.queue()
                .send(batch::Job {
                    item,
                    once: Some(once),
                    reply,
                })
                .await
                .map_err(|_| StoreError::Unavailable("the batching task has stopped".into()))?;
            let (decision, replay) = answer
                .await
                .map_err(|_| StoreError::Unavailable("a batch was dropped".into()))??;
            Ok(Retried {
                decisions: match replay {
                    Replay::Mismatch => Vec::new(),
                    _ => vec![decision],
                },
                replay,
            })
        })
        .await
    }
}

/// One call under a request id, [`RedisStore::once_or_nothing`]'s: what
/// each of its phases asks of a slot.
struct OnceCall<'a> {
    store: &'a RedisStore,
    items: &'a [Item],
    once: &'a Once,
    at: At,
    margin_ms: u64,
}

impl OnceCall<'_> {
    /// `group`'s share in `mode`, under the id when `once` is given.
    async fn part(
        &self,
        group: &[usize],
        mode: &'static str,
        once: Option<&Once>,
        peek: bool,
    ) -> Result<Part, StoreError> {
        self.store
            .part(self.items, group, self.at, self.margin_ms, mode, once, peek)
            .await
    }

    /// Every key in the record's slot: one call decides and records.
    async fn one_slot(&self, group: &[usize]) -> Result<Retried, StoreError> {
        Ok(
            match self.part(group, "consume", Some(self.once), false).await? {
                Part::Mismatch => mismatch(),
                Part::Decided(found, replayed) => Retried {
                    decisions: found,
                    replay: if replayed {
                        Replay::Replayed
                    } else {
                        Replay::Fresh
                    },
                },
            },
        )
    }

    /// Two phases across slots, the record's slot first in each: every
    /// slot's verdict, nothing written; then consume (or probe, when one
    /// rejected), forgetting the id should a later slot reject after all.
    async fn across_slots(
        &self,
        record_group: &[usize],
        others: &[Vec<usize>],
    ) -> Result<Retried, StoreError> {
        let mut out: Vec<Option<Decision>> = vec![None; self.items.len()];
        // Phase one: every slot's verdict, the record's first; nothing written.
        let (found, replayed) = match self
            .part(record_group, "verdict", Some(self.once), false)
            .await?
        {
            Part::Mismatch => return Ok(mismatch()),
            Part::Decided(found, replayed) => (found, replayed),
        };
        place(&mut out, record_group, found);
        if replayed {
            return self.replay(others, out).await;
        }
        let mut all = out.iter().flatten().all(|d| d.allowed);
        for group in others {
            if let Part::Decided(found, _) = self.part(group, "verdict", None, false).await? {
                all &= found.iter().all(|d| d.allowed);
                place(&mut out, group, found);
            }
        }
        // Phase two, the record's slot first: it consumes and records, or
        // finds the id recorded meanwhile and replays.
        let mode = if all { "consume" } else { "probe" };
        let (found, replayed) = match self
            .part(record_group, mode, Some(self.once), false)
            .await?
        {
            Part::Mismatch => return Ok(mismatch()),
            Part::Decided(found, replayed) => (found, replayed),
        };
        let admitted = found.iter().all(|d| d.allowed);
        place(&mut out, record_group, found);
        if replayed {
            return self.replay(others, out).await;
        }
        // A consuming record slot that rejected (a race) stops here, as
        // in all_or_nothing; later slots keep their verdicts.
        if !all || admitted {
            for group in others {
                let Part::Decided(found, _) = self.part(group, mode, None, false).await? else {
                    continue;
                };
                let admitted = found.iter().all(|d| d.allowed);
                place(&mut out, group, found);
                if all && !admitted {
                    self.store.forget_id(self.once).await?;
                    break;
                }
            }
        }
        Ok(Retried {
            decisions: collect(out)?,
            replay: Replay::Fresh,
        })
    }

    /// A replay: the record's slot answered; the others are peeked.
    async fn replay(
        &self,
        others: &[Vec<usize>],
        mut out: Vec<Option<Decision>>,
    ) -> Result<Retried, StoreError> {
        for group in others {
            if let Part::Decided(found, _) = self.part(group, "consume", None, true).await? {
                place(&mut out, group, found);
            }
        }
        Ok(Retried {
            decisions: request_id::replayed(collect(out)?),
            replay: Replay::Replayed,
        })
    }
}

/// The answer to an id recorded for another request.
fn mismatch() -> Retried {
    Retried {
        decisions: Vec::new(),
        replay: Replay::Mismatch,
    }
}

/// `found` in `group`'s places of `out`.
fn place(out: &mut [Option<Decision>], group: &[usize], found: Vec<Decision>) {
    for (&i, d) in group.iter().zip(found) {
        out[i] = Some(d);
    }
}

/// Every check's decision, in order; an error if a slot left one out.
fn collect(out: Vec<Option<Decision>>) -> Result<Vec<Decision>, StoreError> {
    out.into_iter()
        .map(|d| d.ok_or_else(|| StoreError::Protocol("a check went undecided".into())))
        .collect()
}
