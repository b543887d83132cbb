//! tollgate's own endpoints in the shipped example: only nginx's
//! `/v1/authorize` is open (to trusted_proxies). A process on the same host
//! — an SSRF in the application is enough — gets 401 from everything that
//! resets, spends or reads state, and changes nothing; and the example does
//! not start without its tokens.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;

use serde_json::json;

use crate::harness::*;
use crate::support::tollgate_bin;

/// A request straight at tollgate from 127.0.0.1, as a local process (or
/// the application, tricked into fetching a URL) makes it.
fn local(method: &str, target: &str, extra: &str, body: &str) -> String {
    format!(
        "{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_endpoints_refuse_a_local_caller_without_their_token() {
    let stack = Stack::start().await;
    let nginx = SocketAddr::from((Ipv4Addr::LOCALHOST, stack.nginx.port));
    let tollgate: SocketAddr = stack
        .tollgate
        .as_ref()
        .expect("tollgate runs")
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("tollgate's address");
    let login = |ip: [u8; 4]| async move { raw(ip, nginx, &post("/login", "")).await.0 };
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(login([127, 0, 0, 40]).await);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429]);

    let reset = "/v1/state?policy=login&key.client_ip=127.0.0.40";
    let lock_out = r#"{"policy":"login","key":{"client_ip":"127.0.0.41"},"cost":5}"#;
    let needs = |var: &str| {
        json!({
            "type": "about:blank",
            "title": "Unauthorized",
            "status": 401,
            "detail": format!("this endpoint needs `Authorization: Bearer <token>` ({var})"),
        })
    };
    let admin = needs("TOLLGATE_ADMIN_TOKEN");
    let check = needs("TOLLGATE_CHECK_TOKEN");
    let metrics = needs("TOLLGATE_METRICS_TOKEN");
    let wrong = "Authorization: Bearer not-the-admin-token-at-all\r\n";
    for (request, expected) in [
        (local("DELETE", reset, "", ""), &admin),
        (local("DELETE", reset, wrong, ""), &admin),
        (local("GET", reset, "", ""), &admin),
        (local("GET", "/v1/hot", "", ""), &admin),
        (local("GET", "/v1/policies", "", ""), &admin),
        (local("POST", "/v1/check", "", lock_out), &check),
        (local("GET", "/metrics", "", ""), &metrics),
    ] {
        let (status, body) = raw([127, 0, 0, 1], tollgate, &request).await;
        let body: serde_json::Value = serde_json::from_str(&body).expect("problem+json");
        assert_eq!((status, &body), (401, expected), "{request:.40}");
    }
    // Nothing changed: the limited login is still limited, and the address
    // the caller tried to lock out logs in.
    assert_eq!(login([127, 0, 0, 40]).await, 429);
    assert_eq!(login([127, 0, 0, 41]).await, 200);

    // With the admin token the same reset works.
    let with_token = format!("Authorization: Bearer {ADMIN_TOKEN}\r\n");
    let (status, body) = raw(
        [127, 0, 0, 1],
        tollgate,
        &local("DELETE", reset, &with_token, ""),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).expect("JSON"),
        json!({"policy": "login", "reset": true, "had_state": true})
    );
    assert_eq!(login([127, 0, 0, 40]).await, 200);
}

#[test]
fn the_example_does_not_start_without_its_tokens() {
    let output = Command::new(tollgate_bin())
        .args(["validate", "--config"])
        .arg(example("nginx-tollgate.yaml"))
        .env("TOLLGATE_IDENTITY_KEY", IDENTITY_KEY)
        .env("TOLLGATE_CHECK_TOKEN", CHECK_TOKEN)
        .env_remove("TOLLGATE_ADMIN_TOKEN")
        .env_remove("TOLLGATE_METRICS_TOKEN")
        .output()
        .expect("run tollgate validate");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("server.require_tokens names admin, but TOLLGATE_ADMIN_TOKEN is not set"),
        "{stderr}"
    );
    assert!(!stderr.contains(CHECK_TOKEN), "{stderr}");
}
