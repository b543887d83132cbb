//! A concurrency policy's fields: `limit` permits, each held at most
//! `lease`.

use crate::duration::format_duration_ms;
use crate::policy::{Limits, Permits};

/// The most permits a concurrency policy holds per identity: each is kept
/// (in memory, a Redis sorted set) until released or expired.
pub const MAX_PERMITS: u64 = 10_000;

/// The longest lease a concurrency permit may have: one day.
pub const MAX_LEASE_MS: u64 = 86_400_000;

/// A concurrency policy's `limit` and `lease`, each bounded: every acquire
/// and release reads the held permits (at most [`MAX_PERMITS`]), and a
/// lease beyond [`MAX_LEASE_MS`] is no longer a bound on a dead holder.
/// A refusal names its field and says why.
pub(super) fn permits(limit: u64, lease_ms: u64) -> Result<Limits, (&'static str, String)> {
    if limit > MAX_PERMITS {
        let why = format!("{limit} is too large for concurrency, at most {MAX_PERMITS} permits");
        return Err(("limit", why));
    }
    if lease_ms > MAX_LEASE_MS {
        let why = format!(
            "{} is too long, at most {}: a holder that dies keeps its permit this long",
            format_duration_ms(lease_ms),
            format_duration_ms(MAX_LEASE_MS)
        );
        return Err(("lease", why));
    }
    Permits::new(limit, lease_ms)
        .map(Limits::Concurrency)
        .ok_or_else(|| ("limit", "must be positive".to_owned()))
}
