//! The layer and its service: request → each rule's identity and cost →
//! one all-or-nothing decision → the inner service's answer with the
//! RateLimit fields, or the 429 contract without calling it.
//!
//! Backpressure: `poll_ready` is the inner service's. On the embedded
//! memory store the decision is made in `call` (it needs no I/O): an
//! admitted request calls the inner service there, using the readiness
//! `poll_ready` reserved, as any middleware does; a request the layer
//! answers itself (a rejection, a problem) never reaches it, and the
//! ready service is swapped for a clone and dropped, releasing what it
//! reserved (a concurrency permit, a buffer slot) as soon as the answer
//! is written. On Redis or a remote tollgate the decision is awaited
//! inside the response future (crate::response), which takes the ready
//! service and leaves a clone in its place (tower's clone-and-swap), so
//! the readiness reserved is the one that request uses. No clone is
//! made for a request decided at once and admitted: cloning an axum
//! route allocates.
//! Only a concurrency permit's release is spawned, when the response ends
//! (crate::permit).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use arc_swap::{ArcSwap, Guard};
use http::request::Parts;
use http::{HeaderName, Request, Response, StatusCode};
use smallvec::SmallVec;
use tollgate_config::normalize;
use tollgate_core::{Identity, PermitId};
use tollgate_http::{
    Admission, Answer, Matched, Problem, RequestFault, answer, grpc_answer, is_grpc,
    request_id_from_header,
};
use tollgate_limiter::{Check, Decided, Decider, Plan, RequestId};
use tower_layer::Layer;
use tower_service::Service;

use crate::permit::{HeldPermits, LayerBody, Pending};
use crate::response::{ResponseFuture, admit, own};
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

/// A request's matched rules: each rule's place in the set the request
/// started with, the identity it checks and the cost.
type Matches = SmallVec<[(usize, Identity, u64); INLINE_RULES]>;

impl<S, D, B, ResBody> Service<Request<B>> for RateLimit<S, D>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    D: Decider,
    B: Send + 'static,
    ResBody: LayerBody + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    /// Decides in `call` when the decider can without awaiting (the
    /// embedded memory store), and calls the inner service at once with
    /// an admission or answers a rejection: no future of the layer's own
    /// to allocate. Otherwise (Redis, a remote tollgate) the decision is
    /// awaited in the response future.
    fn call(&mut self, request: Request<B>) -> Self::Future {
        let rules = self.shared.rules.load();
        let (parts, body) = request.into_parts();
        // Filled in place (not returned): a list of this size is a copy.
        let mut matched = Matches::new();
        if let Err(problem) = matches(&rules, &parts, &mut matched) {
            release(&mut self.inner);
            return ResponseFuture::own(own_answer(problem.response(), &parts));
        }
        if matched.is_empty() {
            return ResponseFuture::inner(self.inner.call(Request::from_parts(parts, body)), None);
        }
        let (id, shape) = match request_id(self.request_ids.as_ref(), &rules, &matched, &parts) {
            Ok(found) => found.unzip(),
            Err(problem) => {
                release(&mut self.inner);
                return ResponseFuture::own(own_answer(problem.response(), &parts));
            }
        };
        let decided = with_checks(&rules, &matched, |checks| {
            let decider = &self.shared.decider;
            decider.decide_now(checks, id.as_ref(), shape.as_deref())
        });
        // Matched by reference: the decision stays where it was returned.
        let Some(decided) = &decided else {
            let mut ready = take_ready(&mut self.inner);
            let shared = Arc::clone(&self.shared);
            let rules = Guard::into_inner(rules);
            let later = async move {
                let mut checks = Checks::new();
                checks_of(&rules, &matched, &mut checks);
                let decided = shared
                    .decider
                    .decide_request(&checks, id.as_ref(), shape.as_deref())
                    .await;
                match settle(&shared, &rules, &matched, &decided) {
                    Settled::Admit(admission, held) => {
                        let response = ready.call(Request::from_parts(parts, body)).await?;
                        Ok(admit(response, admission, held))
                    }
                    Settled::Own(response) => Ok(own(own_answer(response, &parts))),
                }
            };
            return ResponseFuture::deciding(Box::pin(later));
        };
        match settle(&self.shared, &rules, &matched, decided) {
            Settled::Admit(admission, held) => ResponseFuture::inner(
                self.inner.call(Request::from_parts(parts, body)),
                Some((admission, held)),
            ),
            Settled::Own(response) => {
                release(&mut self.inner);
                ResponseFuture::own(own_answer(response, &parts))
            }
        }
    }
}

/// An answer of the layer's own (a rejection, a problem) as its caller
/// reads answers: to a gRPC call, a gRPC status with the same fields
/// (tollgate-http's `grpc_answer`), since a gRPC client reads any body as
/// gRPC frames.
fn own_answer(response: Response<String>, parts: &Parts) -> Response<String> {
    if is_grpc(&parts.headers) {
        grpc_answer(response)
    } else {
        response
    }
}

