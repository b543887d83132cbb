//! `/v1/authorize` from the side of a client that wants more than its
//! limit: every spelling of a path, every family of forwarded headers, every
//! odd header and cost is limited or refused with a 400 — never a status a
//! proxy fails open on. (tests/nginx/ runs the same attempts through a
//! real nginx.)

mod support;

use std::net::IpAddr;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use support::TestServer;

const CONFIG: &str = r#"
server:
  trusted_proxies: [127.0.0.1]
policies:
  - name: login
    algorithm: fixed_window
    limit: 3
    window: 1h
    match: { methods: [POST], path: /login, case_insensitive: true, trailing_slash: ignore }
    identity: [path]
  - name: exact
    algorithm: fixed_window
    limit: 1
    window: 1h
    match: { path: /Exact }
    identity: [{ literal: all }]
  - name: api
    algorithm: fixed_window
    limit: 100
    window: 1h
    match: { path_prefix: /api/ }
    identity: [{ header: X-Tenant }]
    cost: { header: X-Cost, max: 10 }
  - name: peeks
    algorithm: fixed_window
    limit: 1
    window: 1h
    match: { path_prefix: /peek }
    identity: [{ literal: all }]
    cost: { header: X-Cost, min: 0, max: 1 }
  - name: by-ip
    algorithm: fixed_window
    limit: 100
    window: 1h
    match: { path_prefix: /ip }
    identity: [client_ip]
"#;

/// A forward-auth call as nginx makes it, from `from` (127.0.0.1 is the
/// trusted proxy).
async fn call(
    server: &TestServer,
    from: [u8; 4],
    method: &str,
    uri: &str,
    headers: &[(&str, &[u8])],
) -> reqwest::Response {
    let client = reqwest::Client::builder()
        .local_address(IpAddr::from(from))
        .build()
        .expect("client");
    let mut map = HeaderMap::new();
    map.append(
        "x-original-method",
        HeaderValue::from_str(method).expect("method"),
    );
    map.append("x-original-uri", HeaderValue::from_str(uri).expect("uri"));
    for (name, value) in headers {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).expect("name"),
            HeaderValue::from_bytes(value).expect("value"),
        );
    }
    client
        .get(server.url("/v1/authorize"))
        .headers(map)
        .send()
        .await
        .expect("request")
}

/// Status, and the problem's detail when there is one.
async fn outcome(response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    (status, body["detail"].as_str().unwrap_or("").to_owned())
}

const PROXY: [u8; 4] = [127, 0, 0, 1];

