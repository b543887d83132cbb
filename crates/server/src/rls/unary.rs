//! gRPC's unary call on HTTP/2, framed here for the one hot method.
//!
//! Why by hand: a `ShouldRateLimit` call is one small message each way,
//! and tonic's generic server path (codec streams, compression
//! negotiation, boxed bodies, a tower stack per call) cost more than the
//! decision behind it (docs/benchmarks.md, "Envoy's rate limit service").
//! The framing is small and fixed: a message is a flag byte (0:
//! uncompressed), its length (4 bytes, big-endian) and its protobuf bytes;
//! a success answers with headers, one message and the trailer
//! `grpc-status: 0`; an error answers with headers alone, carrying
//! `grpc-status` and `grpc-message` (tonic's [`Status::into_http`]).
//! Every other method (the health service, unknown ones) still goes
//! through tonic.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use tonic::Status;

/// The largest request message accepted: far above what the protocol's
/// bounds let a request carry (64 descriptors of 16 entries of keys of at
/// most `server.max_key_bytes`), far below tonic's 4 MiB default.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;
/// The length prefix before each message.
const PREFIX: usize = 5;
const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// The bytes of the one request message of a unary call (its prefix
/// checked and taken off), read within `timeout`.
pub async fn read_message(body: Incoming, timeout: Duration) -> Result<Bytes, Status> {
    let body = crate::deadline::within(timeout, read_body(body))
        .await
        .ok_or_else(|| {
            Status::deadline_exceeded(
                "the request message did not arrive within server.request_timeout_ms",
            )
        })??;
    unframe(body)
}

/// The request body, frame by frame: one DATA frame is taken as it is, and
/// more are joined, up to one message's bound.
async fn read_body(body: Incoming) -> Result<Bytes, Status> {
    let mut body = std::pin::pin!(body);
    let mut first = Bytes::new();
    let mut rest: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|_| Status::cancelled("the request stream ended before its message"))?;
        let Ok(mut data) = frame.into_data() else {
            continue;
        };
        let seen = first.len() + rest.as_ref().map_or(0, BytesMut::len) + data.remaining();
        if seen > PREFIX + MAX_MESSAGE_BYTES {
            return Err(Status::resource_exhausted(too_large()));
        }
        if first.is_empty() && rest.is_none() {
            first = data.copy_to_bytes(data.remaining());
        } else {
            rest.get_or_insert_with(|| BytesMut::from(&first[..]))
                .extend_from_slice(&data);
        }
    }
    Ok(rest.map_or(first, BytesMut::freeze))
}

fn too_large() -> String {
    format!("the request message exceeds {MAX_MESSAGE_BYTES} bytes")
}

/// The message bytes of a request body holding exactly one uncompressed
/// message.
fn unframe(mut bytes: Bytes) -> Result<Bytes, Status> {
    let Some(prefix) = bytes.get(..PREFIX) else {
        return Err(Status::invalid_argument(
            "the request carries no gRPC message",
        ));
    };
    let (flag, length) = (
        prefix[0],
        u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]),
    );
    match flag {
        0 => {}
        1 => {
            return Err(Status::unimplemented(
                "compressed messages are not accepted: send the request uncompressed",
            ));
        }
        other => {
            return Err(Status::invalid_argument(format!(
                "the gRPC message's flag byte is {other}, not 0 or 1"
            )));
        }
    }
    let carried = bytes.len() - PREFIX;
    if usize::try_from(length).map_or(true, |l| l > MAX_MESSAGE_BYTES) {
        return Err(Status::resource_exhausted(too_large()));
    }
    if u64::from(length) != carried as u64 {
        return Err(Status::invalid_argument(format!(
            "the gRPC message declares {length} bytes but the request carries {carried} after it (a unary call holds one message)"
        )));
    }
    Ok(bytes.split_off(PREFIX))
}

/// The success answer carrying the message that `write` writes, of
/// `length` bytes.
pub fn answer(length: usize, write: impl FnOnce(&mut BytesMut)) -> hyper::Response<GrpcBody> {
    let mut framed = BytesMut::with_capacity(PREFIX + length);
    framed.put_u8(0);
    // A response is a few hundred bytes; u32 holds any tollgate writes.
    framed.put_u32(u32::try_from(length).unwrap_or(u32::MAX));
    write(&mut framed);
    let mut response = hyper::Response::new(GrpcBody::Message {
        data: Some(framed.freeze()),
        trailers: true,
    });
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    response
}

/// The most bytes of an error's `grpc-message` (before its percent
/// encoding): a header field, kept well inside a proxy's buffer whatever a
/// message quotes (client input is quoted short: `tollgate_core::quote`).
pub const MAX_STATUS_MESSAGE_BYTES: usize = 512;

/// The error answer: headers only (gRPC's trailers-only form), its message
/// cut to [`MAX_STATUS_MESSAGE_BYTES`].
pub fn refuse(status: Status) -> hyper::Response<GrpcBody> {
    let message = status.message();
    if message.len() <= MAX_STATUS_MESSAGE_BYTES {
        return status.into_http();
    }
    let mut end = MAX_STATUS_MESSAGE_BYTES - "... (cut)".len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    Status::new(status.code(), format!("{}... (cut)", &message[..end])).into_http()
}

