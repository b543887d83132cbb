//! A request's concurrency permits, held by its response and released when
//! that response ends: its body's last frame read, or the body dropped, or
//! — before there is a body — the response future dropped (a client that
//! disconnected, a handler that panicked, a caller that cancelled). Every
//! way a request can end drops what it held, so `Drop` is the one place a
//! release starts.
//!
//! The body carries them ([`LayerBody::carrying`]) only when there are any: a
//! response no concurrency policy admitted keeps the inner service's body
//! as it is, so axum, which boxes any body type but its own, boxes nothing
//! more for it.
//!
//! A release is a store call (or a remote one), and `Drop` cannot await:
//! it is spawned on the runtime the permits were taken on, off the
//! request's path. At most [`MAX_PENDING_RELEASES`] wait at once per layer;
//! past that, a permit is left to its lease, the bound a dead holder
//! already has, rather than tasks piling up without bound while a store
//! is slow.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::{BoxBody, UnsyncBoxBody};
use http_body_util::{BodyExt, Full};
use pin_project_lite::pin_project;
use tokio::runtime::Handle;

/// Releases spawned by one layer and not yet answered, at most: each is
/// one store (or remote) call for one request's permits. A permit refused
/// a release is still bounded: it frees itself when its lease ends.
pub const MAX_PENDING_RELEASES: usize = 4096;

/// What releasing one request's permits does, made when it is time to.
pub(crate) type ReleaseAction =
    Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// The layer's count of spawned releases not yet answered.
pub(crate) type Pending = Arc<AtomicUsize>;

/// One request's concurrency permits: released once, when this is dropped
/// (by the body carrying them, [`LayerBody`]).
pub struct HeldPermits {
    release: Option<ReleaseAction>,
    pending: Pending,
    /// The runtime the permits were taken on, where their release runs
    /// even when the body is dropped on a thread outside it.
    runtime: Option<Handle>,
}

impl HeldPermits {
    /// Permits released by `release`, counted in `pending` while it runs.
    pub(crate) fn new(release: ReleaseAction, pending: &Pending) -> Self {
        Self {
            release: Some(release),
            pending: Arc::clone(pending),
            runtime: Handle::try_current().ok(),
        }
    }

    /// The runtime to release on, when none was found where the permits
    /// were taken: the one polling now.
    pub(crate) fn find_runtime(&mut self) {
        if self.runtime.is_none() {
            self.runtime = Handle::try_current().ok();
        }
    }

    /// Spawns the release, unless [`MAX_PENDING_RELEASES`] are pending or
    /// there is no runtime to run it: then the leases free the permits.
    fn release(&mut self) {
        let Some(release) = self.release.take() else {
            return;
        };
        let Some(runtime) = &self.runtime else {
            tracing::warn!(
                "no runtime to release a request's permits on: they free at their lease"
            );
            return;
        };
        if self.pending.fetch_add(1, Ordering::AcqRel) >= MAX_PENDING_RELEASES {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(
                pending = MAX_PENDING_RELEASES,
                "too many permit releases pending: this request's permits free at their lease"
            );
            return;
        }
        let counted = Counted(Arc::clone(&self.pending));
        runtime.spawn(async move {
            release().await;
            drop(counted);
        });
    }
}

impl Drop for HeldPermits {
    fn drop(&mut self) {
        self.release();
    }
}

/// A pending release, uncounted when it ends, or when its task is dropped
/// unfinished (a runtime shutting down).
struct Counted(Pending);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the layer needs of the inner service's body, to answer in that
/// same body type: to carry the layer's own answers (a rejection, a
/// problem: text), and to hold a request's permits to its end. The layer
/// calls [`LayerBody::carrying`] only for a response that holds permits.
/// Implemented for axum's body, http-body-util's boxed bodies (hyper's
/// usual ones), tonic's body (feature `tonic`) and [`PermitBody`], which
/// wraps any other.
pub trait LayerBody: Sized {
    /// The layer's own answer, `text`, as this body.
    fn answer(text: String) -> Self;

    /// This body, releasing `permits` when its last frame is read or it is
    /// dropped.
    fn carrying(self, permits: HeldPermits) -> Self;
}

/// axum's body boxes the [`PermitBody`] (as it boxes any body but its own).
impl LayerBody for axum::body::Body {
    fn answer(text: String) -> Self {
        Self::from(text)
    }

    fn carrying(self, permits: HeldPermits) -> Self {
        Self::new(PermitBody::new(self).holding(permits))
    }
}

/// A boxed body (hyper services' usual one) boxes the [`PermitBody`].
impl<D, E> LayerBody for BoxBody<D, E>
where
    D: Buf + From<String> + Send + Sync + 'static,
    E: 'static,
{
    fn answer(text: String) -> Self {
        Self::new(Full::new(D::from(text)).map_err(|never| match never {}))
    }

    fn carrying(self, permits: HeldPermits) -> Self {
        Self::new(PermitBody::new(self).holding(permits))
    }
}

