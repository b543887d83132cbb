use prometheus_client::metrics::counter::Counter;
use tollgate_core::{Decision, Identity, Taken};

use super::*;

/// Where the store consumed a block (the give-back's receipt).
const TAKEN: Taken = Taken {
    at_ms: 1_000,
    full_at_ms: 11_000,
};

fn leases(rule: HotLeaseRule) -> HotLeases {
    HotLeases::new(rule, Counter::default(), Counter::default())
}

/// Units set aside to give back, by identity.
fn unspent(hot: &HotLeases, now_ms: u64) -> Vec<(String, u64)> {
    hot.take_unspent(now_ms)
        .into_iter()
        .map(|u| (u.identity.to_string(), u.units))
        .collect()
}

fn rule() -> HotLeaseRule {
    HotLeaseRule {
        above: 100,
        term_ms: 200,
        max_block: 25,
        windowed: true,
    }
}

fn taken(remaining: i64) -> Decision {
    Decision {
        allowed: true,
        limit: 100,
        remaining,
        retry_after_ms: Some(0),
        reset_after_ms: 10_000,
        permit: None,
    }
}

#[test]
fn a_block_is_what_the_rate_spends_in_a_term_within_its_bounds() {
    let rule = rule();
    assert_eq!(rule.block(100), 20, "100 a second for 200 ms");
    assert_eq!(rule.block(101), 21, "rounded up");
    assert_eq!(rule.block(1), 2, "at least 2");
    assert_eq!(rule.block(10_000), 25, "at most the cap");
}

#[test]
fn a_block_admits_locally_until_it_or_its_term_runs_out() {
    let hot = leases(rule());
    let id = Identity::value("hot");
    assert!(hot.spend(&id, 1, 0).is_none(), "no block yet");
    // A block of 5 taken for a request of 1: the store had 60 left after it.
    let first = hot.keep(&id, 5, 1, (&taken(60), TAKEN), 1_000);
    assert_eq!((first.allowed, first.remaining), (true, 64));
    let spent: Vec<i64> = (0..4)
        .map(|_| hot.spend(&id, 1, 1_100).expect("from the block").remaining)
        .collect();
    assert_eq!(spent, [63, 62, 61, 60]);
    assert!(hot.spend(&id, 1, 1_100).is_none(), "the block is spent");
    assert_eq!(hot.held(), 0);
    hot.keep(&id, 5, 1, (&taken(40), TAKEN), 2_000);
    let d = hot.spend(&id, 2, 2_050).expect("from the block");
    assert_eq!((d.remaining, d.reset_after_ms), (42, 9_950));
    assert!(
        hot.spend(&id, 1, 2_200).is_none(),
        "the term ended: the rest is lost"
    );
    hot.keep(&id, 5, 1, (&taken(40), TAKEN), 3_000);
    assert!(
        hot.spend(&id, 5, 3_010).is_none(),
        "a cost above what is left goes to the store"
    );
    // Set aside to give back: 2 when the term ended at 2 200, 4 when the
    // cost did not fit; nothing lost.
    assert_eq!(unspent(&hot, 3_010), [("hot".into(), 2), ("hot".into(), 4)]);
    assert_eq!(hot.lost.get(), 0);
}

#[test]
fn a_block_is_never_spent_past_the_states_reset() {
    let hot = leases(rule());
    let id = Identity::value("w");
    // A fixed window ending 50 ms after the block was taken.
    let ending = Decision {
        reset_after_ms: 50,
        ..taken(10)
    };
    hot.keep(&id, 5, 1, (&ending, TAKEN), 1_000);
    assert!(hot.spend(&id, 1, 1_049).is_some());
    assert!(hot.spend(&id, 1, 1_050).is_none(), "the window ended");
    assert_eq!(unspent(&hot, 1_050), [("w".into(), 3)]);
    // A bucket's block keeps its term whatever the bucket's reset.
    let bucket = leases(HotLeaseRule {
        windowed: false,
        ..rule()
    });
    bucket.keep(&id, 5, 1, (&ending, TAKEN), 1_000);
    assert!(bucket.spend(&id, 1, 1_150).is_some());
}

