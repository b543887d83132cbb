use thiserror::Error;

/// Why a store could not decide. The decision core never fails; stores that
/// do I/O (Redis) do, and the caller's failure policy decides what then.
/// Unreachable stores say why (refused, name, credentials) so an operator
/// knows whom to page.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StoreError {
    /// The call outlived its budget, queueing included; the store may be slow
    /// rather than down.
    #[error("store did not answer within {timeout_ms} ms")]
    Timeout {
        /// The budget that ran out, as configured.
        timeout_ms: u64,
    },
    /// Nothing listens where the store should be: the host is up, the
    /// server is not (or a firewall rejects the port).
    #[error("store refused the connection: {0}")]
    Refused(String),
    /// The store's host name does not resolve (DNS).
    #[error("store host name does not resolve: {0}")]
    Unresolved(String),
    /// The store turned down the credentials (a wrong or missing password
    /// or user).
    #[error("store refused the credentials: {0}")]
    Auth(String),
    /// The store is unreachable or says it cannot serve now (a dropped
    /// connection, loading, failing over, read-only).
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

impl StoreError {
    /// The error's kind, as metrics label it and logs name it: `timeout`,
    /// `refused`, `dns`, `auth`, `unavailable`, `protocol` or `config`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout { .. } => "timeout",
            StoreError::Refused(_) => "refused",
            StoreError::Unresolved(_) => "dns",
            StoreError::Auth(_) => "auth",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Protocol(_) => "protocol",
            StoreError::Config(_) => "config",
            StoreError::Full { .. } => "full",
        }
    }
}
