//! A request's policies, identity and cost, read from `http` parts the way
//! every door reads them: a service's own request (a tower layer) and the
//! same request described by a trusted proxy key one budget alike.

use std::net::{IpAddr, SocketAddr};

use http::request::Parts;
use ipnet::IpNet;
use tollgate_config::Config;
use tollgate_http::{ForwardAuth, Forwarded, Peer, RequestFault, policy_check};

const CONFIG: &str = "policies:
  - name: writes
    algorithm: gcra
    capacity: 30
    refill: { tokens: 1, per: 1s }
    match: { methods: [POST], path_prefix: /orders, host: shop.example }
    identity:
      - header: X-Tenant
  - name: reads
    algorithm: gcra
    capacity: 30
    refill: { tokens: 1, per: 1s }
    match: { methods: [GET], path: /items }
    identity: [client_ip]
    cost: { header: X-Rows, max: 10 }
";

fn parts(method: &str, uri: &str, headers: &[(&str, &str)]) -> Parts {
    let mut request = http::Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(()).expect("a request").into_parts().0
}

fn peer(ip: &str) -> Peer {
    SocketAddr::new(ip.parse::<IpAddr>().expect("an address"), 4000).into()
}

fn proxies() -> Vec<IpNet> {
    vec!["10.0.0.0/8".parse().expect("a network")]
}

#[test]
fn a_services_own_request_matches_keys_and_costs_as_a_proxy_described_one() {
    let config = Config::parse(CONFIG, |_| None).expect("config");
    let (writes, reads) = (&config.policies[0], &config.policies[1]);
    let trusted = proxies();
    // HTTP/2: the host is the URI's authority, there is no Host field.
    let own = parts(
        "POST",
        "https://shop.example/orders/17",
        &[("x-tenant", "acme")],
    );
    let request = Forwarded::own(&own, peer("203.0.113.9"), &trusted).expect("a request");
    assert_eq!((request.method, request.host), ("POST", "shop.example"));
    let own_check = policy_check(writes, &request, None, 4096).expect("read");
    assert_eq!(policy_check(reads, &request, None, 4096), Ok(None));

    let call = parts(
        "GET",
        "/v1/authorize",
        &[
            ("x-original-method", "POST"),
            ("x-original-uri", "/orders/17?page=2"),
            ("host", "shop.example"),
            ("x-tenant", "acme"),
        ],
    );
    let described = Forwarded::read(
        &call.headers,
        call.method.as_str(),
        call.uri.path(),
        peer("10.0.0.1"),
        &ForwardAuth::nginx(),
        &trusted,
    )
    .expect("a request");
    let described_check = policy_check(writes, &described, None, 4096).expect("read");
    assert!(own_check.is_some());
    assert_eq!(own_check, described_check);
    let (_, cost) = own_check.expect("matched");
    assert_eq!(cost, 1);
}

#[test]
fn the_client_behind_a_trusted_proxy_is_keyed_and_charged_by_its_header() {
    let config = Config::parse(CONFIG, |_| None).expect("config");
    let reads = &config.policies[1];
    let trusted = proxies();
    let direct = parts("GET", "/items", &[("x-rows", "4")]);
    let direct = Forwarded::own(&direct, peer("203.0.113.9"), &trusted).expect("a request");
    let behind = parts(
        "GET",
        "/items",
        &[
            ("x-rows", "4"),
            ("x-forwarded-for", "203.0.113.9, 10.0.0.7"),
        ],
    );
    let behind = Forwarded::own(&behind, peer("10.0.0.1"), &trusted).expect("a request");
    assert_eq!(behind.client_ip(), Ok("203.0.113.9".parse().expect("ip")));
    let (direct, behind) = (
        policy_check(reads, &direct, None, 4096).expect("read"),
        policy_check(reads, &behind, None, 4096).expect("read"),
    );
    assert_eq!(direct, behind);
    assert_eq!(direct.map(|(_, cost)| cost), Some(4));
}

#[test]
fn a_missing_identity_part_or_a_bad_cost_is_a_fault_never_a_shared_bucket() {
    let config = Config::parse(CONFIG, |_| None).expect("config");
    let (writes, reads) = (&config.policies[0], &config.policies[1]);
    let trusted = proxies();
    let no_tenant = parts("POST", "http://shop.example/orders", &[]);
    let request = Forwarded::own(&no_tenant, peer("203.0.113.9"), &trusted).expect("a request");
    assert_eq!(
        policy_check(writes, &request, None, 4096),
        Err(RequestFault(
            "policy writes: identity part header x-tenant is missing from the request".into()
        ))
    );
    let too_many = parts("GET", "/items", &[("x-rows", "11")]);
    let request = Forwarded::own(&too_many, peer("203.0.113.9"), &trusted).expect("a request");
    assert_eq!(
        policy_check(reads, &request, None, 4096),
        Err(RequestFault(
            "policy reads: header x-rows is 11, above the maximum 10".into()
        ))
    );
}
