//! The Redis store: every decision is one atomic Lua script on Redis's own
//! clock (docs/design.md §3–§5), shared by every tollgate instance.
//!
//! - Keys are `<prefix>:<policy>:<algorithm>:{<identity>}` ([`key`]); the
//!   state stored under one records its scale, so a limit change carries
//!   the bucket or window over instead of minting a burst.
//! - Scripts ([`script`], crates/store/lua) are called by SHA1. Every
//!   connection opened (the first, and each after a restart or failover)
//!   loads them all and registers the known gcra scales before its first
//!   call ([`prelude`], [`link`]), so a decision costs one round trip;
//!   NOSCRIPT still reruns the call with the script's text.
//! - Concurrent decisions are batched into fewer script calls ([`batch`]);
//!   a key rejected until T is answered locally until T ([`rejected`]).
//! - All-or-nothing decisions of one identity are one script call (one
//!   slot, thanks to the hash tag). In a Cluster, checks that span slots
//!   are decided in two phases; see [`RedisStore::decide_all`] for what
//!   that guarantees.
//! - A call under a request id records the id beside the state in the
//!   same script call ([`once`]), so a retry is charged once.
//! - Every call has a timeout, every queue and map a bound.

mod at_clock;
mod batch;
mod connection;
mod contract;
mod counts;
mod errors;
mod key;
mod lanes;
mod lease;
mod link;
mod once;
mod prelude;
mod registry;
mod rejected;
mod release;
mod replay_prefix;
mod scales;
mod script;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tollgate_core::{Decision, Identity, Policy, Taken};

pub use at_clock::AtClock;
pub use key::{MAX_TAG, slot as key_slot, state_key};
pub use lease::{MAX_INSTANCES_A_REGION, ledger_epoch_key, ledger_key};
pub use replay_prefix::{LIVE_REFRESH_MS, PrefixHolds};
pub use scales::preferred_tag as gcra_scale_tag;
pub use script::{MAX_GIVEN_MS, source as lua_source};

use crate::redis_config::RedisConfig;
use connection::{Connection, Reply};
use script::{At, Item, Lua, Once, SCRIPTS, decision, decisions};

use crate::check;
use crate::check::Check;
use crate::error::StoreError;
use crate::permit::{self, Minter};
use crate::request_id::Retry;

/// Keys decided at a given time (replay, tests) live at least this long,
/// so a fast replay never outruns its own state.
const GIVEN_TIME_MARGIN_MS: u64 = 600_000;

/// A [`Store`](crate::Store) on Redis: standalone, Cluster or Sentinel. Cheap to clone.
#[derive(Clone)]
pub struct RedisStore {
    shared: Arc<Shared>,
    queue: mpsc::Sender<batch::Job>,
    /// For the connections of lanes (see [`batch`]).
    config: Arc<RedisConfig>,
}

struct Shared {
    connection: Connection,
    prefix: String,
    timeout_ms: u64,
    margin_ms: u64,
    rejected: rejected::RejectedCache,
    answered_locally: AtomicU64,
    /// Script calls made by the batching task: decisions / this = batch size.
    batched_calls: AtomicU64,
    /// Every script call of every connection (decisions, takes,
    /// give-backs, lease renewals, scale lookups, resends after NOSCRIPT).
    script_calls: Arc<AtomicU64>,
    scales: Arc<scales::Scales>,
    /// Names the permits of concurrency acquires (crate::permit).
    minter: Minter,
}

/// Calls made again because a gcra state named a scale the call did not:
/// one per scale a key has been written in since, so two are plenty.
const SCALE_ATTEMPTS: usize = 3;

impl Shared {
    /// Gives a gcra item its scale's tag, so its state is written as an
    /// integer; other items, and a gcra item whose tag is not known yet
    /// or cannot be had, are left as they are (text states). Never waits
    /// on Redis (scales.rs).
    fn tag(&self, item: &mut Item) {
        if item.algorithm != tollgate_core::Algorithm::Gcra {
            return;
        }
        item.tag = self.scales.tag_now(
            &self.connection,
            &self.prefix,
            &item.policy,
            item.params,
            self.margin_ms,
        );
    }

    fn tag_all(&self, items: &mut [Item]) {
        for item in items {
            self.tag(item);
        }
    }

