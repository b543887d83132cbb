//! The six algorithms as pure state transitions on integers.
//!
//! Each algorithm is a function of (limits, stored state, now, cost) that
//! returns a [`Decision`] and rewrites the state in place. Nothing here reads
//! a clock, allocates on the common path, or touches a float. Stores hold a
//! [`State`] per key and call [`Limits::decide`] under their own atomicity.
//! A concurrency acquire also takes the id of the permit it would hold
//! ([`Limits::decide_permit`]), and a release is [`Limits::release`].

mod concurrency;
mod fixed_window;
mod gcra;
mod sliding_log;
mod sliding_window;
mod token_bucket;

pub use concurrency::{Held, PermitState, Released};
pub use fixed_window::WindowCount;
pub use gcra::GcraState;
pub use sliding_log::{LOG_EXACT_ENTRIES, LOG_MAX_ENTRIES, LogState, log_bucket_ms};
pub use sliding_window::SlidingCount;
pub use token_bucket::BucketState;

use crate::decision::Decision;
use crate::permit::PermitId;
use crate::policy::Limits;

/// Calls `function` of the policy's algorithm module on its own state
/// (another algorithm's state is taken as absent) and puts the state back.
macro_rules! on_own_state {
    ($limits:expr, $state:expr, $function:ident($($arg:expr),*)) => {{
        let state: &mut Option<State> = $state;
        match $limits {
            Limits::TokenBucket(p) => on_own_state!(@ state, TokenBucket, token_bucket, $function, p, $($arg),*),
            Limits::Gcra(p) => on_own_state!(@ state, Gcra, gcra, $function, p, $($arg),*),
            Limits::FixedWindow(p) => on_own_state!(@ state, FixedWindow, fixed_window, $function, p, $($arg),*),
            Limits::SlidingWindow(p) => on_own_state!(@ state, SlidingWindow, sliding_window, $function, p, $($arg),*),
            Limits::SlidingLog(p) => on_own_state!(@ state, SlidingLog, sliding_log, $function, p, $($arg),*),
            Limits::Concurrency(p) => on_own_state!(@ state, Concurrency, concurrency, $function, p, $($arg),*),
        }
    }};
    (@ $state:ident, $variant:ident, $module:ident, $function:ident, $params:expr, $($arg:expr),*) => {{
        let mut slot = match $state.take() {
            Some(State::$variant(s)) => Some(s),
            _ => None,
        };
        let out = $module::$function($params, &mut slot, $($arg),*);
        *$state = slot.map(State::$variant);
        out
    }};
}

/// What a decision may do to the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// Admit and consume when the cost fits: the normal decision.
    Consume,
    /// Say whether the cost would fit, consume nothing: the first pass of an
    /// all-or-nothing decision across several policies. It still advances the
    /// key's `last_seen`, as every decision does.
    Probe,
}

/// The stored state of one key. A state of another algorithm (a policy whose
/// algorithm changed) is treated as absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// State of a [`Limits::TokenBucket`] key.
    TokenBucket(BucketState),
    /// State of a [`Limits::Gcra`] key.
    Gcra(GcraState),
    /// State of a [`Limits::FixedWindow`] key.
    FixedWindow(WindowCount),
    /// State of a [`Limits::SlidingWindow`] key.
    SlidingWindow(SlidingCount),
    /// State of a [`Limits::SlidingLog`] key.
    SlidingLog(LogState),
    /// State of a [`Limits::Concurrency`] key.
    Concurrency(PermitState),
}

impl State {
    /// The key's own clock: the latest time it has seen (every algorithm but
    /// gcra keeps one). A decision's `reset_after_ms` counts from it, so a
    /// store computing when the state expires must too.
    pub fn clock_ms(&self) -> Option<u64> {
        match self {
            State::TokenBucket(s) => Some(s.last_ms),
            State::Gcra(_) => None,
            State::FixedWindow(s) => Some(s.last_ms),
            State::SlidingWindow(s) => Some(s.last_ms),
            State::SlidingLog(s) => Some(s.last_ms),
            State::Concurrency(_) => None,
        }
    }

    /// When this state, left alone, is back to full or empty and may be
    /// forgotten unobservably: the key's clock plus the decision's reset.
    pub fn expires_at_ms(&self, now_ms: u64, decision: &Decision) -> u64 {
        self.clock_ms()
            .map_or(now_ms, |clock| clock.max(now_ms))
            .saturating_add(decision.reset_after_ms)
    }
}

