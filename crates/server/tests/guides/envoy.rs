//! examples/envoy.yaml with examples/envoy-tollgate.yaml, as shipped: a
//! real Envoy's rate limit filter asks a real `tollgate serve` for each
//! request, in front of a stub upstream that counts what reaches it.

use crate::proxy_stack::{Answer, client_at};
use crate::stacks::Stack;

async fn get(stack: &Stack, from: [u8; 4], forwarded: Option<&str>) -> Answer {
    let mut request = client_at(from).get(format!("http://127.0.0.1:{}/orders", stack.port(10000)));
    if let Some(forwarded) = forwarded {
        request = request.header("X-Forwarded-For", forwarded);
    }
    Answer::of(request).await
}

/// How many requests reached the stub upstream.
fn reached(stack: &Stack) -> usize {
    stack.upstream.as_ref().expect("the stub upstream").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_admits_five_a_client_then_answers_the_429_contract() {
    let mut stack = Stack::envoy().await;
    // A client's own X-Forwarded-For never names it (use_remote_address):
    // each request is 127.0.0.2's, whatever it claims.
    let claims = [None, Some("198.51.100.1"), Some("198.51.100.2"), None, None];
    for (sent, claim) in claims.into_iter().enumerate() {
        let answer = get(&stack, [127, 0, 0, 2], claim).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.body, "hello from upstream\n");
        assert_eq!(answer.one("ratelimit-policy"), "\"per-client\";q=5;w=3600");
        let state = answer.one("ratelimit");
        let remaining = format!("\"per-client\";r={};t=", 4 - sent);
        assert!(state.starts_with(&remaining), "{state}");
    }
    assert_eq!(reached(&stack), 5);

    let rejected = get(&stack, [127, 0, 0, 2], Some("198.51.100.3")).await;
    assert_eq!(rejected.status, 429);
    assert_eq!(rejected.one("x-envoy-ratelimited"), "true");
    assert_eq!(
        rejected.one("ratelimit-policy"),
        "\"per-client\";q=5;w=3600"
    );
    // The bucket is full again after 5 tokens' time, the next token comes
    // after one's (720 s): whenever the request came, the two differ by 4.
    let full: u64 = rejected
        .one("ratelimit")
        .strip_prefix("\"per-client\";r=0;t=")
        .and_then(|t| t.parse().ok())
        .expect("the RateLimit field");
    let retry: u64 = rejected.one("retry-after").parse().expect("seconds");
    assert_eq!(full - retry, 4 * 720);
    assert_eq!(reached(&stack), 5);

    // Another client has its own five.
    assert_eq!(get(&stack, [127, 0, 0, 3], None).await.status, 200);
    assert_eq!(reached(&stack), 6);

    // tollgate stopped: failure_mode_deny false serves unlimited.
    stack.stop_tollgate();
    let answer = get(&stack, [127, 0, 0, 2], None).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("ratelimit"), None);
    assert_eq!(reached(&stack), 7);
}
