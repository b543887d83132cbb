//! Lingering close, as nginx does it: after answering a request whose body
//! was not read (a 413 for a body far over the limit), half-close the
//! connection and keep reading and discarding what the client still sends,
//! for a bounded time and size, before closing.
//!
//! Why: a socket closed with unread data in its receive buffer sends a TCP
//! reset, and a reset can destroy the answer before the client reads it —
//! the client, still sending its body, sees "connection reset" instead of
//! the 413. Only connections whose answer asked for it linger (the handler
//! marks the response with [`LingerOnClose`]); every other close is
//! immediate, so idle keep-alive connections never delay a shutdown.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// The longest a connection lingers after its answer (nginx's
/// `lingering_time` is 30 s; a rate limiter's clients are mostly local).
pub(crate) const LINGER_AT_MOST: Duration = Duration::from_secs(10);
/// The longest a lingering connection waits for more data (nginx's
/// `lingering_timeout` is 5 s).
pub(crate) const LINGER_IDLE: Duration = Duration::from_secs(2);
/// The most bytes a lingering connection reads and throws away.
pub(crate) const LINGER_BYTES: u64 = 64 << 20;

/// A response extension: close this connection lingering (its request's
/// body was left unread).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LingerOnClose;

/// Set by the connection's service when a response carried
/// [`LingerOnClose`]; read by the stream when hyper closes it.
#[derive(Debug, Clone, Default)]
pub(crate) struct LingerFlag(Arc<AtomicBool>);

impl LingerFlag {
    /// Asks the connection to close lingering once this response is sent.
    pub(crate) fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

enum State {
    Open,
    /// Write side shut; reading and discarding until EOF or a bound.
    Draining {
        until: Instant,
        idle: Pin<Box<Sleep>>,
        discarded: u64,
    },
    Closed,
}

/// A connection's stream that closes lingering when its flag is set.
pub(crate) struct Lingering<S> {
    inner: S,
    flag: LingerFlag,
    state: State,
}

impl<S> Lingering<S> {
    /// `inner`, lingering on close once `flag` is set.
    pub(crate) fn new(inner: S, flag: LingerFlag) -> Self {
        Self {
            inner,
            flag,
            state: State::Open,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Lingering<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Lingering<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                State::Closed => return Poll::Ready(Ok(())),
                State::Open => {
                    // Half-close first: the answer is on its way, then a FIN.
                    ready!(Pin::new(&mut this.inner).poll_shutdown(cx))?;
                    if !this.flag.is_set() {
                        this.state = State::Closed;
                        continue;
                    }
                    let now = Instant::now();
                    this.state = State::Draining {
                        until: now + LINGER_AT_MOST,
                        idle: Box::pin(tokio::time::sleep_until(now + LINGER_IDLE)),
                        discarded: 0,
                    };
                }
                State::Draining {
                    until,
                    idle,
                    discarded,
                } => {
                    let mut scratch = [0u8; 8192];
                    let mut buf = ReadBuf::new(&mut scratch);
                    match Pin::new(&mut this.inner).poll_read(cx, &mut buf) {
                        // EOF or an error: the client is done.
                        Poll::Ready(Ok(())) if buf.filled().is_empty() => {
                            this.state = State::Closed;
                        }
                        Poll::Ready(Err(_)) => this.state = State::Closed,
                        Poll::Ready(Ok(())) => {
                            *discarded += buf.filled().len() as u64;
                            let now = Instant::now();
                            if *discarded >= LINGER_BYTES || now >= *until {
                                this.state = State::Closed;
                            } else {
                                let next = (now + LINGER_IDLE).min(*until);
                                idle.as_mut().reset(next);
                            }
                        }
                        Poll::Pending => {
                            ready!(idle.as_mut().poll(cx));
                            this.state = State::Closed;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_flagged_stream_reads_until_the_peer_is_done() {
        let (ours, mut theirs) = tokio::io::duplex(64);
        let flag = LingerFlag::default();
        flag.set();
        let mut stream = Lingering::new(ours, flag);
        let client = tokio::spawn(async move {
            // Still sending after our answer: 1000 bytes, then EOF.
            for _ in 0..10 {
                theirs.write_all(&[b'x'; 100]).await.expect("write");
            }
            theirs.shutdown().await.expect("shutdown");
            let mut rest = Vec::new();
            theirs.read_to_end(&mut rest).await.expect("read");
            rest
        });
        stream.shutdown().await.expect("lingering shutdown");
        assert!(matches!(stream.state, State::Closed));
        assert_eq!(client.await.expect("client"), Vec::<u8>::new());
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_peer_is_left_after_the_idle_bound() {
        let (ours, _theirs) = tokio::io::duplex(64);
        let flag = LingerFlag::default();
        flag.set();
        let mut stream = Lingering::new(ours, flag);
        let started = Instant::now();
        stream.shutdown().await.expect("lingering shutdown");
        assert_eq!(started.elapsed(), LINGER_IDLE);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unflagged_stream_closes_at_once() {
        let (ours, _theirs) = tokio::io::duplex(64);
        let mut stream = Lingering::new(ours, LingerFlag::default());
        let started = Instant::now();
        stream.shutdown().await.expect("shutdown");
        assert_eq!(started.elapsed(), Duration::ZERO);
    }
}