impl Limits {
    /// Decides `cost` at `now_ms` and consumes it when admitted.
    pub fn decide(&self, state: &mut Option<State>, now_ms: u64, cost: u64) -> Decision {
        self.decide_with(state, now_ms, cost, Intent::Consume)
    }

    /// Decides with an explicit [`Intent`]. A missing state is a new key; a
    /// state left `None` afterwards means there is nothing worth storing.
    /// A concurrency acquire here holds the permit [`PermitId::UNNAMED`]:
    /// a store that hands permits out names each ([`Limits::decide_permit`]).
    pub fn decide_with(
        &self,
        state: &mut Option<State>,
        now_ms: u64,
        cost: u64,
        intent: Intent,
    ) -> Decision {
        self.decide_permit(state, now_ms, cost, intent, PermitId::UNNAMED)
    }

    /// [`Limits::decide_with`], a concurrency acquire holding `permit`
    /// when admitted (its decision says so); other algorithms ignore it.
    // Inlined where a store decides: a stored gcra state whose values fit
    // 64 bits (every common policy's) is decided there, in u64, with no
    // call and no copy of the state; everything else is one call.
    #[inline(always)]
    pub fn decide_permit(
        &self,
        state: &mut Option<State>,
        now_ms: u64,
        cost: u64,
        intent: Intent,
        permit: PermitId,
    ) -> Decision {
        if let (Limits::Gcra(rate), Some(State::Gcra(s))) = (self, &mut *state)
            && let Some(decision) =
                gcra::decide_narrow(rate, s, now_ms, cost, intent == Intent::Consume)
        {
            return decision;
        }
        self.decide_any(state, now_ms, cost, intent, permit)
    }

    /// [`Limits::decide_permit`] for any state, out of line.
    #[inline(never)]
    fn decide_any(
        &self,
        state: &mut Option<State>,
        now_ms: u64,
        cost: u64,
        intent: Intent,
        permit: PermitId,
    ) -> Decision {
        let consume = intent == Intent::Consume;
        // A token bucket's in u64 when it fits, as gcra's is; here, out of
        // line, and not in `decide_permit`: inlined there beside gcra's, it
        // cost gcra's own decision some 20 instructions.
        if let (Limits::TokenBucket(rate), Some(State::TokenBucket(s))) = (self, &mut *state)
            && let Some(decision) = token_bucket::decide_narrow(rate, s, now_ms, cost, consume)
        {
            return decision;
        }
        // A Copy state is decided where it lies: copied out of its variant
        // and back, not the whole `State` moved out of the store's slot and
        // in again. The log, which is not Copy, is moved.
        macro_rules! in_place {
            ($variant:ident, $module:ident, $params:expr) => {{
                if let Some(State::$variant(s)) = state {
                    let mut own = Some(*s);
                    let out = $module::decide($params, &mut own, now_ms, cost, consume);
                    match own {
                        Some(own) => *s = own,
                        None => *state = None,
                    }
                    out
                } else {
                    on_own_state!(@ state, $variant, $module, decide, $params, now_ms, cost, consume)
                }
            }};
        }
        match self {
            Limits::TokenBucket(p) => in_place!(TokenBucket, token_bucket, p),
            Limits::Gcra(p) => in_place!(Gcra, gcra, p),
            Limits::FixedWindow(p) => in_place!(FixedWindow, fixed_window, p),
            Limits::SlidingWindow(p) => in_place!(SlidingWindow, sliding_window, p),
            Limits::SlidingLog(p) => {
                on_own_state!(@ state, SlidingLog, sliding_log, decide, p, now_ms, cost, consume)
            }
            Limits::Concurrency(p) => {
                on_own_state!(@ state, Concurrency, concurrency, decide, p, now_ms, cost, consume, permit)
            }
        }
    }

    /// Frees `permit` at `now_ms` when these limits hold permits and it is
    /// held; what it found. A rate's state holds no permit: `Unknown`.
    pub fn release(&self, state: &mut Option<State>, now_ms: u64, permit: PermitId) -> Released {
        let Limits::Concurrency(_) = self else {
            return Released::Unknown;
        };
        let mut own = match state.take() {
            Some(State::Concurrency(s)) => Some(s),
            other => {
                *state = other;
                return Released::Unknown;
            }
        };
        let found = concurrency::release(&mut own, now_ms, permit);
        *state = own.map(State::Concurrency);
        found
    }

