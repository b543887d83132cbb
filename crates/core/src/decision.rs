//! The answer to "may this identity spend this cost now?".

use serde::Serialize;

use crate::permit::PermitId;

/// One decision, in the integers of docs/design.md §3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// Whether the cost was admitted (and, unless probing, consumed).
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
    /// The permit an admitted concurrency acquire holds, decided by a store
    /// (a failure mode that admits holds none); `None` for every rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permit: Option<PermitId>,
}

impl Decision {
    /// The decision as one line of the shipped vectors' `expected.jsonl`
    /// (`{"allowed": true, "limit": 20, …}`, no newline): the one spelling
    /// `tollgate replay` prints and every suite compares against.
    pub fn vector_line(&self) -> String {
        let retry = self
            .retry_after_ms
            .map_or_else(|| "null".to_owned(), |r| r.to_string());
        format!(
            r#"{{"allowed": {}, "limit": {}, "remaining": {}, "retry_after_ms": {}, "reset_after_ms": {}}}"#,
            self.allowed, self.limit, self.remaining, retry, self.reset_after_ms
        )
    }
}
