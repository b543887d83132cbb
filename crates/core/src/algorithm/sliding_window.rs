//! sliding_window (counter): the previous window's count weighted by how
//! much of it still overlaps the sliding window, in integers.

use super::Taken;
use super::saturate;
use crate::decision::Decision;
use crate::policy::Window;

/// Stored state: counts of window `index` (`curr`) and the one before (`prev`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingCount {
    /// The window length the counts were taken under, so a changed policy
    /// never frees capacity early.
    pub window_ms: u64,
    /// Which window `curr` belongs to, counted from the Unix epoch.
    pub index: u64,
    /// Cost admitted in window `index − 1`; a decision weights it by how much
    /// of that window still overlaps the sliding one.
    pub prev: u64,
    /// Cost admitted in window `index`.
    pub curr: u64,
    /// The key's clock: it never runs backward, so a stepping clock mints nothing.
    pub last_ms: u64,
}

pub(super) fn decide(
    window: &Window,
    state: &mut Option<SlidingCount>,
    now_ms: u64,
    cost: u64,
    consume: bool,
) -> Decision {
    let w = u128::from(window.window_ms());
    let limit = u128::from(window.limit());
    let now_ms = state.as_ref().map_or(now_ms, |s| now_ms.max(s.last_ms));
    let index = now_ms / window.window_ms();
    let (prev, curr) = state.as_ref().map_or((0, 0), |s| {
        current_counts(s, window.window_ms(), index, now_ms)
    });
    let now = u128::from(now_ms);
    let start = u128::from(index) * w;
    let elapsed = now - start;
    let (prev, curr, cost) = (u128::from(prev), u128::from(curr), u128::from(cost));
    let weighted_prev = prev * (w - elapsed);
    let allowed = weighted_prev + (curr + cost) * w <= limit * w;
    let curr_after = if allowed && consume {
        curr + cost
    } else {
        curr
    };
    *state = Some(SlidingCount {
        window_ms: window.window_ms(),
        index,
        prev: saturate(prev),
        curr: saturate(curr_after),
        last_ms: now_ms,
    });
    let used = weighted_prev + curr_after * w;
    let remaining = (limit * w).saturating_sub(used) / w;
    let retry_after_ms = if allowed {
        Some(0)
    } else if cost > limit {
        None
    } else {
        Some(saturate(retry_after(
            w, limit, prev, curr, cost, start, now,
        )))
    };
    let reset_after_ms = if curr_after > 0 {
        start + 2 * w - now
    } else if prev > 0 {
        start + w - now
    } else {
        0
    };
    Decision {
        allowed,
        limit: window.limit(),
        remaining: super::remaining(remaining),
        retry_after_ms,
        reset_after_ms: saturate(reset_after_ms),
        permit: None,
    }
}

/// The exact smallest wait after which a rejected `cost` (≤ limit) fits, if
/// nothing else arrives. It may fall in this window (prev's weight fades),
/// the next (curr becomes prev and fades), or the one after (both gone).
fn retry_after(
    w: u128,
    limit: u128,
    prev: u128,
    curr: u128,
    cost: u128,
    start: u128,
    now: u128,
) -> u128 {
    let elapsed = now - start;
    // In this window: prev·(w − e') ≤ L·w − (curr + cost)·w.
    if let Some(max_weight) = (limit * w)
        .checked_sub((curr + cost) * w)
        .and_then(|room| room.checked_div(prev))
    {
        return (w - elapsed) - max_weight.min(w - elapsed);
    }
    // In the next window, curr fades: curr·(w − e') ≤ (L − cost)·w.
    let next = start + w - now;
    if curr == 0 {
        return next;
    }
    let max_weight = ((limit - cost) * w) / curr;
    next + (w - max_weight.min(w))
}

/// The (prev, curr) counts that apply in window `index`. Under a changed
/// window length everything the old state counted stays counted in the
/// current window while it is recent, so a change never frees capacity early.
fn current_counts(s: &SlidingCount, w: u64, index: u64, now_ms: u64) -> (u64, u64) {
    if s.window_ms == w {
        return match index - s.index {
            0 => (s.prev, s.curr),
            1 => (s.curr, 0),
            _ => (0, 0),
        };
    }
    let horizon = u128::from(s.last_ms) + 2 * u128::from(s.window_ms.max(w));
    if horizon > u128::from(now_ms) {
        (0, s.prev.saturating_add(s.curr))
    } else {
        (0, 0)
    }
}

/// Gives back up to `units` counted in the window of a [`Taken`], while that
/// window is the current or the previous one (still weighted); returns how
/// many went back.
pub(super) fn give_back(
    window: &Window,
    state: &mut Option<SlidingCount>,
    now_ms: u64,
    units: u64,
    taken: Taken,
) -> u64 {
    let w = window.window_ms();
    let Some(s) = state.as_mut() else { return 0 };
    let now_ms = now_ms.max(s.last_ms);
    let index = now_ms / w;
    if s.window_ms != w {
        return 0;
    }
    // Bring the counts to the current window first, as a decision would.
    let (mut prev, mut curr) = current_counts(s, w, index, now_ms);
    let given = match index.checked_sub(taken.at_ms / w) {
        Some(0) => {
            let given = units.min(curr);
            curr -= given;
            given
        }
        Some(1) => {
            let given = units.min(prev);
            prev -= given;
            given
        }
        _ => 0,
    };
    // Nothing given back writes nothing, as in the Redis script.
    if given > 0 {
        *s = SlidingCount {
            window_ms: w,
            index,
            prev,
            curr,
            last_ms: now_ms,
        };
    }
    given
}
