//! What a redis-rs error means to the failure policy: a [`StoreError`]
//! that says whether Redis could not be reached (and why) or answered
//! something this store cannot use. Every module that calls Redis maps its
//! errors here.

use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::error::StoreError;

/// Errors that say Redis could not be reached or could not serve are
/// "unavailable" (the failure policy decides), told apart by why: nothing
/// listening, a name that does not resolve, credentials turned down.
/// Anything else is a fault.
pub fn from_redis(e: RedisError) -> StoreError {
    if e.is_connection_refusal() {
        return StoreError::Refused(e.to_string());
    }
    // std and tokio report a failed name lookup only in the message.
    if e.is_io_error() && e.to_string().contains("failed to lookup address") {
        return StoreError::Unresolved(e.to_string());
    }
    if e.kind() == ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
    {
        return StoreError::Auth(e.to_string());
    }
    let down = e.is_io_error()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.is_cluster_error()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
            )
        );
    if down {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Protocol(e.to_string())
    }
}
