//! A circuit breaker per store: after repeated failures it opens, so
//! requests stop paying the store's timeout; after a cool-down one probe at a
//! time is let through (half-open), and the first success closes it again.
//! Time is passed in, so every transition is a deterministic test.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};

/// When the breaker opens and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failures that open the circuit.
    pub failures_to_open: u32,
    /// How long an open circuit skips the store before probing it.
    pub open_for_ms: u64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failures_to_open: 5,
            open_for_ms: 1_000,
        }
    }
}

/// Where the breaker stands, for the circuit-state gauge and readiness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitState {
    /// The store is trusted: every call goes to it.
    Closed,
    /// The store failed repeatedly: calls skip it until the cool-down ends.
    Open,
    /// The cool-down ended: one probe decides whether to close or reopen.
    HalfOpen,
}

impl CircuitState {
    /// 0 closed, 1 open, 2 half-open: the value of the circuit-state gauge.
    pub fn as_gauge(self) -> i64 {
        match self {
            CircuitState::Closed => 0,
            CircuitState::Open => 1,
            CircuitState::HalfOpen => 2,
        }
    }
}

/// What the breaker lets a call do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Closed: call the store.
    Call,
    /// Half-open: this call is the one probe.
    Probe,
    /// Open (or a probe is already out): do not call the store.
    Skip,
}

const CLOSED: u8 = 0;
const OPEN: u8 = 1;
const HALF_OPEN: u8 = 2;

/// One store's breaker; lock-free, so every request can consult it.
#[derive(Debug)]
pub struct CircuitBreaker {
    config: BreakerConfig,
    state: AtomicU8,
    failures: AtomicU32,
    open_until_ms: AtomicU64,
    probing: AtomicBool,
}

impl CircuitBreaker {
    /// A closed breaker: a store is trusted until it fails.
    pub fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            state: AtomicU8::new(CLOSED),
            failures: AtomicU32::new(0),
            open_until_ms: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }

    /// The state now, for metrics; [`admit`](Self::admit) is what gates calls.
    pub fn state(&self) -> CircuitState {
        match self.state.load(Ordering::Acquire) {
            CLOSED => CircuitState::Closed,
            OPEN => CircuitState::Open,
            _ => CircuitState::HalfOpen,
        }
    }

    /// Whether a call at `now_ms` (the monotonic clock's, so a stepped wall
    /// clock neither shortens nor stretches a cool-down) may go to the store.
    pub fn admit(&self, now_ms: u64) -> Admission {
        match self.state.load(Ordering::Acquire) {
            CLOSED => Admission::Call,
            OPEN if now_ms < self.open_until_ms.load(Ordering::Acquire) => Admission::Skip,
            _ => {
                // Cool-down over (or half-open): one probe at a time.
                if self
                    .probing
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    self.state.store(HALF_OPEN, Ordering::Release);
                    Admission::Probe
                } else {
                    Admission::Skip
                }
            }
        }
    }

    /// An admitted call that never reached the store (answered from what
    /// the store already knew): a probe is handed back for the next call,
    /// and nothing is recorded.
    pub fn unused(&self, admission: Admission) {
        if admission == Admission::Probe {
            self.probing.store(false, Ordering::Release);
        }
    }

    /// Records how an admitted call ended.
    pub fn record(&self, admission: Admission, succeeded: bool, now_ms: u64) {
        match (admission, succeeded) {
            (Admission::Skip, _) => {}
            (_, true) => {
                self.failures.store(0, Ordering::Release);
                if admission == Admission::Probe || self.state.load(Ordering::Acquire) != CLOSED {
                    self.state.store(CLOSED, Ordering::Release);
                    self.probing.store(false, Ordering::Release);
                }
            }
            (Admission::Probe, false) => self.open(now_ms),
            (Admission::Call, false) => {
                let failures = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
                if failures >= self.config.failures_to_open
                    && self.state.load(Ordering::Acquire) == CLOSED
                {
                    self.open(now_ms);
                }
            }
        }
    }

    fn open(&self, now_ms: u64) {
        self.open_until_ms.store(
            now_ms.saturating_add(self.config.open_for_ms),
            Ordering::Release,
        );
        self.state.store(OPEN, Ordering::Release);
        self.failures.store(0, Ordering::Release);
        self.probing.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> CircuitBreaker {
        CircuitBreaker::new(BreakerConfig {
            failures_to_open: 3,
            open_for_ms: 1_000,
        })
    }

    #[test]
    fn opens_after_consecutive_failures_only() {
        let b = breaker();
        for _ in 0..2 {
            b.record(b.admit(0), false, 0);
        }
        b.record(b.admit(0), true, 0);
        for _ in 0..2 {
            b.record(b.admit(0), false, 0);
        }
        assert_eq!(
            b.state(),
            CircuitState::Closed,
            "a success resets the count"
        );
        b.record(b.admit(0), false, 10);
        assert_eq!(b.state(), CircuitState::Open);
        assert_eq!(b.admit(1_009), Admission::Skip);
    }

    #[test]
    fn one_probe_after_the_cool_down_and_its_result_decides() {
        let b = breaker();
        for _ in 0..3 {
            b.record(b.admit(0), false, 0);
        }
        assert_eq!(b.admit(999), Admission::Skip);
        let probe = b.admit(1_000);
        assert_eq!(probe, Admission::Probe);
        assert_eq!(b.state(), CircuitState::HalfOpen);
        assert_eq!(b.admit(1_001), Admission::Skip, "one probe at a time");
        b.record(probe, false, 1_200);
        assert_eq!(b.state(), CircuitState::Open);
        assert_eq!(b.admit(2_199), Admission::Skip);
        let probe = b.admit(2_200);
        assert_eq!(probe, Admission::Probe);
        b.record(probe, true, 2_210);
        assert_eq!(b.state(), CircuitState::Closed);
        assert_eq!(b.admit(2_211), Admission::Call);
    }
}
