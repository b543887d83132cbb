//! The attacks every shipped config is held to (crates/server/tests/
//! shipped_configs/), through Caddy: a format suffix on a login, a HEAD on
//! a GET limit, and a local process describing someone's login.

use std::net::{Ipv4Addr, SocketAddr};

use crate::harness::*;

fn caddy_addr(stack: &Stack) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, stack.caddy.port))
}

fn tollgate_addr(stack: &Stack) -> SocketAddr {
    let base = &stack.tollgate.as_ref().expect("running").base;
    base.strip_prefix("http://")
        .and_then(|a| a.parse().ok())
        .expect("tollgate's address")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_with_a_format_suffix_is_a_login_through_caddy() {
    let stack = Stack::start().await;
    let statuses = login_spellings([127, 0, 0, 41], caddy_addr(&stack)).await;
    assert_eq!(statuses, five_logins_then_429());
    assert_eq!(stack.upstream.count(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_spends_a_get_limit_through_caddy() {
    let dir = tempfile::tempdir().expect("temp dir");
    let stack = Stack::start_with(&with_reports_policy("caddy-tollgate.yaml", dir.path())).await;
    let statuses = heads_then_get([127, 0, 0, 42], caddy_addr(&stack)).await;
    assert_eq!(statuses, [200, 200, 429, 429]);
    assert_eq!(stack.upstream.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_caddy_with_the_authorize_token_may_describe_a_request() {
    let stack = Stack::start().await;
    let tollgate = tollgate_addr(&stack);
    for token in [None, Some("not-the-authorize-token"), Some(CHECK_TOKEN)] {
        assert_eq!(describe_a_login(tollgate, "203.0.113.9", token).await, 401);
    }
    let forged = "Tollgate-Authorization: Bearer forged-by-the-client\r\n";
    let (status, body) = raw([127, 0, 0, 43], caddy_addr(&stack), &post("/login", forged)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        describe_a_login(tollgate, "203.0.113.9", Some(AUTHORIZE_TOKEN)).await,
        200
    );
}
