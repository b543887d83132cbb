//! sliding_log: every admitted cost logged with its time; it counts while
//! `now < t + W`. Memory grows with the limit, which config bounds.

use std::collections::VecDeque;

use super::Taken;
use crate::decision::Decision;
use crate::policy::Window;

/// Stored state: admitted (time, cost) entries, oldest first, with their sum.
/// Entries of one millisecond are merged, so a burst costs one entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogState {
    /// `(time_ms, cost)` of each admitted request still possibly counting.
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
    let allowed = u128::from(log.counted) + u128::from(cost) <= u128::from(limit);
    if allowed && consume && cost > 0 {
        match log.entries.back_mut() {
            Some((t, c)) if *t == now_ms => *c += cost,
            _ => log.entries.push_back((now_ms, cost)),
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
    }
}

fn wait(t: u64, w: u128, now: u128) -> u64 {
    super::saturate(u128::from(t) + w - now)
}

/// Gives back up to `units` from the entry of a [`Taken`]'s millisecond,
/// while it still counts; returns how many went back.
pub(super) fn give_back(
    window: &Window,
    state: &mut Option<LogState>,
    now_ms: u64,
    units: u64,
    taken: Taken,
) -> u64 {
    let Some(log) = state.as_mut() else { return 0 };
    let now_ms = now_ms.max(log.last_ms);
    if u128::from(taken.at_ms) + u128::from(window.window_ms()) <= u128::from(now_ms) {
        return 0;
    }
    let Some(i) = log.entries.iter().position(|&(t, _)| t == taken.at_ms) else {
        return 0;
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
    given
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
