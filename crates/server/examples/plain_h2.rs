//! The RLS load harness's floor (bench/rls.sh, bench/instructions.sh): HTTP/2
//! on hyper, one current-thread runtime per core sharing the port
//! (SO_REUSEPORT), as tollgate serves gRPC, answering every call with the
//! same canned `ShouldRateLimit` answer (`OK`, one `OK` status) after
//! reading its body, and deciding, parsing and counting nothing. What a
//! unary gRPC call costs the HTTP/2 stack tollgate is built on, with no
//! work behind it: the most a server on this stack can save.
//!
//!   plain_h2            # prints `grpc listening on ADDR`

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tollgate::GrpcBody;

mod baseline;

/// The gRPC message `RateLimitResponse { overall_code: OK, statuses: [{
/// code: OK }] }`, with its 5-byte prefix.
const ANSWER: &[u8] = &[0, 0, 0, 0, 6, 0x08, 0x01, 0x12, 0x02, 0x08, 0x01];

async fn answer(req: Request<Incoming>) -> Result<Response<GrpcBody>, Infallible> {
    // Read the call's message, as any server must.
    let _ = req.into_body().collect().await;
    let mut response = Response::new(GrpcBody::Message {
        data: Some(Bytes::from_static(ANSWER)),
        trailers: true,
    });
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    Ok(response)
}

async fn serve(listener: TcpListener) {
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(1_024)
        .initial_connection_window_size(1 << 20)
        .auto_date_header(false);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let connection = builder
            .clone()
            .serve_connection(TokioIo::new(stream), service_fn(answer));
        tokio::spawn(connection);
    }
}

fn main() -> std::io::Result<()> {
    baseline::serve_per_core_as("grpc listening on ", serve)
}
