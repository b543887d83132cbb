//! TLS on the HTTP and gRPC listeners: exact answers over TLS, plain and
//! untrusting clients refused, tokens and TLS together.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Endpoint;

use crate::harness::*;
use crate::pki::*;
use crate::support::metric;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_over_https_gives_the_exact_decision_and_plain_http_is_refused() {
    let pki = Pki::new();
    let server = TlsServer::start(&pki, only_identity_key).await;
    let client = pki.client();
    let (status, _, body) = answer(check_call(&client, &server.http, None)).await;
    assert_eq!((status, body_json(&body)), (200, first_decision()));
    let (status, _, body) = answer(client.get(format!("{}/healthz", server.http))).await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    // Plain HTTP to the TLS port gets no answer.
    let plain = format!("http://{}", server.http.trim_start_matches("https://"));
    let refused = reqwest::Client::new()
        .get(format!("{plain}/healthz"))
        .send()
        .await;
    assert!(refused.is_err(), "plain HTTP was answered: {refused:?}");
    // A client that does not trust the CA does not get through either.
    let untrusting = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .build()
        .expect("client");
    let refused = untrusting
        .get(format!("{}/healthz", server.http))
        .send()
        .await;
    assert!(refused.is_err(), "an untrusted certificate was accepted");
    // The listener still serves after the failed handshakes.
    let (status, _, body) = answer(check_call(&client, &server.http, None)).await;
    assert_eq!(status, 200);
    assert_eq!(body_json(&body)["remaining"], 8);
    // Both failed handshakes are counted (by the worker, maybe just after
    // the client saw its connection close: polled, bounded).
    let mut failures = None;
    for _ in 0..200 {
        let (_, _, metrics) = answer(client.get(format!("{}/metrics", server.http))).await;
        failures = metric(&metrics, "tollgate_tls_handshake_failures_total");
        if failures == Some(2.0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(failures, Some(2.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_tls_together_over_https() {
    let pki = Pki::new();
    let server = TlsServer::start(&pki, all_tokens).await;
    let client = pki.client();
    assert_unauthorized(
        check_call(&client, &server.http, Some(WRONG_TOKEN)),
        "TOLLGATE_CHECK_TOKEN",
    )
    .await;
    let (status, _, body) = answer(check_call(&client, &server.http, Some(CHECK_TOKEN))).await;
    assert_eq!((status, body_json(&body)), (200, first_decision()));
    assert_unauthorized(
        client.get(format!("{}/metrics", server.http)),
        "TOLLGATE_METRICS_TOKEN",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_over_tls_answers_and_the_check_token_guards_should_rate_limit() {
    let pki = Pki::new();
    // Without a check token: answered over TLS.
    let open = TlsServer::start(&pki, only_identity_key).await;
    let mut client = pki.grpc(&open.grpc).await;
    let r = client
        .should_rate_limit(rls_request(None))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(rls_brief(&r), (Code::Ok as i32, 5, 4));
    // A plain-text gRPC client cannot talk to the TLS port.
    let plain = Endpoint::from_shared(format!("http://{}", open.grpc))
        .expect("endpoint")
        .connect()
        .await;
    match plain {
        Err(_) => {}
        Ok(channel) => {
            let refused = RateLimitServiceClient::new(channel)
                .should_rate_limit(rls_request(None))
                .await;
            assert!(refused.is_err(), "plain gRPC was answered: {refused:?}");
        }
    }

    // With the check token: refused without it or with a wrong one.
    let guarded = TlsServer::start(&pki, all_tokens).await;
    let mut client = pki.grpc(&guarded.grpc).await;
    for token in [None, Some(WRONG_TOKEN), Some(ADMIN_TOKEN)] {
        let status = client
            .should_rate_limit(rls_request(token))
            .await
            .expect_err("refused");
        assert_eq!(status.code(), tonic::Code::Unauthenticated, "{token:?}");
        assert_eq!(
            status.message(),
            "ShouldRateLimit needs the metadata `authorization: Bearer <token>` (TOLLGATE_CHECK_TOKEN)"
        );
    }
    let r = client
        .should_rate_limit(rls_request(Some(CHECK_TOKEN)))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(
        rls_brief(&r),
        (Code::Ok as i32, 5, 4),
        "the refusals spent nothing"
    );
    let (_, _, metrics) = answer(
        pki.client()
            .get(format!("{}/metrics", guarded.http))
            .bearer_auth(METRICS_TOKEN),
    )
    .await;
    assert_eq!(
        metric(
            &metrics,
            "tollgate_unauthorized_requests_total{endpoint=\"rls\"}"
        ),
        Some(3.0)
    );
}
