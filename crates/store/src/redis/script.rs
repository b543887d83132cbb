//! The Lua scripts (crates/store/lua) and the arguments they take.
//!
//! Every script is `common.lua`, one or all algorithms, then a main part:
//! `decide.lua` (each key on its own: one key, or a batch of independent
//! decisions), `decide_all.lua` (all-or-nothing), `decide_once.lua`
//! (all-or-nothing under a request id), or `take.lua` and `give_back.lua`
//! (a hot-lease block taken on the store's clock, and its unused units
//! given back). They share one argument layout,
//! described at the top of `common.lua`.

use std::sync::{Arc, LazyLock};

use redis::{Cmd, Script};
use tollgate_core::{Algorithm, Decision, Limits, PermitId};

use crate::StoreError;

macro_rules! lua {
    ($($file:literal),*) => {
        concat!(
            include_str!("../../lua/common.lua"),
            $(include_str!(concat!("../../lua/", $file)),)*
        )
    };
}

macro_rules! every_algorithm {
    ($($main:literal),*) => {
        lua!(
            "token_bucket.lua",
            "gcra.lua",
            "fixed_window.lua",
            "sliding_window.lua",
            "sliding_log.lua",
            "concurrency.lua",
            $($main),*
        )
    };
}

/// The script texts, for `redis-benchmark` and the docs.
pub mod source {
    /// Independent decisions of token_bucket keys only.
    pub const TOKEN_BUCKET: &str = lua!("token_bucket.lua", "decide.lua");
    /// Independent decisions of gcra keys only.
    pub const GCRA: &str = lua!("gcra.lua", "decide.lua");
    /// Independent decisions of fixed_window keys only.
    pub const FIXED_WINDOW: &str = lua!("fixed_window.lua", "decide.lua");
    /// Independent decisions of sliding_window keys only.
    pub const SLIDING_WINDOW: &str = lua!("sliding_window.lua", "decide.lua");
    /// Independent decisions of sliding_log keys only.
    pub const SLIDING_LOG: &str = lua!("sliding_log.lua", "decide.lua");
    /// Independent decisions of concurrency keys only.
    pub const CONCURRENCY: &str = lua!("concurrency.lua", "decide.lua");
    /// Independent decisions of any algorithms.
    pub const BATCH: &str = every_algorithm!("decide.lua");
    /// All-or-nothing across keys.
    pub const DECIDE_ALL: &str = every_algorithm!("all_or_nothing.lua", "decide_all.lua");
    /// All-or-nothing across keys under a request id.
    pub const DECIDE_ONCE: &str =
        every_algorithm!("all_or_nothing.lua", "record.lua", "decide_once.lua");
    /// Independent decisions of any algorithms, each under its request id.
    pub const DECIDE_EACH_ONCE: &str = every_algorithm!("record.lua", "decide_each_once.lua");
    /// One decision that also answers the store's clock (a hot-lease block).
    pub const TAKE: &str = every_algorithm!("take.lua");
    /// Gives back the unused units of a hot-lease block.
    pub const GIVE_BACK: &str = every_algorithm!("give_back.lua");
    /// Frees one held permit of a concurrency key.
    pub const RELEASE: &str = concat!(
        include_str!("../../lua/common.lua"),
        include_str!("../../lua/release.lua")
    );
    /// Gives a gcra scale its tag in the policy's registry.
    pub const REGISTER_SCALE: &str = include_str!("../../lua/register_scale.lua");
    /// A leased policy's ledger: asks for a region's share.
    pub const LEASE: &str = include_str!("../../lua/lease.lua");
}

/// A script with its SHA1, called by EVALSHA.
pub struct Lua {
    pub script: Script,
    pub body: &'static str,
}

impl Lua {
    fn new(body: &'static str) -> Self {
        Self {
            script: Script::new(body),
            body,
        }
    }

    pub fn sha(&self) -> &str {
        self.script.get_hash()
    }
}

pub struct Scripts {
    by_algorithm: [Lua; 6],
    pub batch: Lua,
    pub decide_all: Lua,
    pub decide_once: Lua,
    pub decide_each_once: Lua,
    pub take: Lua,
    pub give_back: Lua,
    pub release: Lua,
    pub register_scale: Lua,
    pub lease: Lua,
}

