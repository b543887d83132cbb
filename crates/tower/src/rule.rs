//! One limit the layer applies: a limiter [`Plan`] and how a request
//! names what it checks — whether the policy applies, the identity, the
//! cost. From code, closures over the request's head; from a config file,
//! the same rules `tollgate serve` applies.

use std::sync::Arc;

use http::HeaderValue;
use http::request::Parts;
use tollgate_core::Identity;
use tollgate_http::{Problem, policy_item, policy_value};
use tollgate_limiter::{DEFAULT_RETRY_IDS, DEFAULT_RETRY_WINDOW_MS, Plan, RetryRule};
use tollgate_store::OnStoreFailure;

/// What a rule makes of a request: not its business (`Ok(None)`), a check
/// of an identity at a cost, or a refusal (a missing identity part, a bad
/// cost), answered as the server answers it.
pub type Applies = Result<Option<(Identity, u64)>, Problem>;

type Judge = dyn Fn(&Parts) -> Applies + Send + Sync;

/// A limit: a policy's plan and how a request is checked against it.
#[derive(Clone)]
pub struct Rule {
    pub(crate) plan: Arc<Plan>,
    /// Its `RateLimit-Policy` item, written once.
    pub(crate) policy_item: String,
    /// The same as a header value, shared by every answer it is the one
    /// enforced policy of.
    pub(crate) policy_value: Option<HeaderValue>,
    /// Whether a client's request id may replay its admissions.
    pub(crate) client_request_ids: bool,
    judge: Arc<Judge>,
}

impl Rule {
    /// `plan` for every request `identity` names (a request it names no
    /// identity for is not limited by it), at cost 1. A plan without a
    /// failure mode is given `fail_closed`: a limit is never dropped
    /// silently when its store fails.
    pub fn new(
        plan: Plan,
        identity: impl Fn(&Parts) -> Option<Identity> + Send + Sync + 'static,
    ) -> Self {
        Self::judged(plan, move |parts| Ok(identity(parts).map(|id| (id, 1))))
    }

    /// `plan` under a rule that says all: whether it applies, the identity
    /// and the cost, or why the request is refused.
    pub fn judged(plan: Plan, judge: impl Fn(&Parts) -> Applies + Send + Sync + 'static) -> Self {
        let plan = match plan.on_failure() {
            Some(_) => plan,
            None => plan.with_failure_mode(OnStoreFailure::FailClosed),
        };
        let policy_item = policy_item(plan.policy());
        Self {
            policy_value: policy_value(&policy_item),
            policy_item,
            plan: Arc::new(plan),
            client_request_ids: false,
            judge: Arc::new(judge),
        }
    }

    /// A client's request id (the layer's
    /// [`with_request_id_header`](crate::RateLimitLayer::with_request_id_header))
    /// may replay this rule's admissions: off by default, as
    /// `client_request_ids` is in a config. Ids are kept under the plan's
    /// retry rule ([`Plan::with_retry`]); a plan without one, not yet
    /// shared by a clone of this rule, is given the default one
    /// ([`DEFAULT_RETRY_WINDOW_MS`], [`DEFAULT_RETRY_IDS`]).
    pub fn with_client_request_ids(self) -> Self {
        let plan = match Arc::try_unwrap(self.plan) {
            Ok(plan) if plan.retry().is_none() => Arc::new(plan.with_retry(Some(RetryRule {
                window_ms: DEFAULT_RETRY_WINDOW_MS,
                max_ids: DEFAULT_RETRY_IDS,
            }))),
            Ok(plan) => Arc::new(plan),
            Err(shared) => shared,
        };
        Self {
            plan,
            client_request_ids: true,
            ..self
        }
    }

    /// Each request costs what `cost` says of it instead of 1.
    pub fn with_cost(self, cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> Self {
        let judge = Arc::clone(&self.judge);
        Self {
            judge: Arc::new(move |parts: &Parts| {
                judge(parts).map(|found| found.map(|(id, _)| (id, cost(parts))))
            }),
            ..self
        }
    }

    /// The rule's plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    pub(crate) fn applies(&self, parts: &Parts) -> Applies {
        (self.judge)(parts)
    }
}