#[test]
fn blocks_are_bounded() {
    let hot = leases(rule());
    for i in 0..MAX_BLOCKS + 10 {
        hot.keep(
            &Identity::value(&format!("k{i}")),
            5,
            1,
            (&taken(10), TAKEN),
            0,
        );
    }
    assert_eq!(hot.held(), MAX_BLOCKS);
    // Once they expire, room is made again.
    hot.keep(&Identity::value("late"), 5, 1, (&taken(10), TAKEN), 1_000);
    assert_eq!(hot.held(), 1);
}

#[test]
fn an_identitys_rate_is_its_last_whole_second_or_this_one_when_higher() {
    let hot = leases(rule());
    let id = Identity::value("r");
    let rates: Vec<u64> = (0..3).map(|i| hot.observe(&id, 5_000 + i)).collect();
    assert_eq!(rates, [1, 2, 3]);
    assert_eq!(hot.observe(&id, 6_100), 3, "the last whole second");
    assert_eq!(hot.observe(&id, 8_000), 1, "a quiet second between");
}

#[test]
fn one_request_takes_a_block_while_the_others_go_to_the_store() {
    let hot = leases(rule());
    let id = Identity::value("burst");
    assert!(hot.begin_taking(&id, 0));
    assert!(!hot.begin_taking(&id, 1), "another is taking it");
    assert!(hot.spend(&id, 1, 1).is_none(), "nothing to spend yet");
    hot.keep(&id, 5, 1, (&taken(10), TAKEN), 2);
    assert!(hot.spend(&id, 1, 3).is_some());
    // A refused block lets the next request try.
    let other = Identity::value("other");
    assert!(hot.begin_taking(&other, 0));
    hot.abandon(&other);
    assert!(hot.begin_taking(&other, 1));
    // A taker that never came back lapses after a term.
    assert!(hot.begin_taking(&other, 201));
    assert_eq!(hot.lost.get(), 0);
}

#[test]
fn a_block_whose_term_ran_out_is_set_aside_by_the_upkeep_and_counted_once_given_back() {
    let hot = leases(rule());
    let (a, b) = (Identity::value("a"), Identity::value("b"));
    hot.keep(&a, 10, 1, (&taken(50), TAKEN), 1_000);
    hot.keep(&b, 10, 4, (&taken(50), TAKEN), 1_100);
    assert!(hot.spend(&a, 2, 1_050).is_some());
    assert_eq!(unspent(&hot, 1_199), [], "a's term ends at 1 200");
    assert_eq!(unspent(&hot, 1_200), [("a".into(), 7)]);
    assert_eq!(hot.held(), 1, "b's block lives on");
    assert_eq!(unspent(&hot, 1_200), [], "handed over once");
    hot.given_back(7, 5);
    assert_eq!((hot.returned.get(), hot.lost.get()), (5, 2));
    // Stopping ends every block.
    assert_eq!(hot.take_all_unspent().len(), 1);
    assert_eq!(hot.held(), 0);
}

#[test]
fn the_set_aside_list_is_bounded_and_a_dropped_policy_counts_what_it_held() {
    let lost = Counter::default();
    let hot = HotLeases::new(rule(), lost.clone(), Counter::default());
    for i in 0..MAX_UNSPENT + 3 {
        let id = Identity::value(&format!("k{i}"));
        hot.keep(&id, 5, 1, (&taken(10), TAKEN), 0);
        // A cost the block cannot cover ends it: its 4 are set aside.
        assert!(hot.spend(&id, 5, 1).is_none());
    }
    assert_eq!(lost.get(), 3 * 4, "past the bound, lost");
    drop(hot);
    assert_eq!(
        lost.get(),
        (MAX_UNSPENT as u64 + 3) * 4,
        "the rest went with the policy"
    );
}

/// The store's refusal of a block of 25: 7 left, the block back in 300 ms.
fn refused() -> Decision {
    Decision {
        allowed: false,
        limit: 100,
        remaining: 7,
        retry_after_ms: Some(300),
        reset_after_ms: 4_000,
        permit: None,
    }
}

