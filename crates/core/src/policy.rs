//! A policy: a name, an algorithm, and the integers that algorithm needs,
//! already reduced to the fixed-point scale that keeps refill exact.

use std::fmt;
use std::sync::Arc;

use crate::duration::format_duration_ms;

/// The six algorithms of docs/design.md §3. The name is part of every store key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Tokens refilled continuously up to a capacity; allows bursts.
    TokenBucket,
    /// The token bucket's contract in one integer of state.
    Gcra,
    /// A count per epoch-aligned window; cheapest, but 2L can pass across a boundary.
    FixedWindow,
    /// The previous window's count weighted by its overlap: near-exact, two counters.
    SlidingWindow,
    /// Every admitted cost logged: exact, memory grows with the limit.
    SlidingLog,
    /// Permits held until released or their lease ends: a cap on work in
    /// flight, not a rate.
    Concurrency,
}

impl Algorithm {
    /// Every algorithm, for tests and benches that must cover them all.
    pub const ALL: [Algorithm; 6] = [
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
        Algorithm::Concurrency,
    ];

    /// The config and key spelling, e.g. `token_bucket`.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Gcra => "gcra",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::Concurrency => "concurrency",
        }
    }

    /// Reads the config spelling back; `None` for an unknown name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == name)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `capacity` C refilled by `tokens` N every `per` P ms, in the scale of
/// docs/design.md §3: g = gcd(N, P), a token is p = P/g units, n = N/g units
/// arrive per ms. Every refill is then a whole number of units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    capacity: u64,
    tokens: u64,
    per_ms: u64,
    n: u64,
    p: u64,
}

impl Rate {
    /// `None` when any part is zero: validation reports that with context.
    pub fn new(capacity: u64, tokens: u64, per_ms: u64) -> Option<Self> {
        if capacity == 0 || tokens == 0 || per_ms == 0 {
            return None;
        }
        let g = gcd(tokens, per_ms);
        Some(Self {
            capacity,
            tokens,
            per_ms,
            n: tokens / g,
            p: per_ms / g,
        })
    }

    /// C, the most tokens the bucket holds (the burst size).
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
    /// N as configured, before the scale reduces it; for display.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }
    /// P as configured, in ms; for display.
    pub fn per_ms(&self) -> u64 {
        self.per_ms
    }
    /// Units that arrive per millisecond.
    pub fn units_per_ms(&self) -> u64 {
        self.n
    }
    /// Units in one token.
    pub fn units_per_token(&self) -> u64 {
        self.p
    }
    /// C·p, the bucket's size in units.
    pub fn capacity_units(&self) -> u128 {
        u128::from(self.capacity) * u128::from(self.p)
    }
}

/// `limit` L per `window` W ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    limit: u64,
    window_ms: u64,
}

impl Window {
    /// `None` when either part is zero: validation reports that with context.
    pub fn new(limit: u64, window_ms: u64) -> Option<Self> {
        (limit > 0 && window_ms > 0).then_some(Self { limit, window_ms })
    }
    /// L, the cost admitted per window.
    pub fn limit(&self) -> u64 {
        self.limit
    }
    /// W, the window's length in ms.
    pub fn window_ms(&self) -> u64 {
        self.window_ms
    }
}

/// `limit` N permits, each held at most `lease` T ms: a holder that dies
/// before releasing keeps its permit only until its lease ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permits {
    limit: u64,
    lease_ms: u64,
}

impl Permits {
    /// `None` when either part is zero: validation reports that with context.
    pub fn new(limit: u64, lease_ms: u64) -> Option<Self> {
        (limit > 0 && lease_ms > 0).then_some(Self { limit, lease_ms })
    }
    /// N, the most permits held at once.
    pub fn limit(&self) -> u64 {
        self.limit
    }
    /// T, the longest a permit is held, in ms.
    pub fn lease_ms(&self) -> u64 {
        self.lease_ms
    }
}

/// An algorithm with its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limits {
    /// See [`Algorithm::TokenBucket`].
    TokenBucket(Rate),
    /// See [`Algorithm::Gcra`].
    Gcra(Rate),
    /// See [`Algorithm::FixedWindow`].
    FixedWindow(Window),
    /// See [`Algorithm::SlidingWindow`].
    SlidingWindow(Window),
    /// See [`Algorithm::SlidingLog`].
    SlidingLog(Window),
    /// See [`Algorithm::Concurrency`].
    Concurrency(Permits),
}

