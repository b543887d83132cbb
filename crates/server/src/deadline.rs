//! A request's deadline, armed only when it can matter.
//!
//! A body that came with its headers is whole at the first poll, and
//! arming a timer costs more than reading it (~440 instructions,
//! docs/benchmarks.md); so the read is polled once first and the timer is
//! armed only for a body still on its way. HTTP's bodies and gRPC's
//! messages are read through here.

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

/// `read`'s output, or `None` when it took longer than `timeout` (counted
/// from the first poll that found it unfinished).
pub async fn within<T>(timeout: Duration, read: impl Future<Output = T>) -> Option<T> {
    let mut read = std::pin::pin!(read);
    let first = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
    if let Poll::Ready(done) = first {
        return Some(done);
    }
    tokio::time::timeout(timeout, read).await.ok()
}
