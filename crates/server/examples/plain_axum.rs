//! The HTTP load harness's baseline (bench/http.sh): a plain axum handler
//! that parses the same JSON as `/v1/check` and updates one map entry. It
//! decides nothing; it measures what HTTP + JSON + a map cost on this
//! machine, so tollgate's figures can be quoted as a ratio to it.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use dashmap::DashMap;

mod baseline;

use baseline::CheckBody;

type Counts = Arc<DashMap<String, u64>>;

async fn check(State(counts): State<Counts>, body: axum::body::Bytes) -> String {
    let Ok(parsed) = serde_json::from_slice::<CheckBody<'_>>(&body) else {
        return "{\"error\":\"bad json\"}".to_owned();
    };
    let mut entry = counts.entry(parsed.key.to_owned()).or_insert(0);
    *entry += parsed.cost.unwrap_or(1);
    format!("{{\"allowed\":true,\"count\":{}}}", *entry)
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let counts: Counts = Arc::new(DashMap::new());
    let app = Router::new()
        .route("/v1/check", post(check))
        .with_state(counts);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await
}
