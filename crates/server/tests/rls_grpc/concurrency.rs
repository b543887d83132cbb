//! Many connections, many streams: concurrent calls answer exactly as the
//! same calls made one after another.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;

use crate::harness::*;
use crate::support::metric;

const PER_USER: &str = "domain: fleet
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 50
";

/// Every answer for each user, sorted: (code, remaining, ms until reset).
type Answers = std::collections::BTreeMap<String, Vec<(i32, u32, u64)>>;

fn record(answers: &mut Answers, user: String, r: &RateLimitResponse) {
    assert_eq!(r.statuses.len(), 1, "{r:?}");
    let s = &r.statuses[0];
    assert_eq!(r.overall_code, s.code);
    answers
        .entry(user)
        .or_default()
        .push((s.code, s.limit_remaining, reset_ms(s)));
}

/// 20 users × 80 calls: the first 50 of each user's calls are OK.
fn fleet_calls() -> Vec<String> {
    (0..80)
        .flat_map(|_| (0..20).map(|u| format!("user-{u}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_connections_and_concurrent_streams_answer_exactly_as_sequential_calls() {
    let calls = fleet_calls();
    // Sequentially, on one connection: the reference.
    let mut sequential = Answers::new();
    let mut one = Rls::envoy_only(&[PER_USER]).await;
    for user in &calls {
        let r = one.ask("fleet", vec![desc(&[("user", user)])]).await;
        record(&mut sequential, user.clone(), &r);
    }
    // 16 HTTP/2 connections, each carrying 16 calls at a time.
    let many = Rls::envoy_only(&[PER_USER]).await;
    let (connections, streams) = (16, 16);
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..connections {
        let channel = Channel::from_shared(many.grpc.clone())
            .expect("address")
            .connect()
            .await
            .expect("connect");
        for s in 0..streams {
            let mut client = RateLimitServiceClient::new(channel.clone());
            let mine: Vec<String> = calls
                .iter()
                .skip(c * streams + s)
                .step_by(connections * streams)
                .cloned()
                .collect();
            tasks.spawn(async move {
                let mut answered = Vec::with_capacity(mine.len());
                for user in mine {
                    let r = client
                        .should_rate_limit(request("fleet", vec![desc(&[("user", &user)])], 0))
                        .await
                        .expect("answered")
                        .into_inner();
                    answered.push((user, r));
                }
                answered
            });
        }
    }
    let mut concurrent = Answers::new();
    let mut n = 0;
    while let Some(joined) = tasks.join_next().await {
        for (user, r) in joined.expect("task") {
            record(&mut concurrent, user, &r);
            n += 1;
        }
    }
    assert_eq!(n, calls.len());
    for answers in sequential.values_mut().chain(concurrent.values_mut()) {
        answers.sort_unstable();
    }
    // Each user: 50 OK answers, remaining 49 down to 0 each once, then 30
    // over with nothing remaining; the frozen clock (T0) is 20 s into its
    // minute.
    let mut expected: Vec<(i32, u32, u64)> = (0..50).map(|r| (OK, r, 40_000)).collect();
    expected.extend((0..30).map(|_| (OVER, 0, 40_000)));
    expected.sort_unstable();
    assert_eq!(sequential.len(), 20);
    for (user, answers) in &sequential {
        assert_eq!(answers, &expected, "{user}, sequential");
    }
    assert_eq!(concurrent, sequential);
    let text = many.metrics();
    assert_eq!(
        metric(&text, "tollgate_rls_requests_total{code=\"ok\"}"),
        Some(1000.0)
    );
    assert_eq!(
        metric(&text, "tollgate_rls_requests_total{code=\"over_limit\"}"),
        Some(600.0)
    );
}
