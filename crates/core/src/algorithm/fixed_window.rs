//! fixed_window: a count per epoch-aligned window.

use super::Taken;
use super::saturate;
use crate::decision::Decision;
use crate::policy::Window;

/// Stored state: the count of window `index` (of `window_ms` ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowCount {
    /// The window length the count was taken under, so a changed policy
    /// carries the count over until its own window ends.
    pub window_ms: u64,
    /// Which window, counted from the Unix epoch: `floor(now / window_ms)`.
    pub index: u64,
    /// Cost admitted in that window.
    pub count: u64,
    /// The key's clock: it never runs backward, so a stepping clock mints nothing.
    pub last_ms: u64,
}

pub(super) fn decide(
    window: &Window,
    state: &mut Option<WindowCount>,
    now_ms: u64,
    cost: u64,
    consume: bool,
) -> Decision {
    let w = window.window_ms();
    let limit = window.limit();
    let now_ms = state.as_ref().map_or(now_ms, |s| now_ms.max(s.last_ms));
    let index = now_ms / w;
    let count = state
        .as_ref()
        .map_or(0, |s| current_count(s, w, index, now_ms));
    let allowed = u128::from(count) + u128::from(cost) <= u128::from(limit);
    let count_after = if allowed && consume {
        count + cost
    } else {
        count
    };
    *state = Some(WindowCount {
        window_ms: w,
        index,
        count: count_after,
        last_ms: now_ms,
    });
    let reset_after_ms = saturate((u128::from(index) + 1) * u128::from(w) - u128::from(now_ms));
    Decision {
        allowed,
        limit,
        remaining: super::remaining(u128::from(limit.saturating_sub(count_after))),
        retry_after_ms: if allowed {
            Some(0)
        } else if cost > limit {
            None
        } else {
            Some(reset_after_ms)
        },
        reset_after_ms,
        permit: None,
    }
}

/// The count that applies now. Under a changed window length the old count
/// carries into the current window while its own window has not ended, so
/// a change never frees capacity early.
fn current_count(s: &WindowCount, w: u64, index: u64, now_ms: u64) -> u64 {
    if s.window_ms == w {
        return if s.index == index { s.count } else { 0 };
    }
    let old_end = (u128::from(s.index) + 1) * u128::from(s.window_ms);
    if old_end > u128::from(now_ms) {
        s.count
    } else {
        0
    }
}

/// Gives back up to `units` counted in the window of a [`Taken`]; returns
/// how many went back. Only within that window: once it has ended its count
/// no longer binds, and the next window owes nothing.
pub(super) fn give_back(
    window: &Window,
    state: &mut Option<WindowCount>,
    now_ms: u64,
    units: u64,
    taken: Taken,
) -> u64 {
    let w = window.window_ms();
    let Some(s) = state.as_mut() else { return 0 };
    let now_ms = now_ms.max(s.last_ms);
    if s.window_ms != w || s.index != now_ms / w || taken.at_ms / w != s.index {
        return 0;
    }
    let given = units.min(s.count);
    if given > 0 {
        s.count -= given;
        s.last_ms = now_ms;
    }
    given
}