    /// The first ms at which a request of cost 1 would be admitted if
    /// nothing else arrives: `now_ms` (or the key's own later clock) when
    /// `state` is not limiting. Left alone a state only recovers, so a store
    /// that keeps this beside a state knows, at any later time, whether the
    /// state is still limiting — whether forgetting it would hand its
    /// identity back a quota it has spent — without the policy at hand.
    pub fn admits_one_from_ms(&self, state: &State, now_ms: u64) -> u64 {
        // A cost-1 probe on a copy (these states are Copy) is the exact
        // answer; gcra reads it off its arrival time, and the log, which
        // is not Copy, has its own read-only count.
        let wait = match (self, state) {
            (Limits::TokenBucket(r), State::TokenBucket(s)) => {
                token_bucket::decide(r, &mut Some(*s), now_ms, 1, false).retry_after_ms
            }
            (Limits::Gcra(r), State::Gcra(s)) => match gcra::admits_one_from_ms(r, s, now_ms) {
                Some(from) => return from,
                None => gcra::decide(r, &mut Some(*s), now_ms, 1, false).retry_after_ms,
            },
            (Limits::FixedWindow(w), State::FixedWindow(s)) => {
                fixed_window::decide(w, &mut Some(*s), now_ms, 1, false).retry_after_ms
            }
            (Limits::SlidingWindow(w), State::SlidingWindow(s)) => {
                sliding_window::decide(w, &mut Some(*s), now_ms, 1, false).retry_after_ms
            }
            (Limits::SlidingLog(w), State::SlidingLog(s)) => {
                Some(sliding_log::wait_for_one_ms(w, s, now_ms))
            }
            (Limits::Concurrency(p), State::Concurrency(s)) => {
                return concurrency::admits_one_from_ms(p, s, now_ms);
            }
            // Another algorithm's state is taken as absent: a new key, and
            // every limit admits at least one unit.
            _ => Some(0),
        };
        // `None`: cost 1 exceeds the limit, which validation rules out.
        let from = state.clock_ms().map_or(now_ms, |clock| clock.max(now_ms));
        wait.map_or(u64::MAX, |wait| from.saturating_add(wait))
    }

    /// Gives back up to `units` consumed at `taken` and never used, as far
    /// as the state can take them back exactly ([`Taken`]); returns how
    /// many went back. No state (forgotten, expired) takes nothing: what it
    /// held is already free.
    pub fn give_back(
        &self,
        state: &mut Option<State>,
        now_ms: u64,
        units: u64,
        taken: Taken,
    ) -> u64 {
        // Another algorithm's state is not this policy's to change.
        let own = matches!(
            (self, state.as_ref()),
            (_, None)
                | (Limits::TokenBucket(_), Some(State::TokenBucket(_)))
                | (Limits::Gcra(_), Some(State::Gcra(_)))
                | (Limits::FixedWindow(_), Some(State::FixedWindow(_)))
                | (Limits::SlidingWindow(_), Some(State::SlidingWindow(_)))
                | (Limits::SlidingLog(_), Some(State::SlidingLog(_)))
                | (Limits::Concurrency(_), Some(State::Concurrency(_)))
        );
        if !own {
            return 0;
        }
        if !taken.is_refund() {
            return on_own_state!(self, state, give_back(now_ms, units, taken));
        }
        // A refund's take has no known time: a bucket fills back up to
        // full (refill that arrived since counts toward it), a log gives
        // back from its newest entries, a window from its current count.
        match (self, state.as_mut()) {
            (Limits::TokenBucket(rate), Some(State::TokenBucket(s))) => {
                return token_bucket::refund(rate, s, now_ms, units);
            }
            (Limits::Gcra(rate), Some(State::Gcra(s))) => {
                return gcra::refund(rate, s, now_ms, units);
            }
            (Limits::SlidingLog(window), Some(State::SlidingLog(log))) => {
                return sliding_log::refund(window, log, now_ms, units);
            }
            (_, None) => return 0,
            _ => {}
        }
        let now = Taken {
            at_ms: now_ms,
            full_at_ms: u64::MAX,
        };
        on_own_state!(self, state, give_back(now_ms, units, now))
    }
}

