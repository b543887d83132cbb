//! What docs/design.md §3 promises for every trace, not only the shipped ones:
//! admitted cost stays within the contract, waits are exact, a clock that
//! steps back mints nothing, gcra is the token bucket in one integer, a
//! limit change carries the bucket over, and identities never collide.

use std::collections::BTreeMap;

use proptest::prelude::*;
use tollgate_core::{
    Decision, Identity, Intent, Limits, PermitId, Permits, Rate, Released, State, Taken, Window,
};

const T0: u64 = 1_700_000_000_000;

fn rate() -> impl Strategy<Value = Rate> {
    (
        1u64..=40,
        1u64..=30,
        prop_oneof![1u64..=20, 21u64..=5_000, Just(60_000)],
    )
        .prop_map(|(c, n, per)| Rate::new(c, n, per).expect("positive parts make a rate"))
}

fn window() -> impl Strategy<Value = Window> {
    (1u64..=30, prop_oneof![1u64..=20, 21u64..=5_000])
        .prop_map(|(l, w)| Window::new(l, w).expect("positive parts make a window"))
}

fn limits() -> impl Strategy<Value = Limits> {
    prop_oneof![
        rate().prop_map(Limits::TokenBucket),
        rate().prop_map(Limits::Gcra),
        window().prop_map(Limits::FixedWindow),
        window().prop_map(Limits::SlidingWindow),
        window().prop_map(Limits::SlidingLog),
    ]
}

/// The span a policy's limit is stated over: a bucket's time to refill from
/// empty, a window's length.
fn span(limits: &Limits) -> u64 {
    limits.window_ms().max(1)
}

/// Costs around the limit: peeks, small costs, the limit and just above it.
fn cost(limit: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(0),
        6 => 1..=limit.min(3),
        3 => 0..=limit + 2,
    ]
}

/// A trace (time, cost) whose clock never steps back, with bursts, gaps
/// around the span and idle periods of several spans.
fn forward_trace(limits: Limits, len: usize) -> impl Strategy<Value = Vec<(u64, u64)>> {
    let span = span(&limits);
    let gap = prop_oneof![4 => 0u64..=3, 4 => 0..=span, 1 => 0..=4 * span];
    (
        0u64..10_000_000,
        prop::collection::vec((gap, cost(limits.limit())), 1..len),
    )
        .prop_map(|(start, steps)| {
            let mut t = T0 + start;
            steps
                .into_iter()
                .map(|(dt, c)| {
                    t += dt;
                    (t, c)
                })
                .collect()
        })
}

/// A trace whose clock sometimes steps back by up to two spans.
fn stepping_trace(limits: Limits, len: usize) -> impl Strategy<Value = Vec<(u64, u64)>> {
    let span = span(&limits) as i64;
    let step = prop_oneof![5 => 0i64..=3, 3 => 0..=span, 2 => -2 * span - 1..0];
    (
        0u64..10_000_000,
        prop::collection::vec((step, cost(limits.limit())), 1..len),
    )
        .prop_map(|(start, steps)| {
            let mut t = T0 + start;
            steps
                .into_iter()
                .map(|(dt, c)| {
                    t = t.saturating_add_signed(dt);
                    (t, c)
                })
                .collect()
        })
}

fn limits_and_trace() -> impl Strategy<Value = (Limits, Vec<(u64, u64)>)> {
    limits().prop_flat_map(|l| (Just(l), forward_trace(l, 60)))
}

fn run(limits: &Limits, state: &mut Option<State>, trace: &[(u64, u64)]) -> Vec<Decision> {
    trace
        .iter()
        .map(|&(t, cost)| limits.decide(state, t, cost))
        .collect()
}

/// A decision on a copy of `state`, leaving `state` as it was.
fn decide_on_copy(limits: &Limits, state: &Option<State>, t: u64, cost: u64) -> Decision {
    limits.decide(&mut state.clone(), t, cost)
}