    /// Runs a script over `items` (with a request id's arguments when
    /// `once` is given); when it names gcra scales it was not told, reads
    /// them from the registry and calls again.
    #[allow(clippy::too_many_arguments)]
    async fn run(
        &self,
        connection: &Connection,
        lua: &Lua,
        items: &[&Item],
        at: At,
        margin_ms: u64,
        mode: Option<&str>,
        onces: &[&Once],
    ) -> Result<Answer, StoreError> {
        let mut patched: Option<Vec<Item>> = None;
        for _ in 0..SCALE_ATTEMPTS {
            // Boxed: redis-rs's futures are deep, and callers nest this one.
            let reply = match &patched {
                None => Box::pin(connection.run(lua, items, at, margin_ms, mode, onces)).await?,
                Some(own) => {
                    let refs: Vec<&Item> = own.iter().collect();
                    Box::pin(connection.run(lua, &refs, at, margin_ms, mode, onces)).await?
                }
            };
            let missing = match reply {
                Reply::Decided(integers) => return Ok(Answer::Decided(integers)),
                Reply::Mismatch => return Ok(Answer::Mismatch),
                Reply::Unresolved(missing) => missing,
            };
            let own = patched.get_or_insert_with(|| items.iter().map(|&i| i.clone()).collect());
            for (index, tag) in missing {
                let item = &mut own[index];
                let [c, n, p] = self
                    .scales
                    .resolve(connection, &self.prefix, &item.policy, tag)
                    .await?;
                item.older.push_str(&format!(";{tag}:{c}:{n}:{p}"));
            }
        }
        Err(StoreError::Protocol(
            "gcra states kept naming scales the registry did not give".into(),
        ))
    }
}

/// What a script call came to.
enum Answer {
    Decided(Vec<i64>),
    /// A request id recorded for another request.
    Mismatch,
}