/// Where units consumed ahead of their use (a hot-lease block) came from, so
/// the unused ones can be given back exactly ([`Limits::give_back`]): the
/// store's clock when it consumed them, and when the state it left would
/// have been whole again (`at_ms + reset_after_ms` of that decision).
///
/// Why a give-back is exact: for a window, the units leave the count of the
/// window they were counted in, and nothing else. For a bucket, taking `g`
/// units back at `t` leaves the state it would have had if they had never
/// been consumed, provided that state could not have filled up in between
/// (a full bucket discards refill, so the two states would have met). It
/// cannot while `g` tokens of refill fit in `full_at_ms − 1 − t`: the state
/// just after the take was more than `(full_at_ms − 1 − at_ms)·n` units
/// from full, and later decisions only take more. So a bucket gives back at
/// most that, on the store's own clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    /// The store's clock at the decision that consumed the units.
    pub at_ms: u64,
    /// When the state that decision left would have been whole again.
    pub full_at_ms: u64,
}

impl Taken {
    /// Units given back whose take is not known (Envoy's `is_negative_hits`,
    /// `/v1/check`'s `refund`): bounded by the state alone, never past
    /// full or below empty. No real take is at `u64::MAX`.
    pub const REFUND: Taken = Taken {
        at_ms: u64::MAX,
        full_at_ms: u64::MAX,
    };

    /// Whether this is [`Taken::REFUND`].
    pub fn is_refund(self) -> bool {
        self == Self::REFUND
    }

    /// The store's decision at `at_ms` that consumed the units.
    pub fn new(at_ms: u64, decision: &Decision) -> Self {
        Self {
            at_ms,
            full_at_ms: at_ms.saturating_add(decision.reset_after_ms),
        }
    }

    /// Refill time a bucket may give back at `now_ms` (see above).
    fn span_ms(self, now_ms: u64) -> u128 {
        u128::from(self.full_at_ms.saturating_sub(1).saturating_sub(now_ms))
    }
}

/// A u128 intermediate brought back to u64; saturates rather than wraps.
fn saturate(x: u128) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

/// `x / d` in u64, with no division for 1 (n or p is 1 whenever one of a
/// policy's N and P divides the other): the narrow paths' division.
#[inline(always)]
fn div_floor64(x: u64, d: u64) -> u64 {
    if d == 1 { x } else { x / d }
}

/// ⌈x / d⌉, as [`div_floor64`].
#[inline(always)]
fn div_ceil64(x: u64, d: u64) -> u64 {
    if d == 1 { x } else { x.div_ceil(d) }
}

/// `x / d` for a u128 `x` and a u64 divisor: the same integer, in u64
/// when `x` fits (it does for any common policy: a u128 division is a call
/// of some 30 instructions, a u64 one is one), and none at all for 1 (n or
/// p is 1 whenever one of a policy's N and P divides the other).
#[inline]
fn div_floor(x: u128, d: u64) -> u128 {
    if d == 1 {
        x
    } else if let Ok(x) = u64::try_from(x) {
        u128::from(x / d)
    } else {
        x / u128::from(d)
    }
}

/// ⌈x / d⌉, as [`div_floor`].
#[inline]
fn div_ceil(x: u128, d: u64) -> u128 {
    if d == 1 {
        x
    } else if let Ok(x) = u64::try_from(x) {
        u128::from(x.div_ceil(d))
    } else {
        x.div_ceil(u128::from(d))
    }
}

/// A count of whole units as a decision's `remaining`.
fn remaining(x: u128) -> i64 {
    i64::try_from(x).unwrap_or(i64::MAX)
}

/// Values for the narrow paths' property tests (gcra, token_bucket):
/// small ones, and large ones whose products cross 64 bits (and stay well
/// inside the u128 path's own range).
#[cfg(test)]
fn small_and_wide() -> impl proptest::strategy::Strategy<Value = u64> {
    proptest::prop_oneof![0u64..=1_000, 1u64 << 20..=1 << 40]
}

#[cfg(test)]
mod tests {
    use super::{div_ceil, div_floor};

    #[test]
    fn the_u64_division_path_gives_the_u128_quotient() {
        let big = u128::from(u64::MAX) * 3 + 7;
        for (x, d) in [
            (0u128, 1u64),
            (0, 7),
            (99, 1),
            (99, 10),
            (100, 10),
            (u128::from(u64::MAX), 2),
            (u128::from(u64::MAX) + 1, 2),
            (big, 3),
            (big, u64::MAX),
        ] {
            assert_eq!(div_floor(x, d), x / u128::from(d), "{x} / {d}");
            assert_eq!(div_ceil(x, d), x.div_ceil(u128::from(d)), "⌈{x} / {d}⌉");
        }
    }
}
