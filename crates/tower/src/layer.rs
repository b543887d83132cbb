//! The layer and its service: request → each rule's identity and cost →
//! one all-or-nothing decision → the inner service's answer with the
//! RateLimit fields, or the 429 contract without calling it.
//!
//! Backpressure: `poll_ready` is the inner service's. A request's call
//! takes that ready service and leaves a clone in its place (tower's
//! clone-and-swap), so the readiness `poll_ready` reserved is the one the
//! request uses; a request the limits reject never reaches it, and drops
//! it — releasing what it reserved (a concurrency permit, a buffer slot)
//! — as soon as the rejection is written. The decision is awaited inside
//! the response future; only a concurrency permit's release is spawned,
//! when the response ends (crate::permit).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use arc_swap::ArcSwap;
use http::request::Parts;
use http::{HeaderName, Request, Response, StatusCode};
use smallvec::SmallVec;
use tollgate_config::normalize;
use tollgate_core::{Identity, PermitId};
use tollgate_http::{Answer, Matched, Problem, RequestFault, answer, request_id_from_header};
use tollgate_limiter::{Check, Decided, Decider, Plan, RequestId};
use tower_layer::Layer;
use tower_service::Service;

use crate::permit::{Held, Pending, PermitBody};
use crate::rule::Rule;

/// What every clone of the layer and its services shares.
struct Shared<D> {
    decider: D,
    /// Swapped whole by [`RateLimitLayer::reload`]; a request holds the
    /// set it started with until it is answered.
    rules: ArcSwap<Vec<Rule>>,
    /// Permit releases spawned and not yet answered.
    pending: Pending,
}

/// Limits every request to the wrapped service by `rules`, decided by a
/// [`Decider`]: the in-process [`Limiter`](tollgate_limiter::Limiter) on
/// the embedded store or Redis, or a [`RemoteTollgate`](crate::RemoteTollgate).
pub struct RateLimitLayer<D> {
    shared: Arc<Shared<D>>,
    request_ids: Option<HeaderName>,
}

impl<D> Clone for RateLimitLayer<D> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            request_ids: self.request_ids.clone(),
        }
    }
}

impl<D: Decider> RateLimitLayer<D> {
    /// The layer for `rules`, in order: a request is checked against every
    /// rule that applies to it, all or nothing.
    pub fn new(decider: D, rules: Vec<Rule>) -> Self {
        Self {
            shared: Arc::new(Shared {
                decider,
                rules: ArcSwap::from_pointee(rules),
                pending: Pending::default(),
            }),
            request_ids: None,
        }
    }

    /// Reads a client's request id (an `Idempotency-Key`) from header
    /// `name`, as `tollgate serve` reads `server.request_id_header`: a
    /// retry under the same id, method and path is answered from its
    /// record and charged once. Only when every rule the request matches
    /// honours client ids ([`Rule::with_client_request_ids`]): otherwise
    /// the header is one like any other, so naming it never makes a
    /// login's retries free. A malformed or repeated id is a 400.
    pub fn with_request_id_header(self, name: HeaderName) -> Self {
        Self {
            request_ids: Some(name),
            ..self
        }
    }

    /// Replaces the rules of this layer and of every service made from it
    /// (its clones share them), from the next request on. A request
    /// already being decided or served finishes on the rules it started
    /// with: a reload never changes a decision halfway.
    pub fn reload(&self, rules: Vec<Rule>) {
        self.shared.rules.store(Arc::new(rules));
    }
}

impl<S, D> Layer<S> for RateLimitLayer<D> {
    type Service = RateLimit<S, D>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            shared: Arc::clone(&self.shared),
            request_ids: self.request_ids.clone(),
        }
    }
}

/// A service limited by a [`RateLimitLayer`].
pub struct RateLimit<S, D> {
    inner: S,
    shared: Arc<Shared<D>>,
    request_ids: Option<HeaderName>,
}

impl<S: Clone, D> Clone for RateLimit<S, D> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
            request_ids: self.request_ids.clone(),
        }
    }
}