impl Answer {
    /// The integers of a call without a request id.
    fn integers(self) -> Result<Vec<i64>, StoreError> {
        match self {
            Answer::Decided(integers) => Ok(integers),
            Answer::Mismatch => Err(StoreError::Protocol(
                "a script without a request id refused one".into(),
            )),
        }
    }
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.shared.prefix)
            .field("cluster", &self.shared.connection.is_cluster())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects as `config` says and starts the batching task. Call it
    /// inside a Tokio runtime.
    pub async fn connect(config: &RedisConfig) -> Result<Self, StoreError> {
        let scales = Arc::new(scales::Scales::default());
        let script_calls = Arc::new(AtomicU64::new(0));
        let connection =
            Connection::open(config, Arc::clone(&scales), Arc::clone(&script_calls)).await?;
        // The first decision then costs one round trip. Redis being down
        // does not stop a store from connecting: its calls fail until it
        // is up (and the failure modes answer them).
        let opened =
            tokio::time::timeout(Duration::from_millis(config.timeout_ms), connection.ready())
                .await;
        if !matches!(opened, Ok(Ok(()))) {
            tracing::warn!(
                prefix = %config.prefix,
                "Redis is not reachable yet; decisions fail until it is"
            );
        }
        let shared = Arc::new(Shared {
            connection,
            prefix: config.prefix.clone(),
            timeout_ms: config.timeout_ms,
            margin_ms: config.ttl_margin_ms,
            rejected: rejected::RejectedCache::new(config.rejected_cache),
            answered_locally: AtomicU64::new(0),
            batched_calls: AtomicU64::new(0),
            script_calls,
            scales,
            minter: Minter::default(),
        });
        let (queue, jobs) = mpsc::channel(config.batch.queue);
        tokio::spawn(batch::gather(
            jobs,
            Arc::clone(&shared),
            shared.connection.clone(),
            config.batch,
        ));
        Ok(Self {
            shared,
            queue,
            config: Arc::new(config.clone()),
        })
    }

    /// The key holding `policy`'s state for `identity`.
    pub fn key(&self, policy: &Policy, identity: &Identity) -> Vec<u8> {
        state_key(&self.shared.prefix, policy, identity)
    }

    /// Decides one check at `now_ms` instead of Redis's clock (replay,
    /// tests): unbatched, and never answered from the rejected-until cache.
    pub async fn decide_at(&self, check: Check<'_>, now_ms: u64) -> Result<Decision, StoreError> {
        let mut item = self.item(&check);
        let lua = SCRIPTS.for_algorithm(item.algorithm);
        self.one_key(lua, &mut item, At::Ms(now_ms), self.given_margin(), None)
            .await
            .and_then(|reply| decisions(&[&item], &reply))
            .and_then(|mut d| {
                d.pop()
                    .ok_or_else(|| StoreError::Protocol("a script answered nothing".into()))
            })
    }

    /// [`Store::decide_all`](crate::Store::decide_all) at `now_ms` instead of Redis's clock.
    pub async fn decide_all_at(
        &self,
        checks: &[Check<'_>],
        now_ms: u64,
    ) -> Result<Vec<Decision>, StoreError> {
        let mut items: Vec<Item> = checks.iter().map(|c| self.item(c)).collect();
        self.shared.tag_all(&mut items);
        let mut decisions = self
            .all_or_nothing(&items, At::Ms(now_ms), self.given_margin())
            .await?;
        check::mark_never_fits(&check::never_fit_in_batch(checks), &mut decisions);
        Ok(decisions)
    }

    /// Decides `check` as [`Store::decide`](crate::Store::decide) does, unbatched and never from
    /// the rejected-until cache, and says where its units came from, so the
    /// ones never used can be given back ([`RedisStore::give_back`]): a
    /// hot-lease block.
    pub async fn take(&self, check: Check<'_>) -> Result<(Decision, Taken), StoreError> {
        self.take_with(check, At::StoreClock, self.shared.margin_ms)
            .await
    }

    /// [`RedisStore::take`] at `now_ms` instead of Redis's clock (tests).
    pub async fn take_at(
        &self,
        check: Check<'_>,
        now_ms: u64,
    ) -> Result<(Decision, Taken), StoreError> {
        self.take_with(check, At::Ms(now_ms), self.given_margin())
            .await
    }

    /// [`RedisStore::give_back`] at `now_ms` instead of Redis's clock (tests).
    pub async fn give_back_at(
        &self,
        check: Check<'_>,
        taken: Taken,
        now_ms: u64,
    ) -> Result<u64, StoreError> {
        self.give_back_with(check, taken, At::Ms(now_ms), self.given_margin())
            .await
    }

    /// One unbatched script call about one key (its gcra scale tagged
    /// first), within the store's timeout: the integers it answered.
    async fn one_key(
        &self,
        lua: &Lua,
        item: &mut Item,
        at: At,
        margin_ms: u64,
        mode: Option<&str>,
    ) -> Result<Vec<i64>, StoreError> {
        self.shared.tag(item);
        self.timed(async {
            self.shared
                .run(
                    &self.shared.connection,
                    lua,
                    &[&*item],
                    at,
                    margin_ms,
                    mode,
                    &[],
                )
                .await
        })
        .await
        .and_then(Answer::integers)
    }

    async fn take_with(
        &self,
        check: Check<'_>,
        at: At,
        margin_ms: u64,
    ) -> Result<(Decision, Taken), StoreError> {
        let mut item = self.item(&check);
        // On the store's clock a take is a decision like any other: a
        // rejection it already knows stands (a store restarted empty gives
        // this instance nothing more until then), and one it meets is kept.
        let sent = Instant::now();
        if at == At::StoreClock
            && let Some(decision) = self.shared.rejected.get(&item, sent)
        {
            self.shared.answered_locally.fetch_add(1, Ordering::Relaxed);
            return Ok((decision, Taken::new(0, &decision)));
        }
        let reply = self
            .one_key(&SCRIPTS.take, &mut item, at, margin_ms, None)
            .await?;
        let [decided @ .., now] = &reply[..] else {
            return Err(StoreError::Protocol("a take answered nothing".into()));
        };
        let decision = decision(&item, decided)?;
        let now = u64::try_from(*now)
            .map_err(|_| StoreError::Protocol(format!("a take answered the time {now}")))?;
        if at == At::StoreClock && !decision.allowed {
            self.shared
                .rejected
                .remember(&item, &decision, sent, Instant::now());
        }
        Ok((decision, Taken::new(now, &decision)))
    }

    /// Gives back up to `check.cost` units consumed by a [`RedisStore::take`]
    /// and never used, as far as the key's state can take them back exactly
    /// (`Limits::give_back`); returns how many went back.
    pub async fn give_back(&self, check: Check<'_>, taken: Taken) -> Result<u64, StoreError> {
        self.give_back_with(check, taken, At::StoreClock, self.shared.margin_ms)
            .await
    }

    async fn give_back_with(
        &self,
        check: Check<'_>,
        taken: Taken,
        at: At,
        margin_ms: u64,
    ) -> Result<u64, StoreError> {
        let mut item = self.item(&check);
        let mode = format!("{}:{}", taken.at_ms, taken.full_at_ms);
        let reply = self
            .one_key(&SCRIPTS.give_back, &mut item, at, margin_ms, Some(&mode))
            .await?;
        match reply[..] {
            [given] => {
                let given = u64::try_from(given)
                    .map_err(|_| StoreError::Protocol(format!("a give-back answered {given}")))?;
                if given > 0 {
                    // Room came back: this instance's cached rejections of
                    // the key no longer hold.
                    self.shared.rejected.forget(&item.key);
                }
                Ok(given)
            }
            _ => Err(StoreError::Protocol(format!(
                "a give-back answered {} integers",
                reply.len()
            ))),
        }
    }

    /// Deletes `policy`'s state for `identity` (an operator's reset): the
    /// identity starts afresh, full or empty as a new one does. Returns
    /// whether there was a state. Also forgets this instance's cached
    /// rejections of the key (other instances' caches still answer until
    /// their rejections expire: they can only reject more, never admit).
    pub async fn forget(&self, policy: &Policy, identity: &Identity) -> Result<bool, StoreError> {
        let key = self.key(policy, identity);
        let deleted = self
            .timed(async {
                self.shared
                    .connection
                    .query(::redis::cmd("DEL").arg(&key))
                    .await
                    .map_err(errors::from_redis)
            })
            .await?;
        self.shared.rejected.forget(&key);
        // Its request ids go too: the identity starts afresh.
        self.timed(async {
            self.shared
                .connection
                .query(::redis::cmd("DEL").arg(key::record_key(&key)))
                .await
                .map_err(errors::from_redis)
        })
        .await?;
        Ok(matches!(deleted, ::redis::Value::Int(n) if n > 0))
    }

    /// Registers the gcra scales of `policies` now (concurrent calls: one
    /// round trip), and on every connection that opens after: their first
    /// decisions write the smallest states and cost one round trip.
    /// Optional (a scale met first by a decision is registered in the
    /// background); a server calls it for its policies before it serves.
    pub async fn prepare(&self, policies: &[&Policy]) -> Result<(), StoreError> {
        let mut registrations = tokio::task::JoinSet::new();
        for policy in policies {
            let item = Item::new(Vec::new(), policy.name_arc(), policy.limits(), 0);
            if item.algorithm != tollgate_core::Algorithm::Gcra {
                continue;
            }
            let shared = Arc::clone(&self.shared);
            registrations.spawn(async move {
                let registering = shared.scales.register_now(
                    &shared.connection,
                    &shared.prefix,
                    &item.policy,
                    item.params,
                    shared.margin_ms,
                );
                Box::pin(registering).await
            });
        }
        self.timed(async {
            let mut outcome = Ok(());
            while let Some(joined) = registrations.join_next().await {
                let registered = joined
                    .map_err(|e| StoreError::Unavailable(format!("a registration stopped: {e}")))
                    .and_then(|r| r);
                outcome = outcome.and(registered.map(drop));
            }
            outcome
        })
        .await
    }

    /// Round trip to Redis: for readiness probes.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.timed(async {
            self.shared
                .connection
                .query(&::redis::cmd("PING"))
                .await
                .map(drop)
                .map_err(errors::from_redis)
        })
        .await
    }

    /// The script's item for `check`; an acquire names a fresh permit.
    fn item(&self, check: &Check<'_>) -> Item {
        let mut item = Item::new(
            self.key(check.policy, check.identity),
            check.policy.name_arc(),
            check.policy.limits(),
            check.cost,
        );
        if permit::holds_permit(check) {
            item.permit = Some(self.shared.minter.fresh());
        }
        item
    }

    /// The items of `checks` under `retry`: an acquire names the request's
    /// own permit (crate::permit), so a retry meets the same one.
    fn items_once(&self, checks: &[Check<'_>], retry: &Retry<'_>) -> Vec<Item> {
        let mut items: Vec<Item> = checks.iter().map(|c| self.item(c)).collect();
        for (i, item) in items.iter_mut().enumerate() {
            if item.permit.is_some() {
                item.permit = Some(permit::of_request(retry, i));
            }
        }
        items
    }

    fn given_margin(&self) -> u64 {
        self.shared.margin_ms.max(GIVEN_TIME_MARGIN_MS)
    }

    async fn timed<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let timeout_ms = self.shared.timeout_ms;
        tokio::time::timeout(Duration::from_millis(timeout_ms), call)
            .await
            .unwrap_or(Err(StoreError::Timeout { timeout_ms }))
    }

    /// A rejection of `item` this instance was answered that still stands,
    /// counted as answered locally.
    fn known_rejection(&self, item: &Item) -> Option<Decision> {
        let decision = self.shared.rejected.get(item, Instant::now())?;
        self.shared.answered_locally.fetch_add(1, Ordering::Relaxed);
        Some(decision)
    }

    async fn decide_one(&self, mut item: Item) -> Result<Decision, StoreError> {
        if let Some(decision) = self.known_rejection(&item) {
            return Ok(decision);
        }
        let (reply, answer) = oneshot::channel();
        self.timed(async {
            self.shared.tag(&mut item);
            self.queue()
                .send(batch::Job {
                    item,
                    once: None,
                    reply,
                })
                .await
                .map_err(|_| StoreError::Unavailable("the batching task has stopped".into()))?;
            answer
                .await
                .map_err(|_| StoreError::Unavailable("a batch was dropped".into()))?
                .map(|(decision, _)| decision)
        })
        .await
    }

    /// All-or-nothing over `items`. Keys of one slot (always, outside a
    /// Cluster) are one script call. Across Cluster slots: see
    /// [`RedisStore::decide_all`].
    async fn all_or_nothing(
        &self,
        items: &[Item],
        at: At,
        margin_ms: u64,
    ) -> Result<Vec<Decision>, StoreError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let mut groups: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        if self.shared.connection.is_cluster() {
            for (i, item) in items.iter().enumerate() {
                groups.entry(key::slot(&item.key)).or_default().push(i);
            }
        } else {
            groups.insert(0, (0..items.len()).collect());
        }
        let call = |group: &[usize], mode: &'static str| {
            let group_items: Vec<&Item> = group.iter().map(|&i| &items[i]).collect();
            async move {
                let reply = self
                    .timed(self.shared.run(
                        &self.shared.connection,
                        &SCRIPTS.decide_all,
                        &group_items,
                        at,
                        margin_ms,
                        Some(mode),
                        &[],
                    ))
                    .await?
                    .integers()?;
                decisions(&group_items, &reply)
            }
        };
        let mut out: Vec<Option<Decision>> = vec![None; items.len()];
        let mut place = |group: &[usize], found: Vec<Decision>| {
            for (&i, d) in group.iter().zip(found) {
                out[i] = Some(d);
            }
        };
        if groups.len() == 1 {
            let group: Vec<usize> = groups.into_values().flatten().collect();
            place(&group, call(&group, "consume").await?);
        } else {
            // Phase one: every slot's verdict; nothing written.
            let mut all = true;
            for group in groups.values() {
                let found = call(group, "verdict").await?;
                all &= found.iter().all(|d| d.allowed);
                place(group, found);
            }
            // Phase two: when every slot admitted, consume slot by slot,
            // stopping at the first rejection (only a race with another
            // instance can cause one); later slots keep their verdicts.
            // Otherwise decide every slot again consuming nothing, which
            // advances each key's clock as a rejected request does.
            let mode = if all { "consume" } else { "probe" };
            for group in groups.values() {
                let found = call(group, mode).await?;
                let admitted = found.iter().all(|d| d.allowed);
                place(group, found);
                if all && !admitted {
                    break;
                }
            }
        }
        let mut decided = out
            .into_iter()
            .map(|d| d.ok_or_else(|| StoreError::Protocol("a check went undecided".into())))
            .collect::<Result<Vec<Decision>, StoreError>>()?;
        script::settle_permits(&mut decided);
        Ok(decided)
    }
}
