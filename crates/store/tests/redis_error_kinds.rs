//! A store that cannot be reached says why: a refused port, a host name
//! that does not resolve and turned-down credentials are different pages,
//! and none of them reads as a timeout.

use tollgate_store::{RedisConfig, RedisStore, StoreError};
use tollgate_testkit::{RedisServer, free_port};

/// The kind of error a ping to `config`'s store answers.
async fn ping_kind(config: RedisConfig) -> &'static str {
    let store = RedisStore::connect(&config).await.expect("connects lazily");
    let error: StoreError = store.ping().await.expect_err("the store cannot answer");
    error.kind()
}

#[tokio::test]
async fn a_refused_port_is_refused_not_a_timeout() {
    let port = free_port().expect("a free port");
    let config = RedisConfig::standalone(format!("redis://127.0.0.1:{port}"));
    assert_eq!(ping_kind(config).await, "refused");
}

#[tokio::test]
async fn an_unresolvable_host_is_a_dns_failure() {
    let config = RedisConfig::standalone("redis://no-such-host.invalid:6379");
    assert_eq!(ping_kind(config).await, "dns");
}

#[tokio::test]
async fn a_missing_or_wrong_password_is_an_auth_failure() {
    let server =
        RedisServer::start_with(&["--requirepass", "right-password"]).expect("redis starts");
    assert_eq!(
        ping_kind(RedisConfig::standalone(server.url())).await,
        "auth"
    );
    let mut wrong = RedisConfig::standalone(server.url());
    wrong.password = Some("wrong-password".into());
    assert_eq!(ping_kind(wrong).await, "auth");
}
