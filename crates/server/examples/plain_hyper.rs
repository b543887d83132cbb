//! The HTTP load harness's second baseline (bench/http.sh): the same work
//! as plain_axum (parse the JSON, update one map entry) on hyper directly,
//! one current-thread runtime per core sharing the port (SO_REUSEPORT). It
//! is the ceiling of tollgate's serving architecture on this machine: what
//! HTTP, JSON and a map cost with nothing else.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use dashmap::DashMap;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

mod baseline;

use baseline::CheckBody;

type Counts = Arc<DashMap<String, u64>>;

async fn check(
    counts: Counts,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = match req.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let Ok(parsed) = serde_json::from_slice::<CheckBody<'_>>(&body) else {
        return Ok(Response::new(Full::new(Bytes::from_static(
            b"{\"error\":\"bad json\"}",
        ))));
    };
    let count = {
        let mut entry = counts.entry(parsed.key.to_owned()).or_insert(0);
        *entry += parsed.cost.unwrap_or(1);
        *entry
    };
    let text = format!("{{\"allowed\":true,\"count\":{count}}}");
    Ok(Response::new(Full::new(Bytes::from(text))))
}

async fn serve(listener: TcpListener, counts: Counts) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let counts = Arc::clone(&counts);
        tokio::spawn(async move {
            let service = service_fn(move |req| check(Arc::clone(&counts), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn main() -> std::io::Result<()> {
    let counts: Counts = Arc::new(DashMap::new());
    baseline::serve_per_core(move |listener| serve(listener, Arc::clone(&counts)))
}