/// As [`BoxBody`], for a body that is not `Sync`.
impl<D, E> LayerBody for UnsyncBoxBody<D, E>
where
    D: Buf + From<String> + Send + 'static,
    E: 'static,
{
    fn answer(text: String) -> Self {
        Self::new(Full::new(D::from(text)).map_err(|never| match never {}))
    }

    fn carrying(self, permits: HeldPermits) -> Self {
        Self::new(PermitBody::new(self).holding(permits))
    }
}

/// tonic's body (a gRPC service's, whose client reads the layer's 429 as
/// `UNAVAILABLE`, as gRPC maps HTTP statuses) boxes the [`PermitBody`].
#[cfg(feature = "tonic")]
impl LayerBody for tonic::body::Body {
    fn answer(text: String) -> Self {
        Self::new(Full::new(bytes::Bytes::from(text)))
    }

    fn carrying(self, permits: HeldPermits) -> Self {
        Self::new(PermitBody::new(self).holding(permits))
    }
}

/// Any body, wrapped: a service answering in a body type of its own maps
/// it into a `PermitBody` below the layer.
impl<B: From<String>> LayerBody for PermitBody<B> {
    fn answer(text: String) -> Self {
        Self::new(B::from(text))
    }

    fn carrying(self, permits: HeldPermits) -> Self {
        self.holding(permits)
    }
}

pin_project! {
    /// A body holding permits: the inner body, holding them until its
    /// last frame is read or it is dropped, then releasing them. Made by
    /// [`LayerBody`] for axum's, tonic's and the boxed bodies; made by a
    /// service for a body type of its own ([`PermitBody::new`], below the
    /// layer), so that any body can carry them.
    pub struct PermitBody<B> {
        #[pin]
        inner: B,
        // A list, for the rare stack of two limiting layers.
        held: Vec<HeldPermits>,
    }
}

impl<B> PermitBody<B> {
    /// `inner`, holding nothing yet.
    pub fn new(inner: B) -> Self {
        Self {
            inner,
            held: Vec::new(),
        }
    }

    /// This body, holding `permits` too: any body can carry them.
    fn holding(mut self, permits: HeldPermits) -> Self {
        self.held.push(permits);
        self
    }
}

impl<B: Body> Body for PermitBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let mut this = self.project();
        let polled = this.inner.as_mut().poll_frame(cx);
        // The end, or a failure the body will not go on from: what the
        // request held is no longer used.
        let ended = match &polled {
            Poll::Ready(None | Some(Err(_))) => true,
            Poll::Ready(Some(Ok(_))) => this.inner.is_end_stream(),
            Poll::Pending => false,
        };
        if ended {
            this.held.clear();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B: std::fmt::Debug> std::fmt::Debug for PermitBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermitBody")
            .field("inner", &self.inner)
            .field("holds_permits", &!self.held.is_empty())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tokio::sync::mpsc;

    /// A release that says so on `told`.
    fn told_release(told: &mpsc::UnboundedSender<&'static str>) -> ReleaseAction {
        let told = told.clone();
        Box::new(move || {
            Box::pin(async move {
                let _ = told.send("released");
            })
        })
    }

    #[tokio::test]
    async fn a_body_read_to_its_end_releases_once_before_it_is_dropped() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let pending = Pending::default();
        let mut body = PermitBody::new(String::from("report"))
            .carrying(HeldPermits::new(told_release(&tx), &pending));
        let frame = body.frame().await.expect("a frame").expect("data");
        assert_eq!(frame.into_data().ok().as_deref(), Some(&b"report"[..]));
        assert_eq!(rx.recv().await, Some("released"));
        assert!(body.frame().await.is_none());
        drop((body, tx));
        assert_eq!(rx.recv().await, None);
        assert_eq!(pending.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_body_dropped_unread_or_a_hold_with_no_body_releases_once() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let pending = Pending::default();
        let body = PermitBody::new(String::from("report"))
            .carrying(HeldPermits::new(told_release(&tx), &pending));
        drop(body);
        assert_eq!(rx.recv().await, Some("released"));
        drop(HeldPermits::new(told_release(&tx), &pending));
        assert_eq!(rx.recv().await, Some("released"));
        drop(tx);
        assert_eq!(rx.recv().await, None);
    }

    #[tokio::test]
    async fn past_the_pending_bound_a_release_is_left_to_the_lease() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let pending = Pending::default();
        pending.store(MAX_PENDING_RELEASES, Ordering::SeqCst);
        drop(HeldPermits::new(told_release(&tx), &pending));
        assert_eq!(pending.load(Ordering::SeqCst), MAX_PENDING_RELEASES);
        pending.store(MAX_PENDING_RELEASES - 1, Ordering::SeqCst);
        drop(HeldPermits::new(told_release(&tx), &pending));
        drop(tx);
        assert_eq!(rx.recv().await, Some("released"));
        assert_eq!(rx.recv().await, None);
    }
}