/// Rules a request can match before its checks leave the stack for the
/// heap: a request matching this many or fewer allocates no list.
const INLINE_RULES: usize = 4;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, D, B, ResBody> Service<Request<B>> for RateLimit<S, D>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    D: Decider,
    B: Send + 'static,
    ResBody: From<String> + Send + 'static,
{
    type Response = Response<PermitBody<ResBody>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<PermitBody<ResBody>>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, clone);
        let shared = Arc::clone(&self.shared);
        let rules = shared.rules.load_full();
        let request_ids = self.request_ids.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let mut matched: SmallVec<[_; INLINE_RULES]> = SmallVec::new();
            for rule in rules.iter() {
                match rule.applies(&parts) {
                    Ok(Some((identity, cost))) => matched.push((rule, identity, cost)),
                    Ok(None) => {}
                    Err(problem) => return Ok(own(problem.response())),
                }
            }
            if matched.is_empty() {
                let response = ready.call(Request::from_parts(parts, body)).await?;
                return Ok(response.map(PermitBody::plain));
            }
            let checks: SmallVec<[Check<'_>; INLINE_RULES]> = matched
                .iter()
                .map(|(rule, identity, cost)| Check::new(&rule.plan, identity, *cost))
                .collect();
            let (id, shape) = match request_id(request_ids.as_ref(), &matched, &parts) {
                Ok(found) => found.unzip(),
                Err(problem) => return Ok(own(problem.response())),
            };
            let decided = shared
                .decider
                .decide_request(&checks, id.as_ref(), shape.as_deref())
                .await;
            let answered = matched.iter().map(|(rule, _, cost)| Matched {
                policy_item: &rule.policy_item,
                policy: rule.plan.policy(),
                shadow: rule.plan.shadow(),
                cost: *cost,
            });
            // Held from here on: a rejection, an inner error, a panic or a
            // cancelled call drops it, and its permits go back.
            let held = hold(&shared, &matched, &decided);
            match answer(answered, &decided, StatusCode::TOO_MANY_REQUESTS) {
                Ok(Answer::Admit(admission)) => {
                    let mut response = ready.call(Request::from_parts(parts, body)).await?;
                    admission.write_headers(response.headers_mut());
                    Ok(response.map(|body| PermitBody::new(body, held)))
                }
                Ok(Answer::Deny(response)) => Ok(own(response)),
                Err(problem) => Ok(own(problem.response())),
            }
        })
    }
}

/// The permits `decided` gave the request's concurrency checks, released
/// through the decider when the response ends; `None` when it gave none.
fn hold<D: Decider>(
    shared: &Arc<Shared<D>>,
    matched: &[(&Rule, Identity, u64)],
    decided: &Decided,
) -> Option<Held> {
    let permits: SmallVec<[(Arc<Plan>, Identity, PermitId); 1]> = matched
        .iter()
        .zip(&decided.decisions)
        .filter_map(|((rule, identity, _), decision)| {
            Some((Arc::clone(&rule.plan), identity.clone(), decision.permit?))
        })
        .collect();
    if permits.is_empty() {
        return None;
    }
    let releasing = Arc::clone(shared);
    let release = move || -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            for (plan, identity, permit) in permits {
                if let Err(error) = releasing.decider.release(&plan, &identity, permit).await {
                    tracing::warn!(
                        policy = plan.policy().name(),
                        %error,
                        "a permit could not be released: it frees when its lease ends"
                    );
                }
            }
        })
    };
    Some(Held::new(Box::new(release), &shared.pending))
}

/// An answer of the layer's own, which holds no permits.
fn own<ResBody: From<String>>(response: Response<String>) -> Response<PermitBody<ResBody>> {
    response.map(|text| PermitBody::plain(ResBody::from(text)))
}

/// The client's request id from header `name` when every matched rule
/// honours client ids, with the request's method and normalized path the
/// id is bound to (as forward auth binds it).
fn request_id(
    name: Option<&HeaderName>,
    matched: &[(&Rule, Identity, u64)],
    parts: &Parts,
) -> Result<Option<(RequestId, String)>, Problem> {
    let Some(name) = name.filter(|_| matched.iter().all(|(rule, ..)| rule.client_request_ids))
    else {
        return Ok(None);
    };
    let fault = |RequestFault(detail)| Problem::bad_request(detail);
    let Some(id) = request_id_from_header(&parts.headers, name).map_err(fault)? else {
        return Ok(None);
    };
    let path = normalize(parts.uri.path()).map_err(|e| Problem::bad_request(e.to_string()))?;
    Ok(Some((id, format!("{} {path}", parts.method))))
}
