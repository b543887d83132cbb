//! gcra: the token bucket's contract as one integer, the theoretical arrival
//! time scaled by n: `tat = n·now + debt`.

use super::Taken;
use super::{div_ceil, div_ceil64, div_floor, div_floor64, saturate};
use crate::decision::Decision;
use crate::policy::Rate;

/// Stored state. `tat` is exact in u128 for any u64 time and rate; the scale
/// (n, p, C·p) is kept beside it so a policy change carries the debt over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcraState {
    /// Theoretical arrival time scaled by n: `n·now + debt`, in units.
    pub tat: u128,
    /// The n the debt was counted under.
    pub units_per_ms: u64,
    /// The p the debt was counted under.
    pub units_per_token: u64,
    /// The C the debt was counted under.
    pub capacity: u64,
}

// Inlined into `Limits::decide` (a call costs the state a copy out and
// back), and into the store's eviction marks, its one other caller.
#[inline(always)]
pub(super) fn decide(
    rate: &Rate,
    state: &mut Option<GcraState>,
    now_ms: u64,
    cost: u64,
    consume: bool,
) -> Decision {
    let full = rate.capacity_units();
    let n = u128::from(rate.units_per_ms());
    let p = u128::from(rate.units_per_token());
    let now_scaled = n * u128::from(now_ms);
    // No clamp: an earlier `now` only makes the debt look larger.
    let debt = state.as_ref().map_or(0, |s| carried_debt(s, rate, now_ms));
    let need = u128::from(cost) * p;
    let allowed = debt + need <= full;
    let debt_after = if allowed && consume {
        debt + need
    } else {
        debt
    };
    // A peek or a rejection writes nothing.
    if allowed && consume && cost > 0 {
        *state = Some(GcraState {
            tat: now_scaled + debt_after,
            units_per_ms: rate.units_per_ms(),
            units_per_token: rate.units_per_token(),
            capacity: rate.capacity(),
        });
    }
    Decision {
        allowed,
        limit: rate.capacity(),
        remaining: floor_units(full, debt_after, rate.units_per_token()),
        retry_after_ms: if allowed {
            Some(0)
        } else if cost > rate.capacity() {
            None
        } else {
            Some(saturate(div_ceil(debt + need - full, rate.units_per_ms())))
        },
        reset_after_ms: saturate(div_ceil(debt_after, rate.units_per_ms())),
        permit: None,
    }
}

/// [`decide`] on a stored state of the policy's own scale, in u64: the
/// same decision, with no u128 arithmetic (a u128 division is a call of
/// some 30 instructions; a u128 compare, add or multiply two or three).
/// `None`, with the state untouched, when a value does not fit 64 bits
/// (an arrival time past 2^64 units, a vast capacity or cost) or the
/// state was counted under another scale: [`decide`] answers then.
#[inline(always)]
pub(super) fn decide_narrow(
    rate: &Rate,
    s: &mut GcraState,
    now_ms: u64,
    cost: u64,
    consume: bool,
) -> Option<Decision> {
    let (n, p, capacity) = (rate.units_per_ms(), rate.units_per_token(), rate.capacity());
    if s.units_per_ms != n || s.units_per_token != p || s.capacity != capacity {
        return None;
    }
    let tat = u64::try_from(s.tat).ok()?;
    let full = capacity.checked_mul(p)?;
    let now_scaled = n.checked_mul(now_ms)?;
    let debt = tat.saturating_sub(now_scaled);
    let need = cost.checked_mul(p)?;
    let total = debt.checked_add(need)?;
    let allowed = total <= full;
    let debt_after = if allowed && consume { total } else { debt };
    if allowed && consume && cost > 0 {
        s.tat = u128::from(now_scaled.checked_add(debt_after)?);
    }
    let clamp = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
    Some(Decision {
        allowed,
        limit: capacity,
        remaining: if debt_after <= full {
            clamp(div_floor64(full - debt_after, p))
        } else {
            -clamp(div_ceil64(debt_after - full, p))
        },
        retry_after_ms: if allowed {
            Some(0)
        } else if cost > capacity {
            None
        } else {
            Some(div_ceil64(total - full, n))
        },
        reset_after_ms: div_ceil64(debt_after, n),
        permit: None,
    })
}

/// The first ms at which a request of cost 1 would be admitted, read off
/// the state: ⌈(tat + p − C·p) / n⌉, or `now_ms` when that is earlier —
/// what a cost-1 probe's `retry_after_ms` says, without a decision (the
/// store's eviction marks ask it after every admission that spends the
/// last token). `None` under another scale: the probe answers then.
pub(super) fn admits_one_from_ms(rate: &Rate, s: &GcraState, now_ms: u64) -> Option<u64> {
    if s.units_per_ms != rate.units_per_ms()
        || s.units_per_token != rate.units_per_token()
        || s.capacity != rate.capacity()
    {
        return None;
    }
    let p = u128::from(rate.units_per_token());
    let over = s
        .tat
        .saturating_add(p)
        .saturating_sub(rate.capacity_units());
    Some(now_ms.max(saturate(div_ceil(over, rate.units_per_ms()))))
}

/// The debt at `now_ms` in the current scale. Under a changed policy the
/// tokens left are preserved (rounded down, capped at the new capacity).
fn carried_debt(s: &GcraState, rate: &Rate, now_ms: u64) -> u128 {
    let old_n = u128::from(s.units_per_ms);
    let debt = s.tat.saturating_sub(old_n * u128::from(now_ms));
    if s.units_per_ms == rate.units_per_ms()
        && s.units_per_token == rate.units_per_token()
        && s.capacity == rate.capacity()
    {
        return debt;
    }
    let old_full = u128::from(s.capacity) * u128::from(s.units_per_token);
    let old_units = old_full.saturating_sub(debt);
    let units = if s.units_per_token == 0 {
        0
    } else {
        old_units * u128::from(rate.units_per_token()) / u128::from(s.units_per_token)
    };
    rate.capacity_units() - units.min(rate.capacity_units())
}

