use prometheus_client::metrics::counter::Counter;
use tollgate_core::{Decision, Identity};

use super::*;

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
    let hot = HotLeases::new(rule(), Counter::default());
    let id = Identity::value("hot");
    assert!(hot.spend(&id, 1, 0).is_none(), "no block yet");
    // A block of 5 taken for a request of 1: the store had 60 left after it.
    let first = hot.keep(&id, 5, 1, &taken(60), 1_000);
    assert_eq!((first.allowed, first.remaining), (true, 64));
    let spent: Vec<i64> = (0..4)
        .map(|_| hot.spend(&id, 1, 1_100).expect("from the block").remaining)
        .collect();
    assert_eq!(spent, [63, 62, 61, 60]);
    assert!(hot.spend(&id, 1, 1_100).is_none(), "the block is spent");
    assert_eq!(hot.held(), 0);
    hot.keep(&id, 5, 1, &taken(40), 2_000);
    let d = hot.spend(&id, 2, 2_050).expect("from the block");
    assert_eq!((d.remaining, d.reset_after_ms), (42, 9_950));
    assert!(
        hot.spend(&id, 1, 2_200).is_none(),
        "the term ended: the rest is lost"
    );
    hot.keep(&id, 5, 1, &taken(40), 3_000);
    assert!(
        hot.spend(&id, 5, 3_010).is_none(),
        "a cost above what is left goes to the store"
    );
    // Lost: 2 when the term ended at 2 200, 4 when the cost did not fit.
    assert_eq!(hot.lost.get(), 6);
}

#[test]
fn a_block_is_never_spent_past_the_states_reset() {
    let hot = HotLeases::new(rule(), Counter::default());
    let id = Identity::value("w");
    // A fixed window ending 50 ms after the block was taken.
    let ending = Decision {
        reset_after_ms: 50,
        ..taken(10)
    };
    hot.keep(&id, 5, 1, &ending, 1_000);
    assert!(hot.spend(&id, 1, 1_049).is_some());
    assert!(hot.spend(&id, 1, 1_050).is_none(), "the window ended");
    assert_eq!(hot.lost.get(), 3);
    // A bucket's block keeps its term whatever the bucket's reset.
    let bucket = HotLeases::new(
        HotLeaseRule {
            windowed: false,
            ..rule()
        },
        Counter::default(),
    );
    bucket.keep(&id, 5, 1, &ending, 1_000);
    assert!(bucket.spend(&id, 1, 1_150).is_some());
}

#[test]
fn blocks_are_bounded() {
    let hot = HotLeases::new(rule(), Counter::default());
    for i in 0..MAX_BLOCKS + 10 {
        hot.keep(&Identity::value(&format!("k{i}")), 5, 1, &taken(10), 0);
    }
    assert_eq!(hot.held(), MAX_BLOCKS);
    // Once they expire, room is made again.
    hot.keep(&Identity::value("late"), 5, 1, &taken(10), 1_000);
    assert_eq!(hot.held(), 1);
}

#[test]
fn an_identitys_rate_is_its_last_whole_second_or_this_one_when_higher() {
    let hot = HotLeases::new(rule(), Counter::default());
    let id = Identity::value("r");
    let rates: Vec<u64> = (0..3).map(|i| hot.observe(&id, 5_000 + i)).collect();
    assert_eq!(rates, [1, 2, 3]);
    assert_eq!(hot.observe(&id, 6_100), 3, "the last whole second");
    assert_eq!(hot.observe(&id, 8_000), 1, "a quiet second between");
}

#[test]
fn one_request_takes_a_block_while_the_others_go_to_the_store() {
    let hot = HotLeases::new(rule(), Counter::default());
    let id = Identity::value("burst");
    assert!(hot.begin_taking(&id, 0));
    assert!(!hot.begin_taking(&id, 1), "another is taking it");
    assert!(hot.spend(&id, 1, 1).is_none(), "nothing to spend yet");
    hot.keep(&id, 5, 1, &taken(10), 2);
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
