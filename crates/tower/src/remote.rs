//! A client for a remote tollgate: checks decided by its `/v1/check` over
//! pooled HTTP connections, each call bounded by a timeout, one check or an
//! all-or-nothing batch, under a request id when the caller has one. It is
//! a [`Decider`] like the in-process limiter, so the layer takes either.
//!
//! Around the HTTP store sit the same parts the server puts around Redis:
//! a circuit breaker, and each policy's failure mode (`fail_open`,
//! `fail_closed`, or a `local` share of the limit in this process) when
//! the remote cannot answer in time. Before it sits a rejected-until
//! cache: a policy and identity the remote rejected are answered here,
//! with no round trip, until their retry time on the injected clock.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Uri};
use thiserror::Error;
use tollgate_core::{Clock, Identity, PermitId, Released};
use tollgate_limiter::{Check, Decided, Decider, Decisions, Plan, ReleaseError};
use tollgate_store::{
    BreakerConfig, DEFAULT_RETRY_IDS, DEFAULT_RETRY_WINDOW_MS, Decide, DecidedBy, Guarded,
    GuardedCheck, OnStoreFailure, Replay, RequestHasher, RequestId, Retry,
};

mod rejected;
mod store;
mod wire;

use rejected::RejectedUntil;
use store::RemoteStore;

/// Why a remote client could not be built.
#[derive(Debug, Error)]
pub enum RemoteError {
    /// The base URL does not parse, or is not `http://host[:port]`.
    #[error("remote tollgate url {url:?}: {why}")]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The check token cannot be a header value.
    #[error("remote tollgate check token: not a valid header value")]
    Token,
}

/// How to reach a remote tollgate and what to do when it does not answer.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// The server's base URL, `http://host:port` (its `/v1/check` is asked).
    pub url: String,
    /// The longest a call may take, connecting included, before the
    /// policies' failure modes answer instead.
    pub timeout: Duration,
    /// The server's check token (`TOLLGATE_CHECK_TOKEN`), sent as a bearer.
    pub token: Option<String>,
    /// When to stop asking a server that keeps failing, and when to probe
    /// it again.
    pub breaker: BreakerConfig,
    /// Idle connections kept open to the server.
    pub max_idle_connections: usize,
    /// Rejections remembered (0: every check is a round trip).
    pub rejected_entries: usize,
    /// Keys the `local` failure mode's budgets may hold.
    pub local_keys: usize,
}

impl RemoteConfig {
    /// `url` with the defaults: a 100 ms timeout, the server's breaker (5
    /// failures open it for 1 s), 32 idle connections, 10,000 remembered
    /// rejections, 100,000 local keys.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            timeout: Duration::from_millis(100),
            token: None,
            breaker: BreakerConfig::default(),
            max_idle_connections: 32,
            rejected_entries: 10_000,
            local_keys: 100_000,
        }
    }
}

/// A remote tollgate as a [`Decider`].
pub struct RemoteTollgate {
    guarded: Guarded<RemoteStore>,
    rejected: RejectedUntil,
    clock: Arc<dyn Clock>,
}

impl RemoteTollgate {
    /// A client for `config.url`; `clock` dates the rejected-until cache
    /// and the local budgets, and times the breaker. Needs a tokio runtime
    /// when it is asked, not when it is built.
    pub fn new(config: &RemoteConfig, clock: Arc<dyn Clock>) -> Result<Self, RemoteError> {
        let bad = |why: &str| RemoteError::Url {
            url: config.url.clone(),
            why: why.to_owned(),
        };
        let base: Uri = config.url.parse().map_err(|e| bad(&format!("{e}")))?;
        if base.scheme_str() != Some("http") || base.authority().is_none() {
            return Err(bad("expected http://host[:port]"));
        }
        let path = base.path().trim_end_matches('/');
        let endpoint = |name: &str| {
            Uri::builder()
                .scheme("http")
                .authority(base.authority().map_or("", |a| a.as_str()))
                .path_and_query(format!("{path}/v1/{name}"))
                .build()
                .map_err(|e| bad(&e.to_string()))
        };
        let (check, release) = (endpoint("check")?, endpoint("release")?);
        let authorization = config
            .token
            .as_ref()
            .map(|t| HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| RemoteError::Token))
            .transpose()?;
        let store = RemoteStore::new(
            check,
            release,
            config.timeout,
            authorization,
            config.max_idle_connections,
        );
        Ok(Self {
            guarded: Guarded::new(store, config.breaker, Arc::clone(&clock), config.local_keys),
            rejected: RejectedUntil::new(config.rejected_entries),
            clock,
        })
    }

    /// Every check answered by a remembered rejection, or `None`.
    fn remembered(&self, checks: &[Check<'_>], now_ms: u64) -> Option<Decided> {
        if checks.is_empty() {
            return None;
        }
        let decisions = checks
            .iter()
            .map(|c| {
                self.rejected
                    .get(c.plan.policy().name(), c.identity, c.cost, now_ms)
            })
            .collect::<Option<Decisions>>()?;
        Some(Decided {
            decisions,
            by: DecidedBy::Shared,
            error: None,
            store_us: None,
            replay: Replay::Fresh,
        })
    }
}

