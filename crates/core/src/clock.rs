//! Time enters the core only through a [`Clock`], so every decision can be
//! replayed at a chosen instant and every edge case is a deterministic test.
//!
//! A clock tells two times. The wall clock (`now_ms`, Unix milliseconds)
//! dates decisions, because windows are aligned to the epoch and every
//! instance must agree on them. The monotonic clock (`monotonic_us`) never
//! steps: durations that must hold whatever an operator or NTP does to the
//! wall clock — a lease's term, a store call's latency — are measured on it.
//! A decision wants both; [`SystemClock`] reads the time once for the two.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of Unix time in whole milliseconds, and of monotonic time.
pub trait Clock: Send + Sync {
    /// The current time as milliseconds since the Unix epoch, the unit every
    /// decision counts in.
    fn now_ms(&self) -> u64;

    /// Microseconds since an arbitrary start, never stepping back and never
    /// 0: for durations (lease terms, latency), never for dating a decision.
    fn monotonic_us(&self) -> u64;

    /// [`Clock::monotonic_us`] in whole milliseconds.
    fn monotonic_ms(&self) -> u64 {
        self.monotonic_us() / 1_000
    }

    /// [`Clock::now_ms`] and [`Clock::monotonic_ms`] at one instant: what a
    /// store reads once per decision. A clock that derives one time from
    /// the other reads the time once.
    fn now_and_monotonic_ms(&self) -> (u64, u64) {
        (self.now_ms(), self.monotonic_ms())
    }

    /// [`Clock::now_ms`] and [`Clock::monotonic_us`] at one instant: what
    /// a caller reads once to date a decision and to time it, handing the
    /// time on to a store on the same clock rather than have it read
    /// again (a read of the TSC alone is some 10 ns).
    fn now_ms_and_monotonic_us(&self) -> (u64, u64) {
        (self.now_ms(), self.monotonic_us())
    }
}

/// The operating system's wall clock and a monotonic clock read from the
/// CPU's time-stamp counter (quanta; the OS monotonic clock where the TSC
/// is unusable), which costs a fraction of a system clock read.
///
/// The wall clock is read at most once a millisecond of monotonic time and
/// carried between reads as its offset from the monotonic clock: every
/// reading is the wall time to within a microsecond (the TSC's drift over a
/// millisecond), and a step of the wall clock shows within a millisecond.
/// Decisions are exact in whatever milliseconds they are given; this only
/// makes reading them cheap.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

/// Where [`SystemClock`]'s monotonic time starts: one second before the
/// first read, so no reading is 0 (0 stands for "never" in the callers).
const MONOTONIC_START_NS: u64 = 1_000_000_000;

/// How often [`SystemClock`] reads the wall clock itself, in monotonic ns.
const WALL_READ_EVERY_NS: u64 = 1_000_000;

/// The TSC-backed clock and its reading at the first use.
struct Counter {
    clock: quanta::Clock,
    start: u64,
}

/// The wall clock's offset from the monotonic one (ns, wrapping: the wall
/// time is the monotonic time plus it, modulo 2^64), and when it was last
/// read (monotonic ns, 0: never). The offset is stored before the time of
/// its read, which publishes it (release, acquire): a reader that sees a
/// read time sees its offset or a later one, never the initial 0 (on x86
/// both orderings are plain moves). Two writers racing leave an offset of
/// either, each the wall time to within a microsecond.
static WALL_OFFSET_NS: AtomicU64 = AtomicU64::new(0);
static WALL_READ_AT_NS: AtomicU64 = AtomicU64::new(0);

impl SystemClock {
    /// The wall time, read from the operating system, in ns.
    // The read of the wall clock in core and store (clippy.toml bans the
    // rest): everything else is handed a `Clock`.
    #[allow(clippy::disallowed_methods)]
    fn read_wall_ns() -> u64 {
        // A clock set before 1970 reads as the epoch rather than panicking.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    /// The monotonic time in ns: the TSC's count since the first read.
    #[inline]
    fn monotonic_ns() -> u64 {
        static COUNTER: OnceLock<Counter> = OnceLock::new();
        let counter = COUNTER.get_or_init(|| {
            let clock = quanta::Clock::new();
            let start = clock.raw();
            Counter { clock, start }
        });
        let elapsed_ns = counter
            .clock
            .delta_as_nanos(counter.start, counter.clock.raw());
        // No overflow for 584 years of uptime.
        elapsed_ns.wrapping_add(MONOTONIC_START_NS)
    }

    /// Both times in ns, from one read of the counter: the wall time is
    /// carried as its offset and read afresh once a millisecond. In
    /// nanoseconds throughout, so each time in ms is one division.
    #[inline]
    fn now_ns(&self) -> (u64, u64) {
        let mono = Self::monotonic_ns();
        let read_at = WALL_READ_AT_NS.load(Ordering::Acquire);
        // Wrapping: a read stamped later by another thread than this
        // one's time reads the wall again, which is as exact.
        let wall = if mono.wrapping_sub(read_at) >= WALL_READ_EVERY_NS {
            Self::read_wall_at(mono)
        } else {
            mono.wrapping_add(WALL_OFFSET_NS.load(Ordering::Relaxed))
        };
        (wall, mono)
    }

    /// Reads the wall clock at monotonic time `mono` and carries it from
    /// there; once a millisecond, out of the common path.
    #[cold]
    #[inline(never)]
    fn read_wall_at(mono: u64) -> u64 {
        let wall = Self::read_wall_ns();
        WALL_OFFSET_NS.store(wall.wrapping_sub(mono), Ordering::Relaxed);
        WALL_READ_AT_NS.store(mono, Ordering::Release);
        wall
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        self.now_ns().0 / 1_000_000
    }

    fn monotonic_us(&self) -> u64 {
        Self::monotonic_ns() / 1_000
    }

    fn now_and_monotonic_ms(&self) -> (u64, u64) {
        let (wall, mono) = self.now_ns();
        (wall / 1_000_000, mono / 1_000_000)
    }

    fn now_ms_and_monotonic_us(&self) -> (u64, u64) {
        let (wall, mono) = self.now_ns();
        (wall / 1_000_000, mono / 1_000)
    }
}

/// A clock that moves only when told to: tests and `tollgate replay`.
///
/// Its monotonic time starts at the wall time it is made with and moves
/// forward with it; [`set`](Self::set) backward steps the wall clock alone,
/// as an operator or NTP stepping a real clock would.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicU64,
    monotonic_us: AtomicU64,
}

