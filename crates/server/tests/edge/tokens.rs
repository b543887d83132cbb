//! Bearer tokens over HTTP: each guards its own endpoints and a refusal
//! spends nothing; without tokens every endpoint stays open; a bad token is
//! refused at load without being echoed.

use tollgate::ServeConfig;

use crate::harness::*;
use crate::support::{TestServer, metric};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tokens_every_endpoint_stays_open() {
    let server = TestServer::start_with_env(POLICIES, only_identity_key).await;
    let client = &server.client;
    for token in [None, Some(WRONG_TOKEN)] {
        let (status, challenge, body) = answer(check_call(client, &server.base, token)).await;
        assert_eq!((status, challenge), (200, None));
        assert_eq!(body_json(&body)["allowed"], true);
        for path in ["/v1/policies", "/metrics", "/healthz", "/readyz"] {
            let (status, _, _) = answer(with_token(client.get(server.url(path)), token)).await;
            assert_eq!(status, 200, "{path} with {token:?}");
        }
    }
    let metrics = server.text("/metrics").await;
    assert!(
        !metrics.contains("tollgate_unauthorized_requests_total{"),
        "{metrics}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_token_guards_the_decision_api_and_a_refusal_spends_nothing() {
    let server = TestServer::start_with_env(POLICIES, |name| {
        (name == "TOLLGATE_CHECK_TOKEN")
            .then(|| CHECK_TOKEN.to_owned())
            .or_else(|| only_identity_key(name))
    })
    .await;
    let client = &server.client;
    let var = "TOLLGATE_CHECK_TOKEN";
    assert_unauthorized(check_call(client, &server.base, None), var).await;
    assert_unauthorized(check_call(client, &server.base, Some(WRONG_TOKEN)), var).await;
    // The token, but not as a bearer token.
    assert_unauthorized(
        check_call(client, &server.base, None).header("authorization", CHECK_TOKEN),
        var,
    )
    .await;
    assert_unauthorized(
        check_call(client, &server.base, None).basic_auth("user", Some(CHECK_TOKEN)),
        var,
    )
    .await;
    // Another endpoint's token does not open this one.
    assert_unauthorized(check_call(client, &server.base, Some(ADMIN_TOKEN)), var).await;
    let (status, challenge, body) =
        answer(check_call(client, &server.base, Some(CHECK_TOKEN))).await;
    assert_eq!((status, challenge), (200, None));
    assert_eq!(
        body_json(&body),
        first_decision(),
        "the five refusals took nothing from the bucket"
    );
    // The other endpoints stay open.
    for path in ["/v1/policies", "/metrics", "/healthz", "/readyz"] {
        let (status, _, _) = answer(client.get(server.url(path))).await;
        assert_eq!(status, 200, "{path}");
    }
    let metrics = server.text("/metrics").await;
    assert_eq!(
        metric(
            &metrics,
            "tollgate_unauthorized_requests_total{endpoint=\"check\"}"
        ),
        Some(5.0)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_and_metrics_tokens_guard_their_own_endpoints_only() {
    let server = TestServer::start_with_env(POLICIES, |name| {
        matches!(name, "TOLLGATE_ADMIN_TOKEN" | "TOLLGATE_METRICS_TOKEN")
            .then(|| all_tokens(name))
            .flatten()
            .or_else(|| only_identity_key(name))
    })
    .await;
    let client = &server.client;
    let get = |path: &str, token: Option<&str>| with_token(client.get(server.url(path)), token);
    for (path, var, right, other) in [
        (
            "/v1/policies",
            "TOLLGATE_ADMIN_TOKEN",
            ADMIN_TOKEN,
            METRICS_TOKEN,
        ),
        (
            "/metrics",
            "TOLLGATE_METRICS_TOKEN",
            METRICS_TOKEN,
            ADMIN_TOKEN,
        ),
    ] {
        assert_unauthorized(get(path, None), var).await;
        assert_unauthorized(get(path, Some(WRONG_TOKEN)), var).await;
        assert_unauthorized(get(path, Some(other)), var).await;
        let (status, challenge, _) = answer(get(path, Some(right))).await;
        assert_eq!((status, challenge), (200, None), "{path}");
    }
    let (_, _, policies) = answer(get("/v1/policies", Some(ADMIN_TOKEN))).await;
    assert_eq!(body_json(&policies)["policies"][0]["name"], "api");
    // No check token: the decision API is open, the probes always are.
    let (status, _, body) = answer(check_call(client, &server.base, None)).await;
    assert_eq!((status, body_json(&body)), (200, first_decision()));
    assert_eq!(server.text("/healthz").await, "ok\n");
    let (status, _, _) = answer(get("/readyz", None)).await;
    assert_eq!(status, 200);
    let (_, _, metrics) = answer(get("/metrics", Some(METRICS_TOKEN))).await;
    for (endpoint, count) in [("policies", 3.0), ("metrics", 3.0)] {
        assert_eq!(
            metric(
                &metrics,
                &format!("tollgate_unauthorized_requests_total{{endpoint=\"{endpoint}\"}}")
            ),
            Some(count),
            "{endpoint}"
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_auth_is_not_token_guarded_its_authorization_is_the_clients() {
    let server = TestServer::start_with_env(POLICIES, all_tokens).await;
    // The bearer token of the client being limited is its identity, not a
    // credential for tollgate: /v1/authorize answers with or without one.
    let (status, challenge, _) = answer(
        server
            .client
            .get(server.url("/v1/authorize"))
            .bearer_auth("a-client-of-the-proxied-api"),
    )
    .await;
    assert_eq!((status, challenge), (200, None));
    let (status, _, body) = answer(server.client.get(server.url("/v1/authorize"))).await;
    assert_eq!(status, 400, "the bearer identity part is missing: {body}");
    server.stop().await;
}

#[test]
fn empty_or_short_tokens_are_refused_at_load_without_being_echoed() {
    let parse = |var: &'static str, value: &'static str| {
        ServeConfig::parse(POLICIES, move |name| {
            (name == var)
                .then(|| value.to_owned())
                .or_else(|| only_identity_key(name))
        })
        .expect_err("refused")
        .to_string()
    };
    assert_eq!(
        parse("TOLLGATE_CHECK_TOKEN", ""),
        "config: TOLLGATE_CHECK_TOKEN is set but empty (unset it to leave the endpoint open)"
    );
    assert_eq!(
        parse("TOLLGATE_ADMIN_TOKEN", "short-secret"),
        "config: TOLLGATE_ADMIN_TOKEN is shorter than 16 bytes; use a longer, random token"
    );
    assert_eq!(
        parse("TOLLGATE_METRICS_TOKEN", "a token with spaces in it"),
        "config: TOLLGATE_METRICS_TOKEN must be printable ASCII without spaces (it is sent in an `Authorization: Bearer` header)"
    );
    // `tollgate validate` refuses the same, through the same load.
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, POLICIES).expect("write");
    let (code, stdout, stderr) = validate(&config, &[("TOLLGATE_ADMIN_TOKEN", "short-secret")]);
    assert_eq!((code, stdout.as_str()), (1, ""));
    assert_eq!(
        stderr,
        format!(
            "tollgate: {}: config: TOLLGATE_ADMIN_TOKEN is shorter than 16 bytes; use a longer, random token\n",
            config.display()
        )
    );
    assert!(!stderr.contains("short-secret"));
}
