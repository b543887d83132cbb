//! Reading a request body: whole, within `server.max_body_bytes` and
//! `server.request_timeout_ms`. An oversized body is drained (up to a
//! bound) so the connection serves the next request, or else closed lingering.

use std::time::Duration;

use axum::body::Bytes;
use axum::http::{self, StatusCode, header};
use bytes::{Buf, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Body as HttpBody;

use axum::http::HeaderValue;
use axum::response::Response;
use tollgate_http::Problem;

use super::linger::LingerOnClose;
use super::{refuse, unauthorized};
use crate::app::App;
use crate::live::LiveConfig;
use crate::tokens::Guarded;

/// Errors a request body may fail with.
pub(super) type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// How much of an oversized body is read and thrown away before the 413, so
/// that the connection can serve the client's next request. Past this, the
/// 413 goes at once and the connection closes lingering (linger.rs), so
/// the client still reads the answer instead of a reset connection.
const DISCARD_AT_MOST: u64 = 1 << 20;

/// Why a body was not taken, and whether some of it is still unread.
pub(super) struct BodyRefused {
    pub(super) problem: Problem,
    /// The client may still be sending: answer, then close lingering.
    pub(super) left_unread: bool,
}

impl From<Problem> for BodyRefused {
    fn from(problem: Problem) -> Self {
        Self {
            problem,
            left_unread: false,
        }
    }
}

/// The body of a request to `endpoint` (`/v1/check`, `/v1/release`),
/// which the check token guards: without the token it is refused unread;
/// then it is read within the server's `max_body_bytes` and
/// `request_timeout_ms`. A request refused before its body was read whole
/// is answered with `Connection: close` and closed lingering.
pub(super) async fn guarded_body<B>(
    app: &App,
    live_config: &LiveConfig,
    req: http::Request<B>,
    endpoint: &'static str,
) -> Result<Bytes, Response>
where
    B: HttpBody,
    B::Error: Into<BodyError>,
{
    if !live_config
        .config
        .tokens
        .admits_headers(Guarded::Check, req.headers())
    {
        return Err(close_lingering(unauthorized(app, Guarded::Check, endpoint)));
    }
    let settings = &live_config.config.server;
    let timeout = Duration::from_millis(settings.request_timeout_ms);
    match read_body(req, settings.max_body_bytes, timeout).await {
        Ok(body) => Ok(body),
        Err(BodyRefused {
            problem,
            left_unread,
        }) => {
            let response = refuse(app, problem);
            Err(if left_unread {
                close_lingering(response)
            } else {
                response
            })
        }
    }
}

/// `response`, after which the connection closes lingering: the client
/// may still be sending a body nobody reads.
fn close_lingering(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response.extensions_mut().insert(LingerOnClose);
    response
}

/// The body, whole, within `limit` bytes and `timeout` (a slow client's
/// request cannot hold its connection open for longer).
pub(super) async fn read_body<B>(
    req: http::Request<B>,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, BodyRefused>
where
    B: HttpBody,
    B::Error: Into<BodyError>,
{
    let too_large = |left_unread| BodyRefused {
        problem: Problem::too_large(format!("request body is larger than {limit} bytes")),
        left_unread,
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let discard_up_to = (limit as u64).saturating_add(DISCARD_AT_MOST);
    if declared.is_some_and(|len| len > discard_up_to) {
        return Err(too_large(true));
    }
    let collect = async {
        let mut body = std::pin::pin!(req.into_body());
        let mut first = Bytes::new();
        let mut rest: Option<BytesMut> = None;
        let mut seen: u64 = 0;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                tracing::debug!(error = %Into::<BodyError>::into(e), "a request body broke off");
                Problem::bad_request("the request body broke off before its end")
            })?;
            let Ok(mut data) = frame.into_data() else {
                continue;
            };
            let data = data.copy_to_bytes(data.remaining());
            seen += data.len() as u64;
            if seen > limit as u64 {
                if seen > discard_up_to {
                    return Err(too_large(true));
                }
                continue;
            }
            if first.is_empty() {
                first = data;
            } else {
                rest.get_or_insert_with(|| BytesMut::from(&first[..]))
                    .extend_from_slice(&data);
            }
        }
        if seen > limit as u64 {
            return Err(too_large(false));
        }
        Ok(rest.map_or(first, BytesMut::freeze))
    };
    crate::deadline::within(timeout, collect)
        .await
        .unwrap_or_else(|| {
            Err(Problem::new(
                StatusCode::REQUEST_TIMEOUT,
                "Request Timeout",
                format!(
                    "the request body did not arrive within {} ms",
                    timeout.as_millis()
                ),
            )
            .into())
        })
}
