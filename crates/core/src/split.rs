//! A limit split between regions by weight (the `split` scope,
//! docs/design.md §7): integer shares that sum to exactly the limit, so the
//! regions together never admit more than the policy, and each region's
//! share is a policy of its own that its store enforces alone.
//!
//! Integers by the largest-remainder method: each region gets
//! `floor(limit · w / W)`, and the units left over go one each to the
//! regions with the largest remainders, ties to the earlier region — 100
//! over three equal weights is 34/33/33. A bucket's refill rate needs no
//! rounding: `N·w` tokens per `P·W` is exactly its share of N per P.

use crate::policy::Policy;

/// The integer shares of `limit` for `weights`, in order: they sum to
/// `limit` exactly (or are all 0 when every weight is 0).
pub fn split_shares(limit: u64, weights: &[u64]) -> Vec<u64> {
    let total: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    if total == 0 {
        return vec![0; weights.len()];
    }
    let limit_wide = u128::from(limit);
    let mut shares: Vec<u64> = Vec::with_capacity(weights.len());
    let mut remainders: Vec<(u128, usize)> = Vec::with_capacity(weights.len());
    for (i, &w) in weights.iter().enumerate() {
        let exact = limit_wide * u128::from(w);
        // floor(limit·w/W) ≤ limit, so it fits.
        shares.push(u64::try_from(exact / total).unwrap_or(limit));
        remainders.push((exact % total, i));
    }
    let given: u64 = shares.iter().sum();
    let mut left = limit - given;
    // Largest remainder first; the earlier region wins a tie.
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, i) in remainders {
        if left == 0 {
            break;
        }
        shares[i] += 1;
        left -= 1;
    }
    shares
}

/// Region `index`'s share of `policy` among `weights`: a bucket's capacity
/// and a window's limit by [`split_shares`], a bucket's refill rate exactly
/// by weight ([`Limits::share`](crate::Limits::share)). `None` when the
/// share admits nothing (a share of 0).
pub fn split_policy(policy: &Policy, weights: &[u64], index: usize) -> Option<Policy> {
    let total: u64 = weights.iter().sum();
    let weight = *weights.get(index)?;
    let limits = policy.limits();
    let limit = *split_shares(limits.limit(), weights).get(index)?;
    let share = limits.share(limit, weight, total)?;
    Some(Policy::new(policy.name(), share))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Limits, Rate, Window};
    use proptest::prelude::*;

    #[test]
    fn a_hundred_over_three_equal_regions_is_34_33_33() {
        assert_eq!(split_shares(100, &[1, 1, 1]), [34, 33, 33]);
        assert_eq!(split_shares(100, &[2, 1, 1]), [50, 25, 25]);
        assert_eq!(split_shares(10, &[1, 1, 1]), [4, 3, 3]);
        assert_eq!(split_shares(2, &[1, 1, 1]), [1, 1, 0]);
        assert_eq!(split_shares(7, &[0, 1]), [0, 7]);
        assert_eq!(split_shares(5, &[0, 0]), [0, 0]);
        // Largest remainder, not the first region: 10·(3,1,3)/7 is
        // 4.29, 1.43, 4.29, so the leftover unit goes to the second.
        assert_eq!(split_shares(10, &[3, 1, 3]), [4, 2, 4]);
    }

    #[test]
    fn a_bucket_splits_its_capacity_in_integers_and_its_rate_exactly() {
        let policy = Policy::new(
            "p",
            Limits::TokenBucket(Rate::new(100, 5, 1_000).expect("rate")),
        );
        let shares: Vec<Policy> = (0..3)
            .map(|i| split_policy(&policy, &[1, 1, 1], i).expect("a share"))
            .collect();
        let capacities: Vec<u64> = shares.iter().map(|p| p.limits().limit()).collect();
        assert_eq!(capacities, [34, 33, 33]);
        for share in &shares {
            let Limits::TokenBucket(r) = share.limits() else {
                panic!("a bucket stays a bucket");
            };
            // 5 per second over three: 5 tokens per 3 s each, exactly.
            assert_eq!((r.tokens(), r.per_ms()), (5, 3_000));
        }
        let window = Policy::new("w", Limits::FixedWindow(Window::new(2, 60_000).expect("w")));
        assert_eq!(
            split_policy(&window, &[1, 1, 1], 1).map(|p| p.limits().limit()),
            Some(1)
        );
        assert!(
            split_policy(&window, &[1, 1, 1], 2).is_none(),
            "a share of 0 admits nothing"
        );
    }

    proptest! {
        #[test]
        fn shares_sum_to_the_limit_and_follow_the_weights(
            limit in 0u64..1_000_000,
            weights in proptest::collection::vec(0u64..50, 1..8),
        ) {
            let shares = split_shares(limit, &weights);
            let total: u64 = weights.iter().sum();
            prop_assert_eq!(shares.len(), weights.len());
            if total == 0 {
                prop_assert!(shares.iter().all(|&s| s == 0));
            } else {
                prop_assert_eq!(shares.iter().sum::<u64>(), limit);
                for (s, w) in shares.iter().zip(&weights) {
                    // Each share is within one unit of its exact part.
                    let exact = u128::from(limit) * u128::from(*w);
                    let floor = exact / u128::from(total);
                    prop_assert!(u128::from(*s) == floor || u128::from(*s) == floor + 1);
                }
            }
        }
    }
}
