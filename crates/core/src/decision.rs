//! The answer to "may this identity spend this cost now?".

use serde::Serialize;

/// One decision, in the integers of DESIGN.md §3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub allowed: bool,
    /// The policy's capacity C (bucket algorithms) or limit L (window algorithms).
    pub limit: u64,
    /// Whole units left after this decision. Negative only for gcra after
    /// its clock stepped back (its debt then exceeds the capacity); protocol
    /// adapters show such a value as 0.
    pub remaining: i64,
    /// 0 when allowed; the exact smallest wait after which the same request
    /// would be admitted; `None` when the cost exceeds the limit and never will be.
    pub retry_after_ms: Option<u64>,
    /// When, with no traffic, the quota is next fully restored.
    pub reset_after_ms: u64,
}
