//! `/v1/check` as a store: each call one HTTP request on a pooled
//! connection, bounded by a timeout. A call that times out, cannot
//! connect, or is answered 5xx is a store error, so the guard around it
//! answers by each policy's failure mode as it does for Redis.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tollgate_core::{Decision, Identity, PermitId, Policy, Released};
use tollgate_http::{ReleaseAnswer, request_id_mismatch};
use tollgate_store::{Check, Replay, Retried, Retry, Store, StoreError};

use super::wire;

/// The most bytes of an answer read: a batch of the server's
/// `max_checks` decisions fits many times over.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// A remote tollgate's `/v1/check`, as a store.
pub(crate) struct RemoteStore {
    client: Client<HttpConnector, Full<Bytes>>,
    check: Uri,
    release: Uri,
    timeout: Duration,
    authorization: Option<HeaderValue>,
}

impl RemoteStore {
    pub(crate) fn new(
        check: Uri,
        release: Uri,
        timeout: Duration,
        authorization: Option<HeaderValue>,
        max_idle: usize,
    ) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(max_idle)
            .build(connector);
        Self {
            client,
            check,
            release,
            timeout,
            authorization,
        }
    }

    /// POSTs `body` to `uri` within the timeout: the status and the body.
    async fn post(&self, uri: &Uri, body: Vec<u8>) -> Result<(StatusCode, Bytes), StoreError> {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(uri.clone())
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(auth) = &self.authorization {
            request = request.header(header::AUTHORIZATION, auth.clone());
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| StoreError::Config(format!("{} request: {e}", uri.path())))?;
        let timeout_ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| {
                if e.is_connect() {
                    StoreError::Refused(format!("{uri}: {e}"))
                } else {
                    StoreError::Unavailable(format!("{uri}: {e}"))
                }
            })?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| StoreError::Unavailable(format!("{uri}: {e}")))?
                .to_bytes();
            Ok::<_, StoreError>((status, body))
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| StoreError::Timeout { timeout_ms })?
    }

    async fn call(&self, checks: &[Check<'_>], id: Option<&str>) -> Result<Retried, StoreError> {
        let body = wire::body(checks, id)?;
        let (status, body) = self.post(&self.check, body).await?;
        if status == StatusCode::UNPROCESSABLE_ENTITY && is_mismatch(&body) {
            // The id was first sent with another request: the client's
            // fault, answered as the server answers it, not a store fault.
            return Ok(Retried {
                decisions: Vec::new(),
                replay: Replay::Mismatch,
            });
        }
        if status != StatusCode::OK {
            return Err(refused("/v1/check", status, &body));
        }
        let (decisions, replayed) = wire::decisions(&body, checks.len())?;
        Ok(Retried {
            decisions,
            replay: if replayed {
                Replay::Replayed
            } else {
                Replay::Fresh
            },
        })
    }
}

/// Whether a 422 refuses a request id sent with another request.
fn is_mismatch(body: &[u8]) -> bool {
    detail(body) == request_id_mismatch().detail
}

/// A problem's `detail` ("" when there is none).
fn detail(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("detail").and_then(|d| d.as_str()).map(str::to_owned))
        .unwrap_or_default()
}

/// A status other than 200, as the store error it is: the server's own
/// outage (5xx) fails over like an unreachable one; a refused token or an
/// unknown policy is a configuration fault, failed over all the same (the
/// client has no other answer) and named in the log.
fn refused(path: &str, status: StatusCode, body: &[u8]) -> StoreError {
    let said = format!("{path} answered {status}: {}", detail(body));
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => StoreError::Auth(said),
        s if s.is_server_error() => StoreError::Unavailable(said),
        StatusCode::UNPROCESSABLE_ENTITY => StoreError::Protocol(said),
        _ => StoreError::Config(said),
    }
}

impl Store for RemoteStore {
    async fn decide(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        let mut retried = self.call(&[check], None).await?;
        retried
            .decisions
            .pop()
            .ok_or_else(|| StoreError::Protocol("/v1/check answered no decision".to_owned()))
    }

    async fn decide_all(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        self.call(checks, None).await.map(|r| r.decisions)
    }

    async fn decide_once(
        &self,
        checks: &[Check<'_>],
        retry: Retry<'_>,
    ) -> Result<Retried, StoreError> {
        self.call(checks, Some(retry.id.as_str())).await
    }

    /// `POST /v1/release`: the server frees the permit in its own store.
    async fn release(
        &self,
        policy: &Policy,
        identity: &Identity,
        permit: PermitId,
    ) -> Result<Released, StoreError> {
        let body = wire::release_body(policy, identity, permit)?;
        let (status, body) = self.post(&self.release, body).await?;
        if status != StatusCode::OK {
            return Err(refused("/v1/release", status, &body));
        }
        let answer: ReleaseAnswer = serde_json::from_slice(&body)
            .map_err(|e| StoreError::Protocol(format!("/v1/release answer: {e}")))?;
        // The server's answer says only whether it freed one.
        Ok(if answer.released {
            Released::Freed
        } else {
            Released::Unknown
        })
    }
}
