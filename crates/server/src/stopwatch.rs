//! Elapsed time for latency histograms: the one place the server reads
//! the machine's monotonic clock. Decisions never do — they are dated by
//! the limiter's injected [`tollgate_core::Clock`], which tests control —
//! so what a stopwatch measures is only ever reported, never decided on.

use std::time::Instant;

/// Started when created; reads the seconds since.
pub struct Stopwatch(Instant);

impl Stopwatch {
    #[allow(clippy::disallowed_methods)] // the one sanctioned read: see above
    pub fn start() -> Self {
        Self(Instant::now())
    }

    #[allow(clippy::disallowed_methods)] // the same sanctioned read
    pub fn seconds(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}