impl ManualClock {
    /// A clock stopped at `now_ms` until [`set`](Self::set) or
    /// [`advance`](Self::advance) moves it.
    pub fn new(now_ms: u64) -> Self {
        Self {
            now_ms: AtomicU64::new(now_ms),
            monotonic_us: AtomicU64::new(now_ms.saturating_mul(1_000)),
        }
    }

    /// Sets the wall time, forward or backward (a stepping clock is a case
    /// to test). Forward, the monotonic time moves by as much; backward, it
    /// stays where it is.
    pub fn set(&self, now_ms: u64) {
        let before = self.now_ms.swap(now_ms, Ordering::Relaxed);
        if now_ms > before {
            self.monotonic_us
                .fetch_add((now_ms - before).saturating_mul(1_000), Ordering::Relaxed);
        }
    }

    /// Steps the wall time alone, forward or backward, as an operator or a
    /// wrong time source stepping a real clock would: the monotonic time,
    /// which no step moves, stays where it is.
    pub fn step(&self, now_ms: u64) {
        self.now_ms.store(now_ms, Ordering::Relaxed);
    }

    /// Moves both times forward, as a trace's next event would.
    pub fn advance(&self, by_ms: u64) {
        self.now_ms.fetch_add(by_ms, Ordering::Relaxed);
        self.monotonic_us
            .fetch_add(by_ms.saturating_mul(1_000), Ordering::Relaxed);
    }

    /// Moves the monotonic time alone forward by `by_us`: a call that took
    /// that long within one wall-clock millisecond.
    pub fn advance_monotonic_us(&self, by_us: u64) {
        self.monotonic_us.fetch_add(by_us, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::Relaxed)
    }

    fn monotonic_us(&self) -> u64 {
        self.monotonic_us.load(Ordering::Relaxed).max(1)
    }
}

impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }

    fn monotonic_us(&self) -> u64 {
        (**self).monotonic_us()
    }

    fn now_and_monotonic_ms(&self) -> (u64, u64) {
        (**self).now_and_monotonic_ms()
    }

    fn now_ms_and_monotonic_us(&self) -> (u64, u64) {
        (**self).now_ms_and_monotonic_us()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wall_clock_stepped_back_leaves_the_monotonic_time_where_it_was() {
        let clock = ManualClock::new(100_000);
        assert_eq!(clock.monotonic_ms(), 100_000);
        clock.advance(500);
        assert_eq!((clock.now_ms(), clock.monotonic_ms()), (100_500, 100_500));
        clock.set(70_500);
        assert_eq!((clock.now_ms(), clock.monotonic_ms()), (70_500, 100_500));
        clock.set(71_000);
        assert_eq!((clock.now_ms(), clock.monotonic_ms()), (71_000, 101_000));
    }

    #[test]
    fn a_wall_clock_stepped_either_way_leaves_the_monotonic_time_where_it_was() {
        let clock = ManualClock::new(100_000);
        clock.step(3_700_000);
        assert_eq!((clock.now_ms(), clock.monotonic_ms()), (3_700_000, 100_000));
        clock.step(100_000);
        assert_eq!((clock.now_ms(), clock.monotonic_ms()), (100_000, 100_000));
    }

    #[test]
    fn the_system_wall_clock_is_the_operating_systems_to_the_millisecond() {
        for _ in 0..3 {
            let before = SystemClock::read_wall_ns() / 1_000_000;
            let (wall, _) = SystemClock.now_and_monotonic_ms();
            let after = SystemClock::read_wall_ns() / 1_000_000;
            // Carried for at most a millisecond between reads of the OS;
            // ±1 for a read that straddles a millisecond's edge.
            assert!(before.saturating_sub(1) <= wall);
            assert!(wall <= after + 1);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    #[test]
    fn the_system_monotonic_clock_never_reads_zero_and_never_steps_back() {
        let a = SystemClock.monotonic_us();
        let b = SystemClock.monotonic_us();
        assert!(a >= MONOTONIC_START_NS / 1_000);
        assert!(b >= a);
    }
}