fn assert_admissions_within_contract(
    limits: &Limits,
    admitted: &[(u64, u64)],
) -> Result<(), TestCaseError> {
    match limits {
        Limits::TokenBucket(r) | Limits::Gcra(r) => {
            // Over [t_i, t_j]: at most C at the start plus N per P after it.
            let mut prefix = vec![0u64];
            for &(_, c) in admitted {
                prefix.push(prefix[prefix.len() - 1] + c);
            }
            for i in 0..admitted.len() {
                for j in i..admitted.len() {
                    let span = admitted[j].0 - admitted[i].0;
                    let bound = r.capacity() + span * r.tokens() / r.per_ms();
                    let sum = prefix[j + 1] - prefix[i];
                    prop_assert!(
                        sum <= bound,
                        "{sum} admitted over {span} ms, contract allows {bound}"
                    );
                }
            }
        }
        Limits::FixedWindow(w) => {
            let mut per_window: BTreeMap<u64, u64> = BTreeMap::new();
            for &(t, c) in admitted {
                *per_window.entry(t / w.window_ms()).or_default() += c;
            }
            for (k, sum) in per_window {
                prop_assert!(sum <= w.limit(), "window {k} admitted {sum}");
            }
        }
        Limits::SlidingWindow(w) => {
            // At each admission: prev·(W−e) + curr·W ≤ L·W, counted from
            // what was admitted, independently of the stored state.
            let (l, width) = (u128::from(w.limit()), u128::from(w.window_ms()));
            for (i, &(t, _)) in admitted.iter().enumerate() {
                let k = t / w.window_ms();
                let e = u128::from(t - k * w.window_ms());
                let prev: u64 = admitted
                    .iter()
                    .filter(|&&(u, _)| k > 0 && u / w.window_ms() == k - 1)
                    .map(|&(_, c)| c)
                    .sum();
                let curr: u64 = admitted[..=i]
                    .iter()
                    .filter(|&&(u, _)| u / w.window_ms() == k)
                    .map(|&(_, c)| c)
                    .sum();
                let weighted = u128::from(prev) * (width - e) + u128::from(curr) * width;
                prop_assert!(
                    weighted <= l * width,
                    "at {t}: prev {prev}, curr {curr} weigh {weighted} > {}",
                    l * width
                );
            }
        }
        Limits::SlidingLog(w) => {
            // In any window of W ms ending at an admission: at most L.
            for &(t, _) in admitted {
                let sum: u64 = admitted
                    .iter()
                    .filter(|&&(u, _)| u <= t && u + w.window_ms() > t)
                    .map(|&(_, c)| c)
                    .sum();
                prop_assert!(
                    sum <= w.limit(),
                    "{sum} counted in the window ending at {t}"
                );
            }
        }
        // Permits are held by name and released: their own reference model
        // holds them (`permits_follow_their_reference_model`), not costs.
        Limits::Concurrency(_) => {}
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A give-back leaves exactly the state that never consumed what went
    /// back (the hot-lease return, docs/config.md): `x` takes a block, sees
    /// a trace and gives back part of the block; `y` takes only what `x`
    /// kept and sees the same admitted costs. From then on both decide alike.
    #[test]
    fn a_give_back_leaves_the_state_that_never_consumed_it(
        (limits, trace) in limits_and_trace(),
        block_percent in 1u64..=100,
        unused_percent in 0u64..=100,
        idle in prop_oneof![Just(0u64), 0u64..=5_000],
    ) {
        let half = trace.len() / 2;
        let (history, rest) = trace.split_at(half);
        let t_take = history.last().map_or(trace[0].0, |e| e.0);
        let block = (limits.limit() * block_percent / 100).max(1);
        let mut x = None;
        run(&limits, &mut x, history);
        let before = x.clone();
        let take = limits.decide(&mut x, t_take, block);
        prop_assume!(take.allowed);
        let admitted: Vec<(u64, u64)> = rest
            .iter()
            .filter(|&&(t, c)| limits.decide(&mut x, t, c).allowed && c > 0)
            .copied()
            .collect();
        let t1 = rest.last().map_or(t_take, |e| e.0) + idle;
        let unused = block * unused_percent / 100;
        let given = limits.give_back(&mut x, t1, unused, Taken::new(t_take, &take));
        prop_assert!(given <= unused, "gave back {given} of {unused}");

        let mut y = before;
        prop_assert!(limits.decide(&mut y, t_take, block - given).allowed);
        for &(t, c) in &admitted {
            prop_assert!(limits.decide(&mut y, t, c).allowed, "y admits what x admitted at {t}");
        }
        let span = span(&limits);
        for later in [0, 1, span / 2, span, 2 * span] {
            for cost in [0, 1, limits.limit()] {
                prop_assert_eq!(
                    decide_on_copy(&limits, &x, t1 + later, cost),
                    decide_on_copy(&limits, &y, t1 + later, cost),
                    "at t1 + {} cost {} (gave back {} of {})", later, cost, given, unused
                );
            }
        }
    }

    #[test]
    fn admitted_cost_over_any_interval_never_exceeds_the_contract(
        (limits, trace) in limits_and_trace()
    ) {
        let decisions = run(&limits, &mut None, &trace);
        let admitted: Vec<(u64, u64)> = trace
            .iter()
            .zip(&decisions)
            .filter(|(_, d)| d.allowed)
            .map(|(&e, _)| e)
            .collect();
        assert_admissions_within_contract(&limits, &admitted)?;
    }

    #[test]
    fn waiting_exactly_retry_after_admits_and_one_ms_less_does_not(
        (limits, trace, extra, cost) in limits().prop_flat_map(|l| (
            Just(l),
            forward_trace(l, 40),
            0..=span(&l),
            1..=l.limit() + 1,
        ))
    ) {
        let mut state = None;
        run(&limits, &mut state, &trace);
        let t = trace[trace.len() - 1].0 + extra;
        let d = limits.decide(&mut state, t, cost);
        if d.allowed {
            prop_assert_eq!(d.retry_after_ms, Some(0));
            return Ok(());
        }
        match d.retry_after_ms {
            None => {
                prop_assert!(cost > limits.limit());
                for later in [1, span(&limits), 1_000 * span(&limits)] {
                    prop_assert!(!decide_on_copy(&limits, &state, t + later, cost).allowed);
                }
            }
            Some(wait) => {
                prop_assert!(cost <= limits.limit());
                prop_assert!(wait >= 1);
                prop_assert!(
                    decide_on_copy(&limits, &state, t + wait, cost).allowed,
                    "not admitted after waiting {} ms", wait
                );
                prop_assert!(
                    !decide_on_copy(&limits, &state, t + wait - 1, cost).allowed,
                    "already admitted after {} ms", wait - 1
                );
            }
        }
    }

    #[test]
    fn quota_is_fully_restored_exactly_at_reset_after(
        (limits, trace) in limits_and_trace()
    ) {
        let mut state = None;
        let decisions = run(&limits, &mut state, &trace);
        let t = trace[trace.len() - 1].0;
        let reset = decisions[decisions.len() - 1].reset_after_ms;
        let full = i64::try_from(limits.limit()).expect("small limit");
        prop_assert_eq!(decide_on_copy(&limits, &state, t + reset, 0).remaining, full);
        // A fixed window's reset is the end of its window, even when empty.
        if reset > 0 && !matches!(limits, Limits::FixedWindow(_)) {
            prop_assert!(decide_on_copy(&limits, &state, t + reset - 1, 0).remaining < full);
        }
    }

    #[test]
    fn clock_stepping_back_never_raises_remaining(
        (limits, trace, back, cost) in limits().prop_flat_map(|l| (
            Just(l),
            forward_trace(l, 40),
            1..=2 * span(&l) + 1,
            cost(l.limit()),
        ))
    ) {
        let mut state = None;
        run(&limits, &mut state, &trace);
        let t = trace[trace.len() - 1].0;
        let here = decide_on_copy(&limits, &state, t, cost);
        let there = decide_on_copy(&limits, &state, t - back, cost);
        if matches!(limits, Limits::Gcra(_)) {
            // No clamp: an earlier now makes the debt look larger.
            let peek_here = decide_on_copy(&limits, &state, t, 0);
            let peek_there = decide_on_copy(&limits, &state, t - back, 0);
            prop_assert!(peek_there.remaining <= peek_here.remaining);
            prop_assert!(!there.allowed || here.allowed);
            if there.allowed && here.allowed {
                prop_assert!(there.remaining <= here.remaining);
            }
        } else {
            // The key's clock never runs backward: it decides at `t`.
            prop_assert_eq!(there, here);
        }
    }

    #[test]
    fn stepping_back_decides_as_if_the_clock_had_stood_still(
        (limits, trace) in limits()
            .prop_filter("gcra keeps no clock", |l| !matches!(l, Limits::Gcra(_)))
            .prop_flat_map(|l| (Just(l), stepping_trace(l, 60)))
    ) {
        let mut clamped = trace.clone();
        let mut high = 0;
        for event in &mut clamped {
            high = high.max(event.0);
            event.0 = high;
        }
        prop_assert_eq!(run(&limits, &mut None, &trace), run(&limits, &mut None, &clamped));
    }

    #[test]
    fn gcra_decides_exactly_as_token_bucket_when_the_clock_never_steps_back(
        (rate, trace) in rate().prop_flat_map(|r| (Just(r), forward_trace(Limits::Gcra(r), 80)))
    ) {
        prop_assert_eq!(
            run(&Limits::Gcra(rate), &mut None, &trace),
            run(&Limits::TokenBucket(rate), &mut None, &trace)
        );
    }

    #[test]
    fn gcra_is_never_looser_than_token_bucket_when_the_clock_steps_back(
        (rate, trace) in rate().prop_flat_map(|r| (Just(r), stepping_trace(Limits::Gcra(r), 80)))
    ) {
        let (gcra, bucket) = (Limits::Gcra(rate), Limits::TokenBucket(rate));
        let (mut g, mut b) = (None, None);
        let mut forget_point = 0;
        let mut latest = 0;
        for &(t, cost) in &trace {
            // The vectors' rule: a store may forget a key once it is full, so
            // once the clock has reached that point the trace never goes below
            // it on that key. (A full bucket's clamped clock would otherwise
            // make token_bucket the stricter one, e.g. after a peek.)
            let t = if latest >= forget_point { t.max(forget_point) } else { t };
            latest = latest.max(t);
            let (peek_g, peek_b) = (decide_on_copy(&gcra, &g, t, 0), decide_on_copy(&bucket, &b, t, 0));
            prop_assert!(peek_g.remaining <= peek_b.remaining, "at {t}: gcra {peek_g:?}, bucket {peek_b:?}");
            let (dg, db) = (gcra.decide(&mut g, t, cost), bucket.decide(&mut b, t, cost));
            if dg.allowed != db.allowed {
                // Only gcra can refuse; from here on the two have spent differently.
                prop_assert!(db.allowed && !dg.allowed, "at {t}: gcra {dg:?}, bucket {db:?}");
                break;
            }
            prop_assert!(dg.remaining <= db.remaining, "at {t}: gcra {dg:?}, bucket {db:?}");
            if let (Some(rg), Some(rb)) = (dg.retry_after_ms, db.retry_after_ms) {
                prop_assert!(rg >= rb, "at {t}: gcra {dg:?}, bucket {db:?}");
            }
            let bucket_full_at = match &b {
                Some(State::TokenBucket(s)) => s.last_ms + db.reset_after_ms,
                _ => 0,
            };
            let gcra_full_at = if g.is_some() { t + dg.reset_after_ms } else { 0 };
            forget_point = bucket_full_at.max(gcra_full_at);
        }
    }

    #[test]
    fn limit_change_carries_the_tokens_over_capped_at_the_new_capacity(
        (old, trace, new, gcra) in rate().prop_flat_map(|r| (
            Just(r),
            forward_trace(Limits::TokenBucket(r), 40),
            rate(),
            any::<bool>(),
        ))
    ) {
        let wrap = |r| if gcra { Limits::Gcra(r) } else { Limits::TokenBucket(r) };
        let mut state = None;
        run(&wrap(old), &mut state, &trace);
        let t = trace[trace.len() - 1].0;
        let before = decide_on_copy(&wrap(old), &state, t, 0).remaining;
        let after = decide_on_copy(&wrap(new), &state, t, 0);
        let new_capacity = i64::try_from(new.capacity()).expect("small capacity");
        prop_assert_eq!(after.limit, new.capacity());
        if state.is_some() {
            prop_assert_eq!(after.remaining, before.min(new_capacity));
        } else {
            // gcra after only peeks and rejections: no state, a new key.
            prop_assert_eq!(after.remaining, new_capacity);
        }
    }

    #[test]
    fn rejected_request_advances_clock_but_consumes_nothing(
        (limits, trace, extra, cost) in limits().prop_flat_map(|l| (
            Just(l),
            forward_trace(l, 40),
            0..=span(&l),
            1..=l.limit() + 2,
        ))
    ) {
        let mut state = None;
        run(&limits, &mut state, &trace);
        let t = trace[trace.len() - 1].0 + extra;
        let mut rejected = state.clone();
        let d = limits.decide(&mut rejected, t, cost);
        if d.allowed {
            return Ok(());
        }
        let mut peeked = state.clone();
        prop_assert!(limits.decide(&mut peeked, t, 0).allowed);
        prop_assert_eq!(rejected, peeked);
    }

    #[test]
    fn probe_answers_as_consume_would_but_consumes_nothing(
        (limits, trace, extra, cost) in limits().prop_flat_map(|l| (
            Just(l),
            forward_trace(l, 40),
            0..=span(&l),
            cost(l.limit()),
        ))
    ) {
        let mut state = None;
        run(&limits, &mut state, &trace);
        let t = trace[trace.len() - 1].0 + extra;
        let mut probed = state.clone();
        let probe = limits.decide_with(&mut probed, t, cost, Intent::Probe);
        let consume = decide_on_copy(&limits, &state, t, cost);
        prop_assert_eq!(probe.allowed, consume.allowed);
        prop_assert_eq!(probe.retry_after_ms, consume.retry_after_ms);
        let mut peeked = state.clone();
        limits.decide(&mut peeked, t, 0);
        prop_assert_eq!(probed, peeked);
    }

    #[test]
    fn a_state_is_limiting_exactly_until_it_admits_one_more_unit(
        (limits, trace, extra) in limits().prop_flat_map(|l| (
            Just(l),
            forward_trace(l, 40),
            0..=2 * span(&l),
        ))
    ) {
        let mut state = None;
        run(&limits, &mut state, &trace);
        let Some(stored) = &state else { return Ok(()) };
        let t = trace[trace.len() - 1].0;
        let from = limits.admits_one_from_ms(stored, t);
        // Asked later, the same state names the same instant (or that later time).
        prop_assert_eq!(limits.admits_one_from_ms(stored, t + extra), from.max(t + extra));
        prop_assert_eq!(decide_on_copy(&limits, &state, t + extra, 1).allowed, t + extra >= from);
        prop_assert!(decide_on_copy(&limits, &state, from, 1).allowed);
        if from > t {
            prop_assert!(!decide_on_copy(&limits, &state, from - 1, 1).allowed);
        }
    }

    #[test]
    fn composite_identity_encoding_is_injective(
        raw in prop::collection::vec(identity_spec(), 2..12)
    ) {
        let built: Vec<(Spec, Identity)> = raw.iter().filter_map(build).collect();
        for (a, ida) in &built {
            for (b, idb) in &built {
                prop_assert_eq!(
                    ida == idb,
                    a == b,
                    "{:?} and {:?} encode as {:?} and {:?}", a, b, ida, idb
                );
            }
        }
    }
}

/// An identity as what it means: one value, or named parts in any order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Spec {
    Value(String),
    Composite(BTreeMap<String, String>),
}

