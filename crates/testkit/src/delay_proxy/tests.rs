use super::*;

fn settings(link: Link, drops: u64, holes: u64) -> Settings {
    Settings {
        link,
        delay: Delay::none(),
        drops,
        holes,
    }
}

#[test]
fn delays_are_drawn_within_their_range_and_spread_over_it() {
    let delay = Delay {
        min: Duration::from_millis(30),
        max: Duration::from_millis(80),
    };
    let mut rng = SplitMix64(SEED);
    let samples: Vec<Duration> = (0..10_000).map(|_| delay.sample(&mut rng)).collect();
    assert!(samples.iter().all(|d| (delay.min..=delay.max).contains(d)));
    let low = samples
        .iter()
        .filter(|d| **d < Duration::from_millis(40))
        .count();
    let high = samples
        .iter()
        .filter(|d| **d > Duration::from_millis(70))
        .count();
    assert!(low > 1_000 && high > 1_000, "low {low}, high {high}");
}

#[test]
fn a_range_without_width_is_its_minimum() {
    let mut rng = SplitMix64(SEED);
    assert_eq!(Delay::none().sample(&mut rng), Duration::ZERO);
    let backwards = Delay {
        min: Duration::from_millis(50),
        max: Duration::from_millis(10),
    };
    assert_eq!(backwards.sample(&mut rng), Duration::from_millis(50));
}

#[test]
fn the_same_seed_draws_the_same_delays() {
    let delay = Delay {
        min: Duration::ZERO,
        max: Duration::from_secs(1),
    };
    let (mut a, mut b) = (SplitMix64(7), SplitMix64(7));
    for _ in 0..100 {
        assert_eq!(delay.sample(&mut a), delay.sample(&mut b));
    }
}

#[test]
fn a_connection_born_passing_passes_until_a_fault_and_closes_after_a_drop() {
    let born = Born::under(&settings(Link::Pass, 0, 0));
    assert_eq!(born.fate(&settings(Link::Pass, 0, 0)), Fate::Pass);
    assert_eq!(born.fate(&settings(Link::Drop, 1, 0)), Fate::Close);
    // A drop it did not look at in time still closes it.
    assert_eq!(born.fate(&settings(Link::Pass, 1, 0)), Fate::Close);
}

#[test]
fn a_connection_in_a_black_hole_swallows_and_is_reset_when_the_link_passes_again() {
    let born = Born::under(&settings(Link::Pass, 0, 0));
    assert_eq!(born.fate(&settings(Link::BlackHole, 0, 1)), Fate::Swallow);
    assert_eq!(born.fate(&settings(Link::Pass, 0, 1)), Fate::Close);
    assert_eq!(born.fate(&settings(Link::Drop, 1, 1)), Fate::Close);
}

#[test]
fn a_connection_born_in_a_black_hole_lives_only_as_long_as_that_hole() {
    let born = Born::under(&settings(Link::BlackHole, 0, 1));
    assert!(!born.onward);
    assert_eq!(born.fate(&settings(Link::BlackHole, 0, 1)), Fate::Swallow);
    assert_eq!(born.fate(&settings(Link::Pass, 0, 1)), Fate::Close);
    assert_eq!(born.fate(&settings(Link::BlackHole, 0, 2)), Fate::Close);
}
