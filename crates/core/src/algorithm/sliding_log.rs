//! sliding_log: every admitted cost logged with its time; it counts while
//! `now < t + W`. A log's length, and so a decision's work, is bounded by
//! [`LOG_EXACT_ENTRIES`], not by the limit: beyond it, requests are logged
//! at the end of their bucket of [`log_bucket_ms`] (docs/design.md §3).

use std::collections::VecDeque;

use super::Taken;
use crate::decision::Decision;
use crate::policy::Window;

/// A log records each admitted request at its own millisecond while it
/// holds fewer entries than this; beyond, at the end of its bucket. Every
/// decision walks the log (in Lua, parses it), so this bounds its cost.
pub const LOG_EXACT_ENTRIES: usize = 64;

/// The most entries a log holds after a decision: at most
/// [`LOG_EXACT_ENTRIES`] exact ones, and one per bucket end in
/// `(now − W, now + q)`, of which there are at most `LOG_EXACT_ENTRIES + 1`.
/// A log read this long (whatever wrote it) is coalesced first.
pub const LOG_MAX_ENTRIES: usize = 2 * LOG_EXACT_ENTRIES + 1;

/// The bucket width q = ceil(W / [`LOG_EXACT_ENTRIES`]) of a log of window
/// `window_ms`: a unit logged at its bucket's end counts at most q − 1 ms
/// longer than exact (a window under 64 ms has q = 1: always exact).
pub fn log_bucket_ms(window_ms: u64) -> u64 {
    window_ms.div_ceil(LOG_EXACT_ENTRIES as u64).max(1)
}

/// Stored state: admitted (time, cost) entries, oldest first, with their sum.
/// Entries of one millisecond (or, in a long log, one bucket) are merged.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogState {
    /// `(time_ms, cost)` of each admitted request still possibly counting.
    /// A bucketed entry's time is its bucket's end, which may be after
    /// `last_ms` (up to q − 1 ms).
    pub entries: VecDeque<(u64, u64)>,
    /// Sum of the entries' costs, kept so a decision need not re-add them.
    pub counted: u64,
    /// The key's clock: it never runs backward, so a stepping clock mints nothing.
    pub last_ms: u64,
}

pub(super) fn decide(
    window: &Window,
    state: &mut Option<LogState>,
    now_ms: u64,
    cost: u64,
    consume: bool,
) -> Decision {
    let w = u128::from(window.window_ms());
    let q = log_bucket_ms(window.window_ms());
    let limit = window.limit();
    let log = state.get_or_insert_with(|| LogState {
        last_ms: now_ms,
        ..LogState::default()
    });
    let now_ms = now_ms.max(log.last_ms);
    log.last_ms = now_ms;
    let now = u128::from(now_ms);
    while let Some(&(t, c)) = log.entries.front() {
        if u128::from(t) + w > now {
            break;
        }
        log.entries.pop_front();
        log.counted -= c;
    }
    if log.entries.len() >= LOG_MAX_ENTRIES {
        // Full (or a state written before logs were bounded): coalesced, so
        // the entry this decision may add keeps it within the bound.
        coalesce(&mut log.entries, q);
    }
    let allowed = u128::from(log.counted) + u128::from(cost) <= u128::from(limit);
    if allowed && consume && cost > 0 {
        let at = logged_ms(&log.entries, now_ms, q);
        match log.entries.back_mut() {
            Some((t, c)) if *t == at => *c += cost,
            _ => log.entries.push_back((at, cost)),
        }
        log.counted += cost;
    }
    let retry_after_ms = if allowed {
        Some(0)
    } else if cost > limit {
        None
    } else {
        // Oldest entries age out first; find the one whose leaving makes room.
        let mut counted = log.counted;
        log.entries.iter().find_map(|&(t, c)| {
            counted -= c;
            (counted + cost <= limit).then(|| wait(t, w, now))
        })
    };
    let reset_after_ms = log.entries.back().map_or(0, |&(t, _)| wait(t, w, now));
    Decision {
        allowed,
        limit,
        remaining: super::remaining(u128::from(limit.saturating_sub(log.counted))),
        retry_after_ms,
        reset_after_ms,
        permit: None,
    }
}

