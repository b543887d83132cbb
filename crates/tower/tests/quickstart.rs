//! The quickstart example of docs/guides/embedding.md
//! (examples/quickstart.rs with examples/quickstart.yaml), its service
//! served over real HTTP as its `main` serves it.

#[allow(dead_code)] // its `main` is the example's own
#[path = "../examples/quickstart.rs"]
mod quickstart;

use std::net::SocketAddr;
use std::path::Path;

#[tokio::test]
async fn the_quickstart_admits_three_orders_a_tenant_then_answers_429() {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart.yaml");
    let (app, _configured) = quickstart::app(&config).await.expect("the app");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app).await
    });
    let client = reqwest::Client::new();
    let order = |tenant: Option<&str>| {
        let mut request = client.post(format!("{base}/orders"));
        if let Some(tenant) = tenant {
            request = request.header("X-Tenant", tenant);
        }
        request.send()
    };

    for remaining in ["2", "1", "0"] {
        let answer = order(Some("acme")).await.expect("an answer");
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.headers()["ratelimit-policy"], "\"orders\";q=3;w=60");
        let state = answer.headers()["ratelimit"].to_str().expect("ASCII");
        assert!(
            state.starts_with(&format!("\"orders\";r={remaining};t=")),
            "{state}"
        );
        assert_eq!(answer.text().await.expect("body"), "order placed\n");
    }
    let rejected = order(Some("acme")).await.expect("an answer");
    assert_eq!(rejected.status(), 429);
    assert_eq!(
        rejected.headers()["content-type"],
        "application/problem+json"
    );
    // Full again after three tokens' time, the next token after one's
    // (20 s): whenever the request came, the two differ by 40 s.
    let seconds = |name: &str, prefix: &str| -> u64 {
        let value = rejected.headers()[name].to_str().expect("ASCII");
        value
            .strip_prefix(prefix)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{name}: {value}"))
    };
    let full = seconds("ratelimit", "\"orders\";r=0;t=");
    assert_eq!(full - seconds("retry-after", ""), 40);
    // Another tenant has its own three; no tenant at all is refused.
    assert_eq!(
        order(Some("globex")).await.expect("an answer").status(),
        200
    );
    assert_eq!(order(None).await.expect("an answer").status(), 400);
}