impl Limits {
    /// Which algorithm these parameters belong to; part of every store key.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            Limits::TokenBucket(_) => Algorithm::TokenBucket,
            Limits::Gcra(_) => Algorithm::Gcra,
            Limits::FixedWindow(_) => Algorithm::FixedWindow,
            Limits::SlidingWindow(_) => Algorithm::SlidingWindow,
            Limits::SlidingLog(_) => Algorithm::SlidingLog,
            Limits::Concurrency(_) => Algorithm::Concurrency,
        }
    }

    /// C for the bucket algorithms, L for the window algorithms, N permits.
    pub fn limit(&self) -> u64 {
        match self {
            Limits::TokenBucket(r) | Limits::Gcra(r) => r.capacity(),
            Limits::FixedWindow(w) | Limits::SlidingWindow(w) | Limits::SlidingLog(w) => w.limit(),
            Limits::Concurrency(p) => p.limit(),
        }
    }

    /// The span the limit is stated over, for the `w` of `RateLimit-Policy`:
    /// a bucket's time to refill from empty, a window's length, a permit's
    /// lease (the longest before a held permit is free again).
    pub fn window_ms(&self) -> u64 {
        match self {
            Limits::TokenBucket(r) | Limits::Gcra(r) => {
                let units = r.capacity_units();
                let n = u128::from(r.units_per_ms());
                u64::try_from(units.div_ceil(n)).unwrap_or(u64::MAX)
            }
            Limits::FixedWindow(w) | Limits::SlidingWindow(w) | Limits::SlidingLog(w) => {
                w.window_ms()
            }
            Limits::Concurrency(p) => p.lease_ms(),
        }
    }

    /// Whether these limits hold permits (acquired, then released) rather
    /// than spend a rate: only a door that sees a request end may use them.
    pub fn holds_permits(&self) -> bool {
        self.permits().is_some()
    }

    /// The permits of a concurrency policy; `None` for a rate.
    pub fn permits(&self) -> Option<Permits> {
        match self {
            Limits::Concurrency(p) => Some(*p),
            _ => None,
        }
    }

    /// The time these limits take to forget a use: a bucket's refill from
    /// empty to full, a fixed window or a log's window, two windows for a
    /// sliding window (its estimate weighs the previous one), a permit's
    /// lease. A state left
    /// alone this long says nothing of what was spent before it.
    pub fn rest_ms(&self) -> u64 {
        match self {
            Limits::TokenBucket(r) | Limits::Gcra(r) => {
                let ms = u128::from(r.capacity()) * u128::from(r.per_ms());
                u64::try_from(ms.div_ceil(u128::from(r.tokens().max(1)))).unwrap_or(u64::MAX / 4)
            }
            Limits::FixedWindow(w) | Limits::SlidingLog(w) => w.window_ms(),
            Limits::SlidingWindow(w) => w.window_ms().saturating_mul(2),
            Limits::Concurrency(p) => p.lease_ms(),
        }
    }

    /// What these limits admit over time, `(count, span_ms)`: a bucket's
    /// refill of N per P, a window's L per W, N permits per lease (a bound
    /// only when every holder keeps its lease whole). With [`Limits::burst`], all
    /// a reader needs to state them (Envoy's `current_limit`, `explain`).
    pub fn count_per_span(&self) -> (u64, u64) {
        match self {
            Limits::TokenBucket(r) | Limits::Gcra(r) => (r.tokens(), r.per_ms()),
            Limits::FixedWindow(w) | Limits::SlidingWindow(w) | Limits::SlidingLog(w) => {
                (w.limit(), w.window_ms())
            }
            Limits::Concurrency(p) => (p.limit(), p.lease_ms()),
        }
    }

    /// A bucket's capacity C, the burst it admits before its refill paces
    /// it; `None` for a window, whose count per span is all it admits.
    pub fn burst(&self) -> Option<u64> {
        match self {
            Limits::TokenBucket(r) | Limits::Gcra(r) => Some(r.capacity()),
            Limits::FixedWindow(_)
            | Limits::SlidingWindow(_)
            | Limits::SlidingLog(_)
            | Limits::Concurrency(_) => None,
        }
    }

    /// The share `weight / total` of these limits, with `limit` as its
    /// [`Limits::limit`] (the caller rounds the limit's share its own way: a
    /// split sums its shares to the whole, a local share rounds down). A
    /// bucket's refill needs no rounding: N·weight tokens per P·total is
    /// exactly its share; a window keeps its length, permits their lease.
    /// `None` when `limit`
    /// is 0 (a share that admits nothing) or the refill does not fit a u64.
    pub fn share(&self, limit: u64, weight: u64, total: u64) -> Option<Limits> {
        let rate = |r: &Rate| {
            Rate::new(
                limit,
                r.tokens().checked_mul(weight)?,
                r.per_ms().checked_mul(total)?,
            )
        };
        let window = |w: &Window| Window::new(limit, w.window_ms());
        Some(match self {
            Limits::TokenBucket(r) => Limits::TokenBucket(rate(r)?),
            Limits::Gcra(r) => Limits::Gcra(rate(r)?),
            Limits::FixedWindow(w) => Limits::FixedWindow(window(w)?),
            Limits::SlidingWindow(w) => Limits::SlidingWindow(window(w)?),
            Limits::SlidingLog(w) => Limits::SlidingLog(window(w)?),
            Limits::Concurrency(p) => Limits::Concurrency(Permits::new(limit, p.lease_ms())?),
        })
    }
}

