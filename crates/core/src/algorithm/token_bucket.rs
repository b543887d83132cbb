//! token_bucket: (units, last_ms) in the policy's fixed-point scale.

use super::Taken;
use super::{div_ceil, div_ceil64, div_floor, div_floor64, saturate};
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

/// [`decide`] on a stored state of the policy's own scale, in u64: the
/// same decision and the same state, with no u128 arithmetic (a u128
/// division is a call of some 30 instructions). `None`, with the state
/// untouched, when the state was counted under another scale or the
/// capacity or the cost in units does not fit 64 bits: [`decide`]
/// answers then. A refill past 64 bits fills the bucket on either path.
#[inline(always)]
pub(super) fn decide_narrow(
    rate: &Rate,
    s: &mut BucketState,
    now_ms: u64,
    cost: u64,
    consume: bool,
) -> Option<Decision> {
    let (n, p, capacity) = (rate.units_per_ms(), rate.units_per_token(), rate.capacity());
    if s.units_per_token != p {
        return None;
    }
    let full = u64::try_from(rate.capacity_units()).ok()?;
    let need = cost.checked_mul(p)?;
    let now_ms = now_ms.max(s.last_ms);
    let refill = (now_ms - s.last_ms).saturating_mul(n);
    let avail = full.min(s.units.min(full).saturating_add(refill));
    let allowed = need <= avail;
    let left = if allowed && consume {
        avail - need
    } else {
        avail
    };
    *s = BucketState {
        units: left,
        last_ms: now_ms,
        units_per_token: p,
    };
    Some(Decision {
        allowed,
        limit: capacity,
        remaining: i64::try_from(div_floor64(left, p)).unwrap_or(i64::MAX),
        retry_after_ms: if allowed {
            Some(0)
        } else if cost > capacity {
            None
        } else {
            Some(div_ceil64(need - avail, n))
        },
        reset_after_ms: div_ceil64(full - left, n),
        permit: None,
    })
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{BucketState, decide, decide_narrow};
    use crate::algorithm::small_and_wide;
    use crate::policy::Rate;

    proptest! {
        #[test]
        fn the_u64_path_decides_as_the_u128_one_or_declines(
            (capacity, tokens, per_ms) in (small_and_wide(), small_and_wide(), small_and_wide()),
            now_ms in prop_oneof![0u64..=1_000, 1u64 << 20..=1 << 44, Just(u64::MAX)],
            last_ms in prop_oneof![0u64..=1_000, 1u64 << 20..=1 << 44],
            units in prop_oneof![0u64..=1_000, any::<u64>()],
            other_scale in any::<bool>(),
            cost in prop_oneof![small_and_wide(), Just(u64::MAX)],
            consume in any::<bool>(),
        ) {
            let Some(rate) = Rate::new(capacity, tokens, per_ms) else { return Ok(()) };
            let state = BucketState {
                units,
                last_ms,
                units_per_token: if other_scale { rate.units_per_token() + 1 } else { rate.units_per_token() },
            };
            let mut wide = Some(state);
            let expected = decide(&rate, &mut wide, now_ms, cost, consume);
            let mut narrow = state;
            match decide_narrow(&rate, &mut narrow, now_ms, cost, consume) {
                Some(decision) => {
                    prop_assert!(!other_scale);
                    prop_assert_eq!(decision, expected);
                    prop_assert_eq!(Some(narrow), wide);
                }
                None => prop_assert_eq!(narrow, state),
            }
        }
    }

    #[test]
    fn a_common_policy_decides_in_u64() {
        let rate = Rate::new(100, 100, 1_000).expect("a rate");
        let now_ms = 1_767_225_600_000u64;
        let mut state = BucketState {
            units: rate.units_per_token() * 10,
            last_ms: now_ms - 5,
            units_per_token: rate.units_per_token(),
        };
        let decision = decide_narrow(&rate, &mut state, now_ms, 1, true).expect("fits u64");
        // 10 tokens, half a token refilled in 5 ms, one spent.
        assert_eq!((decision.allowed, decision.remaining), (true, 9));
        assert_eq!(state.last_ms, now_ms);
    }
}