/// Header names and raw values, repeats and non-UTF-8 bytes allowed.
type Headers = Vec<(&'static str, &'static [u8])>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_a_path_is_matched_and_counted_as_the_router_sees_it() {
    let server = TestServer::start(CONFIG).await;
    let mut statuses = Vec::new();
    for uri in [
        "//login",
        "/./login",
        "/%6Cogin?next=/",
        "/LOGIN/",
        "/login;jsessionid=1",
    ] {
        let r = call(&server, PROXY, "POST", uri, &[]).await;
        if r.status() == 200 {
            assert_eq!(r.headers()["ratelimit-policy"], "\"login\";q=3;w=3600");
        }
        statuses.push((uri, r.status().as_u16()));
    }
    // One path identity (/login) for every spelling: three, then no more.
    assert_eq!(
        statuses,
        [
            ("//login", 200),
            ("/./login", 200),
            ("/%6Cogin?next=/", 200),
            ("/LOGIN/", 429),
            ("/login;jsessionid=1", 429),
        ]
    );
    // `..` is resolved before matching: this is the login, not the API.
    let r = call(
        &server,
        PROXY,
        "POST",
        "/api/../login",
        &[("x-tenant", b"t")],
    )
    .await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["ratelimit-policy"], "\"login\";q=3;w=3600");
    // A path above the root is the client's fault.
    assert_eq!(
        outcome(call(&server, PROXY, "POST", "/%2e%2e/login", &[]).await).await,
        (400, "the path climbs above the root with `..`".to_owned())
    );
    // Without the options, case counts: /exact is not /Exact.
    assert_eq!(
        call(&server, PROXY, "GET", "/Exact", &[]).await.status(),
        200
    );
    assert_eq!(
        call(&server, PROXY, "GET", "/%45xact", &[]).await.status(),
        429
    );
    let r = call(&server, PROXY, "GET", "/exact", &[]).await;
    assert_eq!(
        (r.status().as_u16(), r.headers().get("ratelimit")),
        (200, None)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costs_below_the_floor_and_ambiguous_identities_are_refused() {
    let server = TestServer::start(CONFIG).await;
    let cases: [(Headers, &str); 5] = [
        (
            vec![("x-tenant", b"t"), ("x-cost", b"0")],
            "policy api: header x-cost is 0, below the minimum 1",
        ),
        (
            vec![("x-tenant", b"t"), ("x-cost", b"1"), ("x-cost", b"2")],
            "header x-cost appears more than once: send it once",
        ),
        (
            vec![("x-tenant", b"d1"), ("x-tenant", b"d2")],
            "header x-tenant appears more than once: send it once",
        ),
        (
            vec![("x-tenant", b"caf\xe9")],
            "header x-tenant is not valid UTF-8",
        ),
        (
            vec![("x-tenant", b"t"), ("x-cost", b"")],
            "policy api: header x-cost is empty: send a whole number from 1 to 10, or leave it out",
        ),
    ];
    for (headers, detail) in cases {
        let r = call(&server, PROXY, "GET", "/api/orders", &headers).await;
        assert_eq!(outcome(r).await, (400, detail.to_owned()));
    }
    // A UTF-8 identity is an identity like any other.
    let cafe = [("x-tenant", "café".as_bytes())];
    let r = call(&server, PROXY, "GET", "/api/orders", &cafe).await;
    assert_eq!(r.status(), 200);
    // Only a config can make a request free.
    for _ in 0..3 {
        let r = call(&server, PROXY, "GET", "/peek", &[("x-cost", b"0")]).await;
        assert_eq!(r.status(), 200);
    }
    // A forwarded address that does not parse, read on the way to the client's.
    assert_eq!(
        outcome(
            call(
                &server,
                PROXY,
                "GET",
                "/ip",
                &[("x-forwarded-for", b"203.0.113.9, not-an-address")]
            )
            .await
        )
        .await,
        (
            400,
            "header x-forwarded-for: \"not-an-address\" is not an IP address".to_owned()
        )
    );
    // Nothing refused was charged: the tenant's bucket holds 1 of 100.
    let r = call(&server, PROXY, "GET", "/api/orders", &[("x-tenant", b"t")]).await;
    assert_eq!(r.headers()["ratelimit"], "\"api\";r=99;t=2800");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_trusted_proxy_describes_a_request_and_only_in_its_own_headers() {
    let server = TestServer::start(CONFIG).await;
    // An untrusted caller may not describe a request at all.
    assert_eq!(
        outcome(call(&server, [127, 0, 0, 2], "POST", "/login", &[]).await).await,
        (
            400,
            "header x-original-uri describes the request, but this caller (127.0.0.2) is not in server.trusted_proxies: only a trusted proxy may describe a request".to_owned()
        )
    );
    // The trusted proxy must: without X-Original-URI nothing would match.
    let client = reqwest::Client::new();
    let r = client
        .get(server.url("/v1/authorize"))
        .header("x-forwarded-uri", "/login")
        .header("x-forwarded-method", "POST")
        .send()
        .await
        .expect("request");
    assert_eq!(
        outcome(r).await,
        (
            400,
            "header x-original-uri is missing: server.forward_auth is nginx, so the proxy must send the original request's URI in it".to_owned()
        )
    );
    // An untrusted caller that describes nothing is its own request.
    let stranger = reqwest::Client::builder()
        .local_address(IpAddr::from([127, 0, 0, 3]))
        .build()
        .expect("client");
    let r = stranger
        .post(server.url("/v1/authorize/login"))
        .header("x-forwarded-uri", "/elsewhere")
        .send()
        .await
        .expect("request");
    assert_eq!(r.headers()["ratelimit"], "\"login\";r=2;t=2800");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_proxy_family_reads_its_own_headers_and_no_other() {
    let policy = "policies:\n  - {name: login, algorithm: fixed_window, limit: 5, window: 1h, match: {methods: [POST], path: /login}, identity: [{literal: all}]}\n";
    let server_for = |family: &str| {
        format!("server:\n  trusted_proxies: [127.0.0.1]\n  forward_auth: {family}\n{policy}")
    };
    let login = |r: &reqwest::Response| r.headers().get("ratelimit").is_some();

    let traefik = TestServer::start(&server_for("traefik")).await;
    let r = traefik
        .client
        .get(traefik.url("/v1/authorize"))
        .header("x-forwarded-method", "POST")
        .header("x-forwarded-uri", "/login")
        .header("x-original-uri", "/elsewhere")
        .send()
        .await
        .expect("request");
    assert!(
        login(&r),
        "traefik: X-Forwarded-* describe, X-Original-* are ignored"
    );
    traefik.stop().await;

    let envoy = TestServer::start(&server_for("envoy")).await;
    let r = envoy
        .client
        .post(envoy.url("/v1/authorize//login"))
        .header("x-original-uri", "/elsewhere")
        .header("x-forwarded-uri", "/elsewhere")
        .send()
        .await
        .expect("request");
    assert!(
        login(&r),
        "envoy: the call itself describes, no header does"
    );
    envoy.stop().await;

    let custom = TestServer::start(&server_for(
        "{uri: X-Rewritten-Uri, method: X-Rewritten-Method}",
    ))
    .await;
    let r = custom
        .client
        .get(custom.url("/v1/authorize"))
        .header("x-rewritten-method", "POST")
        .header("x-rewritten-uri", "/login")
        .send()
        .await
        .expect("request");
    assert!(login(&r), "custom header names");
    custom.stop().await;
}

/// A raw request with `count` extra headers; returns the status line's code.
async fn with_headers(server: &TestServer, count: usize) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = server.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut request = String::from(
        "GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-Original-Method: POST\r\nX-Original-URI: /login\r\nConnection: close\r\n",
    );
    for i in 0..count {
        request.push_str(&format!("X-Pad-{i}: v\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("read");
    let text = String::from_utf8_lossy(&answer);
    text.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_limits_are_configurable_and_beyond_them_is_a_431() {
    let server = TestServer::start(CONFIG).await;
    // The default, 256: 200 extra headers are decided (the login admits),
    // 300 are refused by the HTTP layer with a 4xx a proxy never fails open.
    assert_eq!(with_headers(&server, 200).await, 200);
    assert_eq!(with_headers(&server, 300).await, 431);
    server.stop().await;
    let roomy = CONFIG.replace(
        "trusted_proxies: [127.0.0.1]",
        "trusted_proxies: [127.0.0.1]\n  max_headers: 512",
    );
    let server = TestServer::start(&roomy).await;
    assert_eq!(with_headers(&server, 300).await, 200);
    assert_eq!(with_headers(&server, 600).await, 431);
    server.stop().await;
}
