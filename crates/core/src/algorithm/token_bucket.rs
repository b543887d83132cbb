//! token_bucket: (units, last_ms) in the policy's fixed-point scale.

use super::Taken;
use super::{div_ceil, div_floor, saturate};
use crate::decision::Decision;
use crate::policy::Rate;

/// Stored state. `units_per_token` records the scale the units are counted
/// in, so a policy change converts them instead of minting a fresh burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketState {
    /// Tokens available, counted in units (a token is `units_per_token` units).
    pub units: u64,
    /// The key's clock and the instant `units` was true at.
    pub last_ms: u64,
    /// The p the units are counted in.
    pub units_per_token: u64,
}

// Inlined into `Limits::decide`, so the state is decided where it lies.
#[inline]
pub(super) fn decide(
    rate: &Rate,
    state: &mut Option<BucketState>,
    now_ms: u64,
    cost: u64,
    consume: bool,
) -> Decision {
    let full = rate.capacity_units();
    let n = u128::from(rate.units_per_ms());
    let p = u128::from(rate.units_per_token());
    let (units, last_ms) = match state {
        Some(s) => (carry_over(s, rate), s.last_ms),
        None => (full, now_ms),
    };
    let now_ms = now_ms.max(last_ms);
    // u64 elapsed times u64 rate cannot leave u128; min() caps at capacity.
    let refill = u128::from(now_ms - last_ms) * n;
    let avail = full.min(units.saturating_add(refill));
    let need = u128::from(cost) * p;
    let allowed = need <= avail;
    let left = if allowed && consume {
        avail - need
    } else {
        avail
    };
    *state = Some(BucketState {
        units: saturate(left),
        last_ms: now_ms,
        units_per_token: rate.units_per_token(),
    });
    Decision {
        allowed,
        limit: rate.capacity(),
        remaining: super::remaining(div_floor(left, rate.units_per_token())),
        retry_after_ms: if allowed {
            Some(0)
        } else if cost > rate.capacity() {
            None
        } else {
            Some(saturate(div_ceil(need - avail, rate.units_per_ms())))
        },
        reset_after_ms: saturate(div_ceil(full - left, rate.units_per_ms())),
        permit: None,
    }
}

/// Units in the current scale: tokens are preserved (rounded down, never
/// up), capped at the current capacity.
fn carry_over(s: &BucketState, rate: &Rate) -> u128 {
    let units = if s.units_per_token == rate.units_per_token() || s.units_per_token == 0 {
        u128::from(s.units)
    } else {
        u128::from(s.units) * u128::from(rate.units_per_token()) / u128::from(s.units_per_token)
    };
    units.min(rate.capacity_units())
}

/// Gives back up to `units` tokens consumed at a [`Taken`]; returns how many
/// went back. Only while the bucket, had they never been consumed, could not
/// have filled since (`full_at_ms − 1` from now, in refill): then the state
/// is exactly what it would be without them. Never past full; a state in
/// another scale takes nothing back.
pub(super) fn give_back(
    rate: &Rate,
    state: &mut Option<BucketState>,
    now_ms: u64,
    units: u64,
    taken: Taken,
) -> u64 {
    let Some(s) = state.as_mut() else { return 0 };
    if s.units_per_token != rate.units_per_token() {
        return 0;
    }
    let full = rate.capacity_units();
    let n = u128::from(rate.units_per_ms());
    let p = u128::from(rate.units_per_token());
    let now_ms = now_ms.max(s.last_ms);
    let refill = u128::from(now_ms - s.last_ms) * n;
    let avail = full.min(u128::from(s.units).saturating_add(refill));
    let room = (full - avail).min(taken.span_ms(now_ms) * n);
    let given = u128::from(units).min(room / p);
    // Nothing given back writes nothing, as in the Redis script.
    if given > 0 {
        s.units = saturate(avail + given * p);
        s.last_ms = now_ms;
    }
    saturate(given)
}

/// A refund ([`Taken::REFUND`]): up to `units` tokens back, never past
/// full. Unlike a give-back it may leave a fraction of a token: refill that
/// arrived since the take fills part of the room, and the bucket ends full
/// rather than a token short. Returns the tokens given back, a part of
/// one counted as one.
pub(super) fn refund(rate: &Rate, s: &mut BucketState, now_ms: u64, units: u64) -> u64 {
    if s.units_per_token != rate.units_per_token() {
        return 0;
    }
    let full = rate.capacity_units();
    let n = u128::from(rate.units_per_ms());
    let p = u128::from(rate.units_per_token());
    let now_ms = now_ms.max(s.last_ms);
    let refill = u128::from(now_ms - s.last_ms) * n;
    let avail = full.min(u128::from(s.units).saturating_add(refill));
    let back = (full - avail).min(u128::from(units) * p);
    if back > 0 {
        s.units = saturate(avail + back);
        s.last_ms = now_ms;
    }
    saturate(back.div_ceil(p))
}