/// The ready inner service, for a request that calls it later, with a
/// clone (not ready) left in its place: the readiness `poll_ready`
/// reserved goes with the request.
fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}

/// Releases the readiness `poll_ready` reserved for a request the layer
/// answers itself: the ready service is dropped, a clone left in its
/// place, so the next request waits for readiness of its own.
fn release<S: Clone>(inner: &mut S) {
    drop(take_ready(inner));
}

/// The rules that apply to the request, with its identity and cost under
/// each, into `matched`; a rule's refusal (a missing identity part, a bad
/// cost) is the request's answer.
fn matches(rules: &[Rule], parts: &Parts, matched: &mut Matches) -> Result<(), Problem> {
    for (at, rule) in rules.iter().enumerate() {
        if let Some((identity, cost)) = rule.applies(parts)? {
            matched.push((at, identity, cost));
        }
    }
    Ok(())
}

/// A request's checks, one a matched rule.
type Checks<'a> = SmallVec<[Check<'a>; INLINE_RULES]>;

/// Each matched rule's check, into `checks`.
fn checks_of<'a>(rules: &'a [Rule], matched: &'a Matches, checks: &mut Checks<'a>) {
    for (at, identity, cost) in matched {
        if let Some(rule) = rules.get(*at) {
            checks.push(Check::new(&rule.plan, identity, *cost));
        }
    }
}

/// `decide` over each matched rule's check: a request matching one rule
/// (the usual) hands its one check as it lies, with no list to fill.
fn with_checks<R>(rules: &[Rule], matched: &Matches, decide: impl FnOnce(&[Check<'_>]) -> R) -> R {
    if let [(at, identity, cost)] = matched.as_slice()
        && let Some(rule) = rules.get(*at)
    {
        return decide(std::slice::from_ref(&Check::new(
            &rule.plan, identity, *cost,
        )));
    }
    let mut checks = Checks::new();
    checks_of(rules, matched, &mut checks);
    decide(&checks)
}

/// What a decided request gets.
enum Settled {
    /// The inner service's answer, with these fields and permits.
    Admit(Admission, Option<HeldPermits>),
    /// An answer of the layer's own: the rejection, or a problem.
    Own(Response<String>),
}

/// The answer to `decided`, the decisions of `matched` under `rules`.
fn settle<D: Decider>(
    shared: &Arc<Shared<D>>,
    rules: &[Rule],
    matched: &Matches,
    decided: &Decided,
) -> Settled {
    let answered = matched.iter().filter_map(|(at, _, cost)| {
        let rule = rules.get(*at)?;
        Some(Matched {
            policy_item: &rule.policy_item,
            policy_value: rule.policy_value.as_ref(),
            policy: rule.plan.policy(),
            shadow: rule.plan.shadow(),
            cost: *cost,
        })
    });
    // Held from here on: a rejection, an inner error, a panic or a
    // cancelled call drops it, and its permits go back.
    let held = hold(shared, rules, matched, decided);
    match answer(answered, decided, StatusCode::TOO_MANY_REQUESTS) {
        Ok(Answer::Admit(admission)) => Settled::Admit(admission, held),
        Ok(Answer::Deny(response)) => Settled::Own(response),
        Err(problem) => Settled::Own(problem.response()),
    }
}

/// The permits `decided` gave the request's concurrency checks, released
/// through the decider when the response ends; `None` when it gave none.
fn hold<D: Decider>(
    shared: &Arc<Shared<D>>,
    rules: &[Rule],
    matched: &Matches,
    decided: &Decided,
) -> Option<HeldPermits> {
    if decided.decisions.iter().all(|d| d.permit.is_none()) {
        return None;
    }
    let permits: SmallVec<[(Arc<Plan>, Identity, PermitId); 1]> = matched
        .iter()
        .zip(&decided.decisions)
        .filter_map(|((at, identity, _), decision)| {
            let permit = decision.permit?;
            Some((Arc::clone(&rules.get(*at)?.plan), identity.clone(), permit))
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
    Some(HeldPermits::new(Box::new(release), &shared.pending))
}

/// The client's request id from header `name` when every matched rule
/// honours client ids, with the request's method and normalized path the
/// id is bound to (as forward auth binds it).
fn request_id(
    name: Option<&HeaderName>,
    rules: &[Rule],
    matched: &Matches,
    parts: &Parts,
) -> Result<Option<(RequestId, String)>, Problem> {
    let honoured = |(at, ..): &(usize, Identity, u64)| {
        rules.get(*at).is_some_and(|rule| rule.client_request_ids)
    };
    let Some(name) = name.filter(|_| matched.iter().all(honoured)) else {
        return Ok(None);
    };
    let fault = |RequestFault(detail)| Problem::bad_request(detail);
    let Some(id) = request_id_from_header(&parts.headers, name).map_err(fault)? else {
        return Ok(None);
    };
    let path = normalize(parts.uri.path()).map_err(|e| Problem::bad_request(e.to_string()))?;
    Ok(Some((id, format!("{} {path}", parts.method))))
}