/// Short strings over an alphabet of separators and length-like bytes, so
/// that a naive encoding would collide often.
fn tricky() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec!['a', 'b', '|', ':', '=', '\0', '\u{1}', '\u{2}', 'ü']),
        0..4,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

fn identity_spec() -> impl Strategy<Value = (bool, Vec<(String, String)>)> {
    (
        any::<bool>(),
        prop::collection::vec((tricky(), tricky()), 1..4),
    )
}

/// The identity and what it means (a value when the flag says so, from the
/// first part's value); `None` for a composite naming a part twice, which
/// must be refused.
fn build((single, parts): &(bool, Vec<(String, String)>)) -> Option<(Spec, Identity)> {
    if *single {
        let value = parts[0].1.clone();
        let identity = Identity::value(&value);
        return Some((Spec::Value(value), identity));
    }
    let meaning: BTreeMap<String, String> = parts.iter().cloned().collect();
    let result = Identity::composite(parts.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    assert_eq!(result.is_ok(), meaning.len() == parts.len(), "{parts:?}");
    result
        .ok()
        .map(|identity| (Spec::Composite(meaning), identity))
}
#[test]
fn gcra_refuses_after_a_step_back_what_token_bucket_admits() {
    // C=2, 1 token per 100 ms. Both spend 2 at t=1000; at t=1100 one token is back.
    let rate = Rate::new(2, 1, 100).expect("valid rate");
    let (gcra, bucket) = (Limits::Gcra(rate), Limits::TokenBucket(rate));
    let (mut g, mut b) = (None, None);
    assert_eq!(
        gcra.decide(&mut g, 1_000, 2),
        bucket.decide(&mut b, 1_000, 2)
    );
    assert_eq!(
        gcra.decide(&mut g, 1_100, 0),
        bucket.decide(&mut b, 1_100, 0)
    );
    // The clock steps back to 1050: the bucket's clock stays at 1100 and it
    // still has its token; gcra sees half a token more debt and refuses.
    assert_eq!(
        bucket.decide(&mut b, 1_050, 1),
        Decision {
            allowed: true,
            limit: 2,
            remaining: 0,
            retry_after_ms: Some(0),
            reset_after_ms: 200,
            permit: None,
        }
    );
    assert_eq!(
        gcra.decide(&mut g, 1_050, 1),
        Decision {
            allowed: false,
            limit: 2,
            remaining: 0,
            retry_after_ms: Some(50),
            reset_after_ms: 150,
            permit: None,
        }
    );
}

/// One step of a permit trace: after `dt` ms (a step back when negative),
/// acquire (`Some(cost)`) or release permit `id` of a small pool.
#[derive(Debug, Clone, Copy)]
struct PermitStep {
    dt: i64,
    id: u64,
    acquire: Option<u64>,
}

fn permit_trace() -> impl Strategy<Value = (Permits, Vec<PermitStep>)> {
    (1u64..=5, 1u64..=2_000).prop_flat_map(|(limit, lease)| {
        let step = (
            prop_oneof![6 => 0i64..=(lease as i64), 1 => -(lease as i64)..0],
            0u64..8,
            prop_oneof![3 => Just(Some(1)), 1 => Just(Some(0)), 1 => Just(Some(2)), 3 => Just(None)],
        )
            .prop_map(|(dt, id, acquire)| PermitStep { dt, id, acquire });
        let permits = Permits::new(limit, lease).expect("positive parts");
        (Just(permits), prop::collection::vec(step, 1..80))
    })
}

/// The reference: each permit held and when its lease ends, dropped once
/// ended, written without the core's code.
struct PermitModel {
    limit: u64,
    lease: u64,
    held: Vec<(u64, u64)>,
}

impl PermitModel {
    fn acquire(&mut self, now: u64, cost: u64, id: u64) -> Decision {
        self.held.retain(|&(_, end)| end > now);
        let again = self.held.iter().position(|&(h, _)| h == id);
        let allowed =
            cost == 0 || (cost == 1 && (again.is_some() || (self.held.len() as u64) < self.limit));
        if allowed && cost == 1 {
            match again {
                Some(i) => self.held[i].1 = now + self.lease,
                None => self.held.push((id, now + self.lease)),
            }
        }
        let ends = self.held.iter().map(|&(_, end)| end);
        let (first, last) = (ends.clone().min(), ends.max());
        Decision {
            allowed,
            limit: self.limit,
            remaining: (self.limit - self.held.len() as u64) as i64,
            retry_after_ms: match (allowed, cost) {
                (true, _) => Some(0),
                (false, 1) => first.map(|f| f - now),
                (false, _) => None,
            },
            reset_after_ms: last.map_or(0, |l| l - now),
            permit: (allowed && cost == 1).then_some(PermitId(id)),
        }
    }

    fn release(&mut self, now: u64, id: u64) -> Released {
        let found = match self.held.iter().position(|&(h, _)| h == id) {
            Some(i) if self.held[i].1 > now => {
                self.held.remove(i);
                Released::Freed
            }
            Some(_) => Released::Expired,
            None => Released::Unknown,
        };
        self.held.retain(|&(_, end)| end > now);
        found
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Acquires, looks and releases decide as the reference model, and at
    /// no time are more than N permits unexpired (design §3: at most N in
    /// flight; a lease bounds a holder that never releases).
    #[test]
    fn permits_follow_their_reference_model((permits, trace) in permit_trace()) {
        let limits = Limits::Concurrency(permits);
        let mut model = PermitModel { limit: permits.limit(), lease: permits.lease_ms(), held: Vec::new() };
        let mut state = None;
        let mut t = T0;
        for step in trace {
            t = t.saturating_add_signed(step.dt);
            match step.acquire {
                Some(cost) => {
                    let got = limits.decide_permit(&mut state, t, cost, Intent::Consume, PermitId(step.id));
                    prop_assert_eq!(got, model.acquire(t, cost, step.id), "acquire at {}", t);
                }
                None => {
                    let got = limits.release(&mut state, t, PermitId(step.id));
                    prop_assert_eq!(got, model.release(t, step.id), "release at {}", t);
                }
            }
            let live = match &state {
                Some(State::Concurrency(s)) => s.held.iter().filter(|h| h.expires_ms > t).count(),
                None => 0,
                Some(other) => return Err(TestCaseError::fail(format!("{other:?}"))),
            };
            prop_assert!(live as u64 <= permits.limit(), "{} held over {}", live, permits.limit());
            // A probe decides as an acquire would and holds nothing.
            let mut probed = state.clone();
            let probe = limits.decide_permit(&mut probed, t, 1, Intent::Probe, PermitId(99));
            prop_assert_eq!(probe.permit, None);
            prop_assert_eq!(probe.allowed, live < permits.limit() as usize);
        }
    }
}