#[test]
fn a_refused_block_rejects_costs_up_to_it_here_until_the_stores_wait_has_passed() {
    let hot = leases(rule());
    let id = Identity::value("over");
    // Answered at 1 000 000 µs: the asking request's answer.
    let asked = hot.refuse(&id, 25, &refused(), 1_000_000).expect("kept");
    assert_eq!(
        (asked.allowed, asked.remaining, asked.retry_after_ms),
        (false, 0, Some(300))
    );
    // 120.5 ms later: the wait counts down (rounded up, never early), the
    // reset from the answer (rounded down, never early either).
    let later = hot.refused(&id, 25, 1_120_500).expect("rejected here");
    assert_eq!(
        (later.remaining, later.retry_after_ms, later.reset_after_ms),
        (0, Some(180), 3_880)
    );
    assert!(
        hot.refused(&id, 26, 1_120_500).is_none(),
        "above the block: ask"
    );
    assert_eq!(
        hot.refused(&id, 1, 1_299_999).map(|d| d.retry_after_ms),
        Some(Some(1))
    );
    assert!(
        hot.refused(&id, 1, 1_300_000).is_none(),
        "the wait has passed"
    );
    assert_eq!(hot.refusals_held(), 0, "and it is forgotten");
}

#[test]
fn a_tiny_wait_is_floored_and_a_block_that_never_fits_is_not_remembered() {
    let hot = leases(rule());
    let id = Identity::value("edge");
    let tiny = Decision {
        retry_after_ms: Some(1),
        ..refused()
    };
    let asked = hot.refuse(&id, 25, &tiny, 0).expect("kept");
    assert_eq!(asked.retry_after_ms, Some(REFUSED_FLOOR_MS));
    assert!(hot.refused(&id, 1, REFUSED_FLOOR_MS * 1_000 - 1).is_some());
    let never = Decision {
        retry_after_ms: None,
        ..refused()
    };
    assert!(
        hot.refuse(&Identity::value("huge"), 200, &never, 0)
            .is_none()
    );
    assert_eq!(hot.refusals_held(), 1);
}

#[test]
fn a_block_taken_or_a_reset_forgets_the_refusal() {
    let hot = leases(rule());
    let id = Identity::value("back");
    hot.refuse(&id, 25, &refused(), 0);
    hot.keep(&id, 5, 1, (&taken(10), TAKEN), 0);
    assert!(hot.refused(&id, 1, 1).is_none());
    hot.refuse(&id, 25, &refused(), 0);
    hot.forget_refusal(&id);
    assert!(hot.refused(&id, 1, 1).is_none());
}

#[test]
fn refusals_are_bounded() {
    let hot = leases(rule());
    for i in 0..MAX_BLOCKS {
        assert!(
            hot.refuse(&Identity::value(&format!("k{i}")), 25, &refused(), 0)
                .is_some()
        );
    }
    let late = Identity::value("late");
    assert!(
        hot.refuse(&late, 25, &refused(), 1).is_none(),
        "full of live refusals: decided on the store as before"
    );
    // Once they lapse, room is made again.
    assert!(hot.refuse(&late, 25, &refused(), 300_000).is_some());
    assert_eq!(hot.refusals_held(), 1);
}

#[test]
fn ending_a_block_hands_over_its_unspent_units_once_and_leaves_one_being_taken() {
    let hot = leases(rule());
    let id = Identity::value("hot");
    hot.keep(&id, 5, 1, (&taken(60), TAKEN), 1_000);
    assert!(hot.spend(&id, 1, 1_001).is_some());
    let ended = hot.end(&id).expect("a live block");
    assert_eq!((ended.units, ended.taken), (3, TAKEN));
    assert!(hot.end(&id).is_none(), "ended once");
    assert!(hot.spend(&id, 1, 1_002).is_none(), "no block left to spend");
    assert_eq!(unspent(&hot, u64::MAX), Vec::<(String, u64)>::new());
    let other = Identity::value("taking");
    assert!(hot.begin_taking(&other, 2_000));
    assert!(hot.end(&other).is_none(), "a block being taken stays");
    assert!(!hot.begin_taking(&other, 2_001), "still being taken");
}
