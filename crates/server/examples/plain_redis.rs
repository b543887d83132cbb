//! The Redis load harness's baseline (bench/redis.sh): a plain axum
//! handler that parses the same JSON as `/v1/check` and makes one EVALSHA
//! of tollgate's gcra script per request over one multiplexed redis-rs
//! connection: the usual Redis-backed limiter, with no batching.
//!
//! Run: `plain_redis redis://127.0.0.1:PORT`

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use redis::aio::MultiplexedConnection;
use tollgate_store::lua_source;

mod baseline;

use baseline::CheckBody;

#[derive(Clone)]
struct Shared {
    redis: MultiplexedConnection,
    sha: String,
}

async fn check(State(shared): State<Shared>, body: axum::body::Bytes) -> String {
    let Ok(parsed) = serde_json::from_slice::<CheckBody<'_>>(&body) else {
        return "{\"error\":\"bad json\"}".to_owned();
    };
    let reply: redis::RedisResult<Vec<i64>> = redis::cmd("EVALSHA")
        .arg(&shared.sha)
        .arg(1)
        .arg(format!("plain:bench:gcra:{{{}}}", parsed.key))
        .arg("")
        .arg(1000)
        .arg("gcra")
        .arg(parsed.cost.unwrap_or(1))
        .arg(1000)
        .arg(1)
        .arg(1)
        .arg("")
        .query_async(&mut shared.redis.clone())
        .await;
    match reply {
        Ok(d) if d.len() == 4 => format!(
            "{{\"allowed\":{},\"remaining\":{},\"retry_after_ms\":{},\"reset_after_ms\":{}}}",
            d[0] == 1,
            d[1],
            d[2],
            d[3]
        ),
        Ok(_) => "{\"error\":\"short reply\"}".to_owned(),
        Err(e) => format!("{{\"error\":{:?}}}", e.to_string()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .ok_or("usage: plain_redis redis://HOST:PORT")?;
    let client = redis::Client::open(url)?;
    let mut redis = client.get_multiplexed_async_connection().await?;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(lua_source::GCRA)
        .query_async(&mut redis)
        .await?;
    let app = Router::new()
        .route("/v1/check", post(check))
        .with_state(Shared { redis, sha });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
