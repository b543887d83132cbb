//! The attacks every shipped config is held to (crates/server/tests/
//! shipped_configs/), through nginx: a format suffix on a login, a HEAD
//! on a GET limit, a local process describing someone's login, and a
//! large answer head from tollgate.

use std::net::{Ipv4Addr, SocketAddr};

use crate::harness::*;

fn nginx_addr(stack: &Stack) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, stack.nginx.port))
}

fn tollgate_addr(stack: &Stack) -> SocketAddr {
    let base = &stack.tollgate.as_ref().expect("running").base;
    base.strip_prefix("http://")
        .and_then(|a| a.parse().ok())
        .expect("tollgate's address")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_with_a_format_suffix_is_a_login_through_nginx() {
    let stack = Stack::start().await;
    let statuses = login_spellings([127, 0, 0, 41], nginx_addr(&stack)).await;
    assert_eq!(statuses, five_logins_then_429());
    assert_eq!(stack.upstream.count(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_spends_a_get_limit_through_nginx() {
    let dir = tempfile::tempdir().expect("temp dir");
    let stack = Stack::start_with(&with_reports_policy("nginx-tollgate.yaml", dir.path())).await;
    let statuses = heads_then_get([127, 0, 0, 42], nginx_addr(&stack)).await;
    assert_eq!(statuses, [200, 200, 429, 429]);
    assert_eq!(stack.upstream.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_nginx_with_the_authorize_token_may_describe_a_request() {
    let stack = Stack::start().await;
    let tollgate = tollgate_addr(&stack);
    // A local process (any, from the trusted 127.0.0.1) cannot spend
    // 203.0.113.9's logins: no token, or a wrong one, is a 401.
    for token in [None, Some("not-the-authorize-token"), Some(CHECK_TOKEN)] {
        assert_eq!(describe_a_login(tollgate, "203.0.113.9", token).await, 401);
    }
    // nginx sends the token, over any a client sends: logins go on.
    let forged = "Tollgate-Authorization: Bearer forged-by-the-client\r\n";
    let (status, body) = raw([127, 0, 0, 43], nginx_addr(&stack), &post("/login", forged)).await;
    assert_eq!(status, 200, "{body}");
    // With the token, the description is believed, as nginx's is.
    assert_eq!(
        describe_a_login(tollgate, "203.0.113.9", Some(AUTHORIZE_TOKEN)).await,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_answer_head_from_tollgate_is_no_502_and_never_fails_open() {
    // 60 policies on /api/big with long names: tollgate's admission carries
    // RateLimit fields for each (some 9 KiB), its rejection Tollgate-Problem
    // besides — past nginx's default 4 KiB buffer.
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.yaml");
    let mut text =
        std::fs::read_to_string(example("nginx-tollgate.yaml")).expect("read the example");
    for i in 0..60 {
        text.push_str(&format!(
            "\n  - name: a-policy-whose-name-is-long-enough-to-fill-the-buffer-{i:03}\n    algorithm: fixed_window\n    limit: 1\n    window: 1h\n    match: {{ path_prefix: /api/big, case_insensitive: true }}\n    identity: [client_ip]\n"
        ));
    }
    std::fs::write(&config, text).expect("write the config");
    let stack = Stack::start_with(&config).await;
    let nginx = nginx_addr(&stack);
    let key = "X-API-Key: big-key\r\n";
    let (first, body) = raw([127, 0, 0, 44], nginx, &get("/api/big", key)).await;
    assert_eq!(first, 200, "{body}");
    // /api/ fails open on a 502: the rejection must arrive as a 429.
    let (second, body) = raw([127, 0, 0, 44], nginx, &get("/api/big", key)).await;
    assert_eq!(second, 429, "{body}\n{}", stack.nginx.logs());
    assert_eq!(stack.upstream.count(), 1);
    assert!(!stack.nginx.logs().contains("too big header"));
}
