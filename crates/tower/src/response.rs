//! The response future of a [`RateLimit`](crate::RateLimit) service,
//! written by hand so a request decided in `call` (the embedded memory
//! store) costs no allocation of the layer's own: the inner service's
//! future, given the admission's fields and the request's permits when it
//! answers; or the layer's own answer, ready; or, for a decider that must
//! be awaited (Redis, a remote tollgate), the boxed decision and answer.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;
use pin_project_lite::pin_project;
use tollgate_http::Admission;

use crate::permit::{HeldPermits, LayerBody};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

pin_project! {
    /// The answer of a [`RateLimit`](crate::RateLimit) service to one
    /// request.
    pub struct ResponseFuture<F, ResBody, E> {
        #[pin]
        state: State<F, ResBody, E>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, ResBody, E> {
        /// The inner service answers; an admitted request's fields and
        /// permits go onto its answer.
        Inner {
            #[pin]
            future: F,
            admitted: Option<(Admission, Option<HeldPermits>)>,
        },
        /// The layer answers (a rejection, a problem); `None` once taken.
        Own {
            response: Option<Response<ResBody>>,
        },
        /// The decision is awaited, then answered.
        Deciding {
            future: BoxFuture<Result<Response<ResBody>, E>>,
        },
    }
}

/// An answer of the layer's own, which holds no permits.
pub(crate) fn own<ResBody: LayerBody>(response: Response<String>) -> Response<ResBody> {
    response.map(ResBody::answer)
}

/// The inner service's answer to an admitted request: its fields written,
/// its body carrying the permits when it holds any.
pub(crate) fn admit<ResBody: LayerBody>(
    mut response: Response<ResBody>,
    admission: Admission,
    held: Option<HeldPermits>,
) -> Response<ResBody> {
    admission.write_headers(response.headers_mut());
    match held {
        Some(permits) => response.map(|body| body.carrying(permits)),
        None => response,
    }
}

impl<F, ResBody: LayerBody, E> ResponseFuture<F, ResBody, E> {
    /// The inner service's answer to an admitted request (`admitted`: its
    /// fields and permits) or to one no rule matched (`None`).
    #[inline(always)]
    pub(crate) fn inner(future: F, admitted: Option<(Admission, Option<HeldPermits>)>) -> Self {
        Self {
            state: State::Inner { future, admitted },
        }
    }

    /// An answer of the layer's own.
    #[inline(always)]
    pub(crate) fn own(response: Response<String>) -> Self {
        Self {
            state: State::Own {
                response: Some(own(response)),
            },
        }
    }

    /// A decision still to be awaited, and the answer after it.
    pub(crate) fn deciding(future: BoxFuture<Result<Response<ResBody>, E>>) -> Self {
        Self {
            state: State::Deciding { future },
        }
    }
}

impl<F, ResBody, E> Future for ResponseFuture<F, ResBody, E>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
    ResBody: LayerBody,
{
    type Output = Result<Response<ResBody>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Inner { future, admitted } => {
                if let Some((_, Some(held))) = admitted {
                    // Permits taken in a `call` made outside a runtime are
                    // released on the one that polls their answer.
                    held.find_runtime();
                }
                let response = ready!(future.poll(cx))?;
                let Some((admission, held)) = admitted.take() else {
                    return Poll::Ready(Ok(response));
                };
                Poll::Ready(Ok(admit(response, admission, held)))
            }
            // Polled again after it answered, which a caller must not do:
            // it never answers twice.
            StateProj::Own { response } => response
                .take()
                .map_or(Poll::Pending, |r| Poll::Ready(Ok(r))),
            StateProj::Deciding { future } => future.as_mut().poll(cx),
        }
    }
}