/// As `explain` and logs state them: `token_bucket capacity 20 refill 5
/// per 1s`, `fixed_window limit 100 per 1m`, `concurrency limit 3 lease 30s`.
impl fmt::Display for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let algorithm = self.algorithm();
        match self {
            Limits::TokenBucket(r) | Limits::Gcra(r) => write!(
                f,
                "{algorithm} capacity {} refill {} per {}",
                r.capacity(),
                r.tokens(),
                format_duration_ms(r.per_ms())
            ),
            Limits::FixedWindow(w) | Limits::SlidingWindow(w) | Limits::SlidingLog(w) => write!(
                f,
                "{algorithm} limit {} per {}",
                w.limit(),
                format_duration_ms(w.window_ms())
            ),
            Limits::Concurrency(p) => write!(
                f,
                "{algorithm} limit {} lease {}",
                p.limit(),
                format_duration_ms(p.lease_ms())
            ),
        }
    }
}

/// A named, validated policy. Cheap to clone.
#[derive(Clone, PartialEq, Eq)]
pub struct Policy {
    name: Arc<str>,
    limits: Limits,
    /// [`Policy::key_digest`], computed once.
    key_digest: u64,
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("name", &self.name)
            .field("limits", &self.limits)
            .finish()
    }
}

impl Policy {
    /// Takes limits already validated; the name is not checked here (config
    /// parsing does that, with context).
    pub fn new(name: impl Into<Arc<str>>, limits: Limits) -> Self {
        let name = name.into();
        let key_digest = key_digest(&name, limits.algorithm());
        Self {
            name,
            limits,
            key_digest,
        }
    }
    /// A fixed 64-bit digest of the policy's part of a store key (its name
    /// and algorithm; FNV-1a), the same for every policy of that name and
    /// algorithm: a store hashes it with the identity instead of hashing
    /// the name at every decision. Not seeded and not collision-free: a
    /// store mixes it into its own seeded hash and still compares names.
    pub fn key_digest(&self) -> u64 {
        self.key_digest
    }
    /// The name requests, keys, headers and metrics call it by.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The shared name, for stores that key state by it without copying.
    pub fn name_arc(&self) -> &Arc<str> {
        &self.name
    }
    /// The algorithm and its integers, for deciding.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
    /// Shorthand for `limits().algorithm()`.
    pub fn algorithm(&self) -> Algorithm {
        self.limits.algorithm()
    }
}

/// FNV-1a over the name's bytes, then the algorithm's spelling after a
/// separator no name's UTF-8 holds.
fn key_digest(name: &str, algorithm: Algorithm) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let bytes = name.bytes().chain([0xff]).chain(algorithm.as_str().bytes());
    bytes.fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

pub(crate) fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_reduces_by_the_gcd() {
        let r = Rate::new(20, 5, 1_000).expect("valid");
        assert_eq!((r.units_per_ms(), r.units_per_token()), (1, 200));
        let r = Rate::new(7, 100, 60_000).expect("valid");
        assert_eq!((r.units_per_ms(), r.units_per_token()), (1, 600));
        let r = Rate::new(3, 7, 3).expect("valid");
        assert_eq!((r.units_per_ms(), r.units_per_token()), (7, 3));
    }

    #[test]
    fn a_share_takes_the_limit_given_and_scales_a_refill_exactly() {
        let bucket = Limits::Gcra(Rate::new(20, 5, 1_000).expect("valid"));
        let share = bucket.share(7, 1, 3).expect("a share");
        assert_eq!(share, Limits::Gcra(Rate::new(7, 5, 3_000).expect("valid")));
        assert_eq!(
            (share.count_per_span(), share.burst()),
            ((5, 3_000), Some(7))
        );
        assert_eq!(share.to_string(), "gcra capacity 7 refill 5 per 3s");
        let window = Limits::SlidingLog(Window::new(10, 60_000).expect("valid"));
        let share = window.share(4, 2, 5).expect("a share");
        assert_eq!((share.count_per_span(), share.burst()), ((4, 60_000), None));
        assert_eq!(share.to_string(), "sliding_log limit 4 per 1m");
        assert_eq!(window.share(0, 1, 5), None, "a share of 0 admits nothing");
        assert_eq!(bucket.share(1, u64::MAX, 1), None, "a refill past u64");
    }

    #[test]
    fn zero_parts_are_not_a_rate_or_window() {
        assert!(Rate::new(0, 1, 1).is_none());
        assert!(Rate::new(1, 0, 1).is_none());
        assert!(Rate::new(1, 1, 0).is_none());
        assert!(Window::new(0, 1).is_none());
        assert!(Window::new(1, 0).is_none());
    }
}
