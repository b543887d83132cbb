use thiserror::Error;

/// Why a store could not decide. The decision core never fails; stores that
/// do I/O (Redis) do, and the caller's failure policy decides what then.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StoreError {
    #[error("store did not answer within {timeout_ms} ms")]
    Timeout { timeout_ms: u64 },
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("store answered something unexpected: {0}")]
    Protocol(String),
    #[error("store misconfigured: {0}")]
    Config(String),
}