impl Scripts {
    /// The script deciding keys of `algorithm` only.
    pub fn for_algorithm(&self, algorithm: Algorithm) -> &Lua {
        &self.by_algorithm[algorithm as usize]
    }

    /// Every script, for loading them all when a connection opens.
    pub fn all(&self) -> impl Iterator<Item = &Lua> {
        // Destructured, so a script added to `Scripts` cannot be left out.
        let Self {
            by_algorithm,
            batch,
            decide_all,
            decide_once,
            decide_each_once,
            take,
            give_back,
            release,
            register_scale,
            lease,
        } = self;
        by_algorithm.iter().chain([
            batch,
            decide_all,
            decide_once,
            decide_each_once,
            take,
            give_back,
            release,
            register_scale,
            lease,
        ])
    }
}

pub static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    // In the order of `Algorithm`'s variants.
    by_algorithm: [
        Lua::new(source::TOKEN_BUCKET),
        Lua::new(source::GCRA),
        Lua::new(source::FIXED_WINDOW),
        Lua::new(source::SLIDING_WINDOW),
        Lua::new(source::SLIDING_LOG),
        Lua::new(source::CONCURRENCY),
    ],
    batch: Lua::new(source::BATCH),
    decide_all: Lua::new(source::DECIDE_ALL),
    decide_once: Lua::new(source::DECIDE_ONCE),
    decide_each_once: Lua::new(source::DECIDE_EACH_ONCE),
    take: Lua::new(source::TAKE),
    give_back: Lua::new(source::GIVE_BACK),
    release: Lua::new(source::RELEASE),
    register_scale: Lua::new(source::REGISTER_SCALE),
    lease: Lua::new(source::LEASE),
});

/// One key's share of a script call: its key and the six fields after it.
#[derive(Debug, Clone)]
pub struct Item {
    pub key: Vec<u8>,
    /// The policy's name, for its gcra scale registry.
    pub policy: Arc<str>,
    pub algorithm: Algorithm,
    pub cost: u64,
    pub params: [u64; 3],
    pub limit: u64,
    /// gcra's scale tag in the policy's registry, when it has one.
    pub tag: Option<u16>,
    /// `;tag:C:n:p` for each older scale the call must name (usually none).
    pub older: String,
    /// The permit a concurrency acquire would hold (crate::permit), sent
    /// in place of the scale; `None` for a look and for every rate.
    pub permit: Option<PermitId>,
}

impl Item {
    pub fn new(key: Vec<u8>, policy: &Arc<str>, limits: &Limits, cost: u64) -> Self {
        let params = match limits {
            Limits::TokenBucket(r) | Limits::Gcra(r) => {
                [r.capacity(), r.units_per_ms(), r.units_per_token()]
            }
            Limits::FixedWindow(w) | Limits::SlidingWindow(w) | Limits::SlidingLog(w) => {
                [w.limit(), w.window_ms(), 0]
            }
            Limits::Concurrency(p) => [p.limit(), p.lease_ms(), 0],
        };
        Self {
            key,
            policy: Arc::clone(policy),
            algorithm: limits.algorithm(),
            cost,
            params,
            limit: limits.limit(),
            tag: None,
            older: String::new(),
            permit: None,
        }
    }
}

/// A request id's share of a `decide_once.lua` call (see there).
#[derive(Debug, Clone)]
pub struct Once {
    /// The id record: the first item's key with `:ids` (same slot).
    pub key: Vec<u8>,
    pub id: String,
    /// The whole request's digest, in hex (crate::request_id::RequestDigest).
    pub request: String,
    pub window_ms: u64,
    pub max_ids: u32,
}

/// When a script decides: on the store's clock, or at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    StoreClock,
    Ms(u64),
}

/// Times and results stay below 2^53 in Lua; a given time beyond 2^52 ms
/// (142,000 years) is refused rather than rounded.
pub const MAX_GIVEN_MS: u64 = 1 << 52;

/// How a script is named in a call: by SHA1, or by its text (after NOSCRIPT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    Sha,
    Body,
}

