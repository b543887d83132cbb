//! The tower layer's overhead, measured outside criterion: `GET /items`
//! answered by one handler, bare, behind tollgate's `RateLimitLayer`
//! (embedded memory store, `SystemClock`, one rule keyed by `X-Tenant`) or
//! behind `tower_governor` keyed by the same header (`governor-headers`:
//! writing its `x-ratelimit-*` fields on an admission too), with limits no
//! run reaches (the apps of `benches/layer.rs`).
//!
//! ```sh
//! # served for wrk (bench/layer.sh): prints `listening on http://ADDR`
//! layer_bench bare|tollgate|tollgate-gcra|governor|governor-headers --listen 127.0.0.1:0
//! # N in-process calls and exit, for callgrind's instruction counts
//! layer_bench bare|tollgate|tollgate-gcra|governor|governor-headers --calls 100000
//! ```

#[path = "../benches/apps/mod.rs"]
mod apps;

use std::net::SocketAddr;

use apps::{app, governor_app, governor_headers_app, tollgate_app, tollgate_gcra_app};
use axum::Router;
use axum::body::Body;
use http::Request;
use tower::ServiceExt;

/// N in-process requests, one tenant, each answered 200.
async fn calls(app: Router, n: u64) -> Result<(), String> {
    for _ in 0..n {
        let request = Request::get("/items")
            .header("x-tenant", "acme")
            .body(Body::empty())
            .map_err(|e| e.to_string())?;
        let answer = app
            .clone()
            .oneshot(request)
            .await
            .map_err(|e| e.to_string())?;
        if answer.status() != 200 {
            return Err(format!("answered {}", answer.status()));
        }
    }
    Ok(())
}

async fn serve(app: Router, listen: SocketAddr) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("bind {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on http://{addr}");
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, service)
        .await
        .map_err(|e| e.to_string())
}

fn main() -> Result<(), String> {
    let given: Vec<String> = std::env::args().skip(1).collect();
    let [mode, flag, value] = given.as_slice() else {
        return Err(
            "usage: layer_bench bare|tollgate|tollgate-gcra|governor|governor-headers --listen ADDR | --calls N"
                .into(),
        );
    };
    let app = match mode.as_str() {
        "bare" => app(),
        "tollgate" => tollgate_app(1_000_000),
        "tollgate-gcra" => tollgate_gcra_app(1_000_000),
        "governor" => governor_app(),
        "governor-headers" => governor_headers_app(),
        other => return Err(format!("unknown app {other}")),
    };
    match flag.as_str() {
        "--calls" => {
            let n = value.parse().map_err(|e| format!("--calls {value}: {e}"))?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(calls(app, n))
        }
        "--listen" => {
            let listen = value
                .parse()
                .map_err(|e| format!("--listen {value}: {e}"))?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(serve(app, listen))
        }
        other => Err(format!("unknown flag {other}")),
    }
}
