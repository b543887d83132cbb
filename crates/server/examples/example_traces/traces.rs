//! The example traces of examples/traces/, made from a fixed seed with
//! integer arithmetic only (no floating point, whose last digits a libm may
//! change), so every machine makes them byte for byte. Each is a
//! `tollgate replay` input naming one policy, `api`, which the configs
//! beside them (`api-*.yaml`) define four ways, 20 requests a minute each.
//!
//! crates/server/tests/example_traces.rs holds the committed files to
//! this code.

/// 2026-01-01T00:00:00Z: every trace starts here.
pub const START_MS: u64 = 1_767_225_600_000;
const SECOND: u64 = 1_000;
const MINUTE: u64 = 60 * SECOND;

/// Each trace by its file's name (without `.jsonl`), and its text.
pub fn all() -> Vec<(&'static str, String)> {
    vec![
        ("boundary-attack", boundary_attack()),
        ("steady", steady()),
        ("bursty", bursty()),
        ("diurnal", diurnal()),
        ("region-shift", region_shift()),
    ]
}

/// SplitMix64: small, fast, and the same everywhere.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A gap of `mean` ms on average: uniform in `1..2*mean`.
    fn gap(&mut self, mean: u64) -> u64 {
        1 + self.below(2 * mean - 1)
    }
}

/// One request: when, and whose (its key as JSON).
struct Event {
    t_ms: u64,
    key: String,
}

/// A client sending every `mean_gap` ms on average in `[from, to)`.
fn steady_stream(
    rng: &mut Rng,
    key: &str,
    from: u64,
    to: u64,
    mean_gap: u64,
    out: &mut Vec<Event>,
) {
    let mut t = from + rng.below(mean_gap);
    while t < to {
        out.push(Event {
            t_ms: t,
            key: quoted(key),
        });
        t += rng.gap(mean_gap);
    }
}

/// `count` requests from `key`, `spacing` ms apart from `at`.
fn burst(key: &str, at: u64, count: u64, spacing: u64, out: &mut Vec<Event>) {
    for i in 0..count {
        out.push(Event {
            t_ms: at + i * spacing,
            key: quoted(key),
        });
    }
}

fn quoted(key: &str) -> String {
    format!("\"{key}\"")
}

/// The events in time order (a stable sort: ties keep their making order),
/// as trace lines from [`START_MS`].
fn lines(mut events: Vec<Event>) -> String {
    events.sort_by_key(|e| e.t_ms);
    let mut text = String::with_capacity(events.len() * 72);
    for e in events {
        text.push_str(&format!(
            "{{\"t_ms\":{},\"policy\":\"api\",\"key\":{},\"cost\":1}}\n",
            START_MS + e.t_ms,
            e.key
        ));
    }
    text
}

/// Four clients at 10 a minute for 6 minutes, and one that sends 20 in the
/// last second before a minute's end and 20 in the first second after it,
/// at minutes 1, 3 and 5: 40 in two seconds, twice the limit, each time.
fn boundary_attack() -> String {
    let mut rng = Rng::new(1);
    let mut events = Vec::new();
    for client in 1..=4 {
        steady_stream(
            &mut rng,
            &format!("client-{client}"),
            0,
            6 * MINUTE,
            6 * SECOND,
            &mut events,
        );
    }
    for minute in [1, 3, 5] {
        let boundary = minute * MINUTE;
        burst("attacker", boundary - SECOND, 20, 50, &mut events);
        burst("attacker", boundary, 20, 50, &mut events);
    }
    lines(events)
}

/// Ten minutes of eight clients: six at 10 a minute, one at 15, and one at
/// 30, over the limit all along.
fn steady() -> String {
    let mut rng = Rng::new(2);
    let mut events = Vec::new();
    for client in 1..=6 {
        steady_stream(
            &mut rng,
            &format!("client-{client}"),
            0,
            10 * MINUTE,
            6 * SECOND,
            &mut events,
        );
    }
    steady_stream(
        &mut rng,
        "client-7",
        0,
        10 * MINUTE,
        4 * SECOND,
        &mut events,
    );
    steady_stream(&mut rng, "heavy", 0, 10 * MINUTE, 2 * SECOND, &mut events);
    lines(events)
}

/// Ten minutes of six clients at 3 a minute, each sending two bursts of 30
/// requests in 3 seconds at moments of its own.
fn bursty() -> String {
    let mut rng = Rng::new(3);
    let mut events = Vec::new();
    for client in 1..=6 {
        let key = format!("client-{client}");
        steady_stream(&mut rng, &key, 0, 10 * MINUTE, 20 * SECOND, &mut events);
        for half in 0..2 {
            let at = half * 5 * MINUTE + rng.below(4 * MINUTE);
            burst(&key, at, 30, 100, &mut events);
        }
    }
    lines(events)
}

/// Requests a minute per client in each hour of the day, trough at 03:00,
/// peak at 16:00.
const DAY: [u64; 24] = [
    2, 2, 1, 1, 1, 2, 3, 5, 9, 13, 17, 20, 22, 23, 24, 25, 26, 24, 20, 16, 12, 8, 5, 3,
];

/// A day's shape compressed so each hour is a minute: three clients whose
/// rate follows [`DAY`], over the limit around the afternoon peak.
fn diurnal() -> String {
    let mut rng = Rng::new(4);
    let mut events = Vec::new();
    for client in 1..=3 {
        let key = format!("client-{client}");
        for (hour, per_minute) in (0u64..).zip(DAY) {
            let from = hour * MINUTE;
            steady_stream(
                &mut rng,
                &key,
                from,
                from + MINUTE,
                MINUTE / per_minute,
                &mut events,
            );
        }
    }
    lines(events)
}

/// Four tenants at 30 a minute each, keyed by tenant and the region their
/// request came in through (a per-region budget): for six minutes half in
/// eu-west and half in us-east, then eu-west fails over and for six
/// minutes all come through us-east. Each tenant sends as much as before.
fn region_shift() -> String {
    let mut rng = Rng::new(5);
    let mut events = Vec::new();
    for tenant in 1..=4 {
        let mut t = rng.below(2 * SECOND);
        while t < 12 * MINUTE {
            let region = if t >= 6 * MINUTE || rng.below(2) == 0 {
                "us-east"
            } else {
                "eu-west"
            };
            events.push(Event {
                t_ms: t,
                key: format!("{{\"tenant\":\"t{tenant}\",\"region\":\"{region}\"}}"),
            });
            t += rng.gap(2 * SECOND);
        }
    }
    lines(events)
}