/// When an admission at `now_ms` is logged: at `now_ms` while the log is
/// short, else at the end of its bucket; never before the newest entry, so
/// the log stays in order.
fn logged_ms(entries: &VecDeque<(u64, u64)>, now_ms: u64, q: u64) -> u64 {
    let at = if entries.len() < LOG_EXACT_ENTRIES {
        now_ms
    } else {
        bucket_end(now_ms, q)
    };
    entries.back().map_or(at, |&(newest, _)| at.max(newest))
}

/// ceil(t / q)·q: the end of `t`'s bucket (t itself when on a boundary).
fn bucket_end(t: u64, q: u64) -> u64 {
    t.div_ceil(q).saturating_mul(q)
}

/// Moves every entry to its bucket's end and merges equal times: later,
/// never earlier, so nothing counts less; the result is at most
/// `LOG_EXACT_ENTRIES + 1` entries.
fn coalesce(entries: &mut VecDeque<(u64, u64)>, q: u64) {
    let mut merged: VecDeque<(u64, u64)> = VecDeque::with_capacity(LOG_EXACT_ENTRIES + 1);
    for &(t, c) in entries.iter() {
        let at = bucket_end(t, q);
        match merged.back_mut() {
            Some((last, sum)) if *last == at => *sum += c,
            _ => merged.push_back((at, c)),
        }
    }
    *entries = merged;
}

fn wait(t: u64, w: u128, now: u128) -> u64 {
    super::saturate(u128::from(t) + w - now)
}

/// Gives back up to `units` from the entry of a [`Taken`], while it still
/// counts; returns how many went back. A take was logged at its own
/// millisecond or at its bucket's end (a long log): the former is tried
/// first, since giving back from an entry that counts longer than the
/// take's would free room early.
pub(super) fn give_back(
    window: &Window,
    state: &mut Option<LogState>,
    now_ms: u64,
    units: u64,
    taken: Taken,
) -> u64 {
    let Some(log) = state.as_mut() else { return 0 };
    let now_ms = now_ms.max(log.last_ms);
    let w = u128::from(window.window_ms());
    let q = log_bucket_ms(window.window_ms());
    for at in [taken.at_ms, bucket_end(taken.at_ms, q)] {
        if u128::from(at) + w <= u128::from(now_ms) {
            continue;
        }
        let Some(i) = log.entries.iter().position(|&(t, _)| t == at) else {
            continue;
        };
        let given = units.min(log.entries[i].1);
        if given > 0 {
            log.entries[i].1 -= given;
            log.counted -= given;
            log.last_ms = now_ms;
            if log.entries[i].1 == 0 {
                log.entries.remove(i);
            }
        }
        return given;
    }
    0
}

/// How long, with no traffic, until a request of cost 1 would be admitted
/// at `now_ms` (0: it would be now): what a cost-1 probe's `retry_after_ms`
/// says, without the probe's writes, so a store can tell a limiting log
/// from one that is not.
pub(super) fn wait_for_one_ms(window: &Window, log: &LogState, now_ms: u64) -> u64 {
    let w = u128::from(window.window_ms());
    let now = u128::from(now_ms.max(log.last_ms));
    // Just after a decision nothing has aged out, so this is O(1) unless
    // the log is limiting (then as long as a rejection's own wait).
    let mut counted = log.counted;
    for &(t, c) in &log.entries {
        let counts = u128::from(t) + w > now;
        if counts && counted < window.limit() {
            return 0;
        }
        counted -= c;
        if counts && counted < window.limit() {
            return wait(t, w, now);
        }
    }
    0
}

/// A refund ([`Taken::REFUND`]): gives back up to `units` from the newest
/// entries that still count, newest first; returns how many went back.
/// Never below empty: at most what the log still counts.
pub(super) fn refund(window: &Window, log: &mut LogState, now_ms: u64, units: u64) -> u64 {
    let now_ms = now_ms.max(log.last_ms);
    let w = u128::from(window.window_ms());
    let mut given = 0;
    while given < units {
        let Some((t, c)) = log.entries.back_mut() else {
            break;
        };
        if u128::from(*t) + w <= u128::from(now_ms) {
            break;
        }
        let take = (units - given).min(*c);
        *c -= take;
        given += take;
        if *c == 0 {
            log.entries.pop_back();
        }
    }
    if given > 0 {
        log.counted -= given;
        log.last_ms = now_ms;
    }
    given
}