/// `EVALSHA sha` (or `EVAL body`), for the arguments to follow.
pub fn invocation(lua: &Lua, by: By) -> Cmd {
    match by {
        By::Sha => redis::cmd("EVALSHA").arg(lua.sha()).to_owned(),
        By::Body => redis::cmd("EVAL").arg(lua.body).to_owned(),
    }
}

/// `EVALSHA sha nkeys keys... [records...] now margin [mode] fields...
/// [ids...]` (or `EVAL body ...`): a request id's record key and arguments
/// for each of `onces` (none, one for the call, or one per item).
#[allow(clippy::too_many_arguments)]
pub fn command(
    lua: &Lua,
    by: By,
    items: &[&Item],
    at: At,
    margin_ms: u64,
    mode: Option<&str>,
    onces: &[&Once],
) -> Result<Cmd, StoreError> {
    let mut cmd = invocation(lua, by);
    cmd.arg(items.len() + onces.len());
    for item in items {
        cmd.arg(&item.key[..]);
    }
    for once in onces {
        cmd.arg(&once.key[..]);
    }
    match at {
        At::StoreClock => cmd.arg(""),
        At::Ms(ms) if ms < MAX_GIVEN_MS => cmd.arg(ms),
        At::Ms(ms) => {
            return Err(StoreError::Protocol(format!(
                "time {ms} ms is beyond what the Redis scripts decide exactly (2^52 ms)"
            )));
        }
    };
    cmd.arg(margin_ms);
    if let Some(mode) = mode {
        cmd.arg(mode);
    }
    for item in items {
        cmd.arg(item.algorithm.as_str())
            .arg(item.cost)
            .arg(item.params[0])
            .arg(item.params[1])
            .arg(item.params[2]);
        // The scale field (see common.lua): the tag, then older scales;
        // a concurrency acquire's permit instead.
        if let Some(permit) = item.permit {
            cmd.arg(permit.to_string());
            continue;
        }
        match (item.tag, item.older.is_empty()) {
            (None, true) => cmd.arg(""),
            (Some(tag), true) => cmd.arg(tag),
            (Some(tag), false) => cmd.arg(format!("{tag}{}", item.older)),
            (None, false) => cmd.arg(&item.older),
        };
    }
    for once in onces {
        cmd.arg(&once.id)
            .arg(&once.request)
            .arg(once.window_ms)
            .arg(once.max_ids);
    }
    Ok(cmd)
}

/// Four integers per item, back into decisions.
pub fn decisions(items: &[&Item], reply: &[i64]) -> Result<Vec<Decision>, StoreError> {
    if reply.len() != items.len() * 4 {
        return Err(StoreError::Protocol(format!(
            "a script answered {} integers for {} keys",
            reply.len(),
            items.len()
        )));
    }
    items
        .iter()
        .zip(reply.chunks_exact(4))
        .map(|(item, d)| decision(item, d))
        .collect()
}

/// One item's four integers (allowed, remaining, retry, reset). An
/// admitted acquire names the item's permit (an all-or-nothing call that
/// rejected drops it again: [`settle_permits`]).
pub fn decision(item: &Item, d: &[i64]) -> Result<Decision, StoreError> {
    let [allowed, remaining, retry, reset] = d else {
        return Err(StoreError::Protocol(format!(
            "a script answered {} integers for a key",
            d.len()
        )));
    };
    let allowed = match allowed {
        1 => true,
        0 => false,
        x => return Err(StoreError::Protocol(format!("allowed = {x}"))),
    };
    Ok(Decision {
        allowed,
        limit: item.limit,
        remaining: *remaining,
        retry_after_ms: match retry {
            -1 => None,
            x => Some(non_negative(*x, "retry_after_ms")?),
        },
        reset_after_ms: non_negative(*reset, "reset_after_ms")?,
        permit: item.permit.filter(|_| allowed),
    })
}

/// An all-or-nothing call holds its permits only when every check was
/// admitted: a rejected call's decisions name none.
pub fn settle_permits(decisions: &mut [Decision]) {
    if !decisions.iter().all(|d| d.allowed) {
        for d in decisions {
            d.permit = None;
        }
    }
}

fn non_negative(x: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(x).map_err(|_| StoreError::Protocol(format!("a script answered {what} = {x}")))
}
