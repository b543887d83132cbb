//! docs/guides/embedding.md: an axum service whose routes tollgate's tower
//! layer limits, by the limits of a tollgate config file.
//!
//! ```sh
//! cargo run -p tollgate-tower --example quickstart
//! ```
//!
//! It reads crates/tower/examples/quickstart.yaml and listens on
//! 127.0.0.1:3000.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::routing::post;
use tollgate_core::SystemClock;
use tollgate_tower::{ConfigError, Configured};

/// The service: its routes, and the layer in front of them. Keep the
/// `Configured` as long as the service serves: it runs the limiter's
/// upkeep.
pub async fn app(config: &Path) -> Result<(Router, Arc<Configured>), ConfigError> {
    let configured = Arc::new(Configured::load(config, Arc::new(SystemClock)).await?);
    let app = Router::new()
        .route("/orders", post(|| async { "order placed\n" }))
        .layer(configured.layer());
    Ok((app, configured))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (app, _configured) = app(Path::new("crates/tower/examples/quickstart.yaml")).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    // The connection's peer is the client address, for policies keyed by it.
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app).await?;
    Ok(())
}