impl Decider for RemoteTollgate {
    async fn decide_request(
        &self,
        checks: &[Check<'_>],
        id: Option<&RequestId>,
        shape: Option<&str>,
    ) -> Decided {
        let now_ms = self.clock.now_ms();
        // A request under an id may be a retry the server answers from its
        // record: only the server knows.
        if id.is_none()
            && let Some(known) = self.remembered(checks, now_ms)
        {
            return known;
        }
        let guarded: Vec<GuardedCheck<'_>> = checks
            .iter()
            .map(|c| GuardedCheck {
                check: tollgate_store::Check {
                    policy: c.plan.policy(),
                    identity: c.identity,
                    cost: c.cost,
                },
                // A plan that names no failure mode is never admitted
                // silently: rejected, as the server answers an error.
                on_failure: c.plan.on_failure().unwrap_or(OnStoreFailure::FailClosed),
                local_policy: c.plan.local(),
            })
            .collect();
        // `/v1/check` has no field for the shape: the id sent is bound to
        // it instead, so the same id on another route is another id there.
        let bound = id.zip(shape).and_then(|(id, shape)| bound_id(id, shape));
        let id = bound.as_ref().or(id);
        let digest = id.map(|_| {
            let mut hasher = RequestHasher::new(shape);
            for c in checks {
                hasher.check(c.plan.policy().name(), c.identity.as_bytes(), c.cost);
            }
            hasher.finish()
        });
        let rule = checks.first().and_then(|c| c.plan.retry());
        let retry = id.zip(digest).map(|(id, request)| Retry {
            id,
            request,
            window_ms: rule.map_or(DEFAULT_RETRY_WINDOW_MS, |r| r.window_ms),
            max_ids: rule.map_or(DEFAULT_RETRY_IDS, |r| r.max_ids),
        });
        let decided = self.guarded.decide_all(&guarded, retry).await;
        if let Some(error) = &decided.error {
            tracing::debug!(target: "tollgate::remote", %error, path = decided.by.name(), "remote tollgate did not decide");
        }
        if decided.by == DecidedBy::Shared && decided.replay == Replay::Fresh {
            let now_ms = self.clock.now_ms();
            // A concurrency rejection is only an upper bound (a release may
            // come sooner): never answered from here.
            for (c, d) in checks.iter().zip(&decided.decisions) {
                if !c.plan.policy().limits().holds_permits() {
                    self.rejected
                        .note(c.plan.policy().name(), c.identity, c.cost, d, now_ms);
                }
            }
        }
        decided
    }

    /// `POST /v1/release` to the server, behind the same breaker (and
    /// freeing a permit the `local` failure mode handed out meanwhile).
    async fn release(
        &self,
        plan: &Plan,
        identity: &Identity,
        permit: PermitId,
    ) -> Result<bool, ReleaseError> {
        if !plan.policy().limits().holds_permits() {
            return Err(ReleaseError::NotConcurrency {
                policy: plan.policy().name().to_owned(),
            });
        }
        let released = Decide::release(&self.guarded, plan.policy(), identity, permit)
            .await
            .map_err(|e| ReleaseError::Remote(e.to_string()))?;
        Ok(released == Released::Freed)
    }
}

/// `id` bound to `shape`, as one request id: a digest of both (hex, well
/// inside the longest id), the same for every retry of one request.
fn bound_id(id: &RequestId, shape: &str) -> Option<RequestId> {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"tollgate request id and shape v1\0");
    hasher.update(&(id.as_str().len() as u64).to_le_bytes());
    hasher.update(id.as_str().as_bytes());
    hasher.update(shape.as_bytes());
    RequestId::new(hasher.finalize().to_hex().as_str()).ok()
}
