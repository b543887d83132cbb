//! `client_ip` budgets belong to networks, not addresses: one IPv6 host
//! holds a whole /64, so ten of its addresses must not be ten budgets, and
//! an IPv4 client spelled `::ffff:a.b.c.d` is the same client. Each test
//! records the attack it stops, through `/v1/authorize` from a trusted
//! proxy that forwards the client's address.

mod support;

use support::TestServer;

const CONFIG: &str = r#"
server:
  trusted_proxies: [127.0.0.1]
policies:
  - name: login
    algorithm: fixed_window
    limit: 5
    window: 1h
    match: { methods: [POST], path: /login }
    identity: [client_ip]
  - name: signup
    algorithm: fixed_window
    limit: 5
    window: 1h
    match: { methods: [POST], path: /signup }
    identity: [{ client_ip: { ipv6_prefix: 56 } }]
"#;

/// A login (or `path`) from `client` as nginx forwards it: its status.
async fn attempt(server: &TestServer, path: &str, client: &str) -> u16 {
    reqwest::Client::new()
        .get(server.url("/v1/authorize"))
        .header("x-original-method", "POST")
        .header("x-original-uri", path)
        .header("x-forwarded-for", client)
        .send()
        .await
        .expect("request")
        .status()
        .as_u16()
}

async fn admitted(server: &TestServer, path: &str, clients: &[String]) -> usize {
    let mut admitted = 0;
    for client in clients {
        if attempt(server, path, client).await == 200 {
            admitted += 1;
        }
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_addresses_of_one_ipv6_64_share_one_budget() {
    let server = TestServer::start(CONFIG).await;
    let one_64: Vec<String> = (1..=10)
        .map(|i| format!("2001:db8:1:2:{i:x}::{i:x}"))
        .collect();
    assert_eq!(admitted(&server, "/login", &one_64).await, 5);
    // Another /64 of the same /48 is another client.
    let other: Vec<String> = vec!["2001:db8:1:3::1".into(); 6];
    assert_eq!(admitted(&server, "/login", &other).await, 5);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_keying_per_56_shares_one_budget_across_its_64s() {
    let server = TestServer::start(CONFIG).await;
    let one_56: Vec<String> = (0..10).map(|i| format!("2001:db8:1:2{i:02x}::1")).collect();
    assert_eq!(admitted(&server, "/signup", &one_56).await, 5);
    let next_56: Vec<String> = vec!["2001:db8:1:300::1".into()];
    assert_eq!(admitted(&server, "/signup", &next_56).await, 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipv4_client_spelled_as_mapped_ipv6_spends_the_same_budget() {
    let server = TestServer::start(CONFIG).await;
    let both: Vec<String> = ["198.51.100.77", "::ffff:198.51.100.77"]
        .iter()
        .cycle()
        .take(10)
        .map(|s| (*s).to_owned())
        .collect();
    assert_eq!(admitted(&server, "/login", &both).await, 5);
    // Its IPv4 neighbour is another client (/32).
    let neighbour: Vec<String> = vec!["198.51.100.78".into()];
    assert_eq!(admitted(&server, "/login", &neighbour).await, 1);
    server.stop().await;
}
