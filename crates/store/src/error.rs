use thiserror::Error;

/// Why a store could not decide. The decision core never fails; stores that
/// do I/O (Redis) do, and the caller's failure policy decides what then.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StoreError {
    /// The call outlived its budget, queueing included; the store may be slow
    /// rather than down.
    #[error("store did not answer within {timeout_ms} ms")]
    Timeout {
        /// The budget that ran out, as configured.
        timeout_ms: u64,
    },
    /// The store is unreachable or says it cannot serve now (loading, failing
    /// over, read-only).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store answered, but with an error reply or a value the scripts
    /// never return, so the decision could not be read.
    #[error("store answered something unexpected: {0}")]
    Protocol(String),
    /// The store's config cannot work (a bad URL, prefix or option).
    #[error("store misconfigured: {0}")]
    Config(String),
    /// The memory store had no room for a new key: its bound is reached
    /// and every state it holds is limiting, so none may be evicted.
    #[error("memory store full: {max_keys} keys, all limiting; a new identity was not stored")]
    Full {
        /// The store's bound, as configured (rounded up to its shards).
        max_keys: u64,
    },
}