/// floor((full − debt) / p), which is negative when a clock stepped back
/// and the debt looks larger than the bucket.
#[inline]
fn floor_units(full: u128, debt: u128, p: u64) -> i64 {
    let clamp = |x: u128| i64::try_from(x).unwrap_or(i64::MAX);
    if debt <= full {
        clamp(div_floor(full - debt, p))
    } else {
        -clamp(div_ceil(debt - full, p))
    }
}

/// Gives back up to `units` tokens consumed at a [`Taken`]; returns how many
/// went back: the token bucket's rule (see there) on the debt.
pub(super) fn give_back(
    rate: &Rate,
    state: &mut Option<GcraState>,
    now_ms: u64,
    units: u64,
    taken: Taken,
) -> u64 {
    let Some(s) = state.as_mut() else { return 0 };
    if s.units_per_ms != rate.units_per_ms()
        || s.units_per_token != rate.units_per_token()
        || s.capacity != rate.capacity()
    {
        return 0;
    }
    let n = u128::from(rate.units_per_ms());
    let p = u128::from(rate.units_per_token());
    let debt = s.tat.saturating_sub(n * u128::from(now_ms));
    let room = debt.min(taken.span_ms(now_ms) * n);
    let given = u128::from(units).min(room / p);
    s.tat -= given * p;
    saturate(given)
}

/// A refund ([`Taken::REFUND`]): the token bucket's refund (see there) on
/// the debt, never below none.
pub(super) fn refund(rate: &Rate, s: &mut GcraState, now_ms: u64, units: u64) -> u64 {
    if s.units_per_ms != rate.units_per_ms()
        || s.units_per_token != rate.units_per_token()
        || s.capacity != rate.capacity()
    {
        return 0;
    }
    let n = u128::from(rate.units_per_ms());
    let p = u128::from(rate.units_per_token());
    let debt = s.tat.saturating_sub(n * u128::from(now_ms));
    let back = debt.min(u128::from(units) * p);
    s.tat -= back;
    saturate(back.div_ceil(p))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{GcraState, admits_one_from_ms, decide, decide_narrow};
    use crate::algorithm::small_and_wide;
    use crate::policy::Rate;

    proptest! {
        #[test]
        fn the_u64_path_decides_as_the_u128_one_or_declines(
            (capacity, tokens, per_ms) in (small_and_wide(), small_and_wide(), small_and_wide()),
            // Any time a clock tells (ms since the epoch, up to year 559,000).
            now_ms in prop_oneof![0u64..=1_000, 1u64 << 20..=1 << 44],
            tat_lo in any::<u64>(),
            tat_wide in any::<bool>(),
            cost in small_and_wide(),
            consume in any::<bool>(),
        ) {
            let Some(rate) = Rate::new(capacity, tokens, per_ms) else { return Ok(()) };
            let state = GcraState {
                tat: if tat_wide { u128::from(tat_lo) << 8 } else { u128::from(tat_lo) },
                units_per_ms: rate.units_per_ms(),
                units_per_token: rate.units_per_token(),
                capacity: rate.capacity(),
            };
            let mut wide = Some(state);
            let expected = decide(&rate, &mut wide, now_ms, cost, consume);
            let mut narrow = state;
            match decide_narrow(&rate, &mut narrow, now_ms, cost, consume) {
                Some(decision) => {
                    prop_assert_eq!(decision, expected);
                    prop_assert_eq!(Some(narrow), wide);
                }
                None => prop_assert_eq!(narrow, state),
            }
        }
    }

    #[test]
    fn a_common_policy_decides_in_u64() {
        let rate = Rate::new(100, 1, 1).expect("a rate");
        let now_ms = 1_767_225_600_000u64;
        let mut state = GcraState {
            tat: u128::from(now_ms),
            units_per_ms: 1,
            units_per_token: 1,
            capacity: 100,
        };
        let decision = decide_narrow(&rate, &mut state, now_ms, 1, true).expect("fits u64");
        assert_eq!((decision.allowed, decision.remaining), (true, 99));
        assert_eq!(state.tat, u128::from(now_ms) + 1);
    }

    #[test]
    fn the_arrival_time_names_what_a_cost_one_probe_would() {
        let rates = [
            (1, 1, 1),
            (100, 1, 1),
            (20, 5, 1_000),
            (7, 100, 60_000),
            (3, 7, 3),
        ];
        for (capacity, tokens, per_ms) in rates {
            let rate = Rate::new(capacity, tokens, per_ms).expect("a rate");
            let full = rate.capacity_units();
            let now_ms = 1_767_225_600_000u64;
            let n_now = u128::from(rate.units_per_ms()) * u128::from(now_ms);
            for debt in [0, 1, full / 2, full - 1, full, full + 1, 3 * full + 5] {
                let state = GcraState {
                    tat: n_now + debt,
                    units_per_ms: rate.units_per_ms(),
                    units_per_token: rate.units_per_token(),
                    capacity: rate.capacity(),
                };
                for now in [now_ms - 1_000, now_ms, now_ms + 1, now_ms + 10_000_000] {
                    let wait = decide(&rate, &mut Some(state), now, 1, false).retry_after_ms;
                    let probed = wait.map_or(u64::MAX, |w| now.saturating_add(w));
                    assert_eq!(admits_one_from_ms(&rate, &state, now), Some(probed));
                }
            }
        }
    }
}