/// A gRPC response body: one message then the OK trailer, nothing (an
/// error's trailers-only answer), or what tonic wrote for another method.
#[derive(Default)]
pub enum GrpcBody {
    /// One framed message, then the OK trailers.
    Message {
        /// The framed message, until it is sent.
        data: Option<Bytes>,
        /// Whether the OK trailers are still to be sent.
        trailers: bool,
    },
    /// No body: an error's trailers-only answer.
    #[default]
    Empty,
    /// The body tonic wrote for another method.
    Routed(tonic::body::Body),
}

impl Body for GrpcBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        match self.get_mut() {
            GrpcBody::Message { data, trailers } => {
                if let Some(data) = data.take() {
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                if std::mem::take(trailers) {
                    let mut ok = HeaderMap::with_capacity(1);
                    ok.insert(GRPC_STATUS, HeaderValue::from_static("0"));
                    return Poll::Ready(Some(Ok(Frame::trailers(ok))));
                }
                Poll::Ready(None)
            }
            GrpcBody::Empty => Poll::Ready(None),
            GrpcBody::Routed(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            GrpcBody::Message { data, trailers } => data.is_none() && !trailers,
            GrpcBody::Empty => true,
            GrpcBody::Routed(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            GrpcBody::Message { data, .. } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            GrpcBody::Empty => SizeHint::with_exact(0),
            GrpcBody::Routed(body) => body.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(flag: u8, declared: u32, body: &[u8]) -> Bytes {
        let mut b = BytesMut::new();
        b.put_u8(flag);
        b.put_u32(declared);
        b.put_slice(body);
        b.freeze()
    }

    #[test]
    fn one_uncompressed_message_is_unframed() {
        let message = unframe(framed(0, 3, b"abc")).expect("one message");
        assert_eq!(&message[..], b"abc");
        let empty = unframe(framed(0, 0, b"")).expect("an empty message");
        assert!(empty.is_empty());
    }

    #[test]
    fn malformed_framing_is_refused_with_its_fault() {
        let refused = |bytes: Bytes| unframe(bytes).expect_err("refused");
        let short = refused(Bytes::from_static(&[0, 0, 0]));
        assert_eq!(short.code(), tonic::Code::InvalidArgument);
        assert_eq!(short.message(), "the request carries no gRPC message");
        let compressed = refused(framed(1, 3, b"abc"));
        assert_eq!(compressed.code(), tonic::Code::Unimplemented);
        let flag = refused(framed(7, 3, b"abc"));
        assert_eq!(
            flag.message(),
            "the gRPC message's flag byte is 7, not 0 or 1"
        );
        let two = refused(framed(0, 1, b"ab"));
        assert_eq!(
            two.message(),
            "the gRPC message declares 1 bytes but the request carries 2 after it (a unary call holds one message)"
        );
        let cut = refused(framed(0, 9, b"ab"));
        assert_eq!(cut.code(), tonic::Code::InvalidArgument);
        let huge = refused(framed(0, u32::MAX, b"ab"));
        assert_eq!(huge.code(), tonic::Code::ResourceExhausted);
        assert_eq!(huge.message(), "the request message exceeds 1048576 bytes");
    }

    #[test]
    fn an_answer_is_one_prefixed_message_then_the_ok_trailer() {
        let answered = answer(2, |b| b.put_slice(&[8, 1]));
        assert_eq!(answered.headers()[CONTENT_TYPE], "application/grpc");
        let mut body = answered.into_body();
        let cx = &mut Context::from_waker(std::task::Waker::noop());
        let Poll::Ready(Some(Ok(data))) = Pin::new(&mut body).poll_frame(cx) else {
            panic!("a data frame first");
        };
        let data = data.into_data().expect("data");
        assert_eq!(&data[..], &[0, 0, 0, 0, 2, 8, 1]);
        let Poll::Ready(Some(Ok(trailers))) = Pin::new(&mut body).poll_frame(cx) else {
            panic!("then the trailers");
        };
        assert_eq!(
            trailers.into_trailers().expect("trailers")["grpc-status"],
            "0"
        );
        assert!(body.is_end_stream());
        assert!(matches!(
            Pin::new(&mut body).poll_frame(cx),
            Poll::Ready(None)
        ));
    }

    #[test]
    fn a_refusal_carries_a_bounded_grpc_message() {
        let long = Status::invalid_argument(format!("operator text {}", "é".repeat(2_000)));
        let answer = refuse(long);
        let message = answer.headers()["grpc-message"].as_bytes();
        // Percent-encoded: at most three bytes for each of the message's.
        assert!(
            message.len() <= 3 * MAX_STATUS_MESSAGE_BYTES,
            "{}",
            message.len()
        );
        assert!(message.ends_with(b"...%20(cut)"), "{message:?}");
        let short = refuse(Status::invalid_argument("short"));
        assert_eq!(short.headers()["grpc-message"], "short");
    }
}
