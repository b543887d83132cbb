//! A policy is one budget whichever door asks (docs/design.md §2): HTTP
//! `/v1/check`, forward auth's `/v1/authorize` and Envoy's RLS
//! `ShouldRateLimit` (a descriptor rule bound to the policy with
//! `tollgate: {policy: api}`) spend one identity's budget together, under
//! every scope, on a real `tollgate serve` and real redis-servers. The one
//! identity has three spellings that must be one: the JSON key
//! `{"tenant": "acme"}`, the header `Tenant: acme` under
//! `identity: [{header: Tenant}]` (a header part is named by the header in
//! lower case) and the descriptor entry `tenant=acme`.

mod support;

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use serde_json::Value;
use support::{TollgateProcess, explain_json, wall_ms};
use tollgate_testkit::RedisServer;
use tonic::transport::Channel;

/// The policy's limit: 8 an hour, so nothing renews while a test runs.
const LIMIT: u64 = 8;
const WINDOW_MS: u64 = 3_600_000;

/// One instance in region eu of two (eu weighs 2, us 1), the one policy in
/// the scope under test, and the envoyproxy/ratelimit rule bound to it.
fn config(scope: &str, redis: Option<(&str, &str)>) -> String {
    let stores = match redis {
        None => "stores:\n  local: memory\n".to_owned(),
        Some((regional, global)) => format!(
            "stores:\n  local: memory\n  regional: {{redis: {{url: \"{regional}\"}}}}\n  global: {{redis: {{url: \"{global}\"}}}}\n"
        ),
    };
    format!(
        r#"server: {{watch_interval_ms: 0, trusted_proxies: [127.0.0.1]}}
region: eu
regions: {{eu: {{weight: 2}}, us: {{weight: 1}}}}
{stores}envoy_ratelimit_configs: [shop.yaml]
policies:
  - name: api
    algorithm: fixed_window
    limit: {LIMIT}
    window: 1h
    scope: {scope}
    match: {{path_prefix: /api/}}
    identity: [{{header: Tenant}}]
"#
    )
}

const RULES: &str = "domain: shop\ndescriptors:\n  - key: tenant\n    tollgate: {policy: api}\n";

/// What this instance admits of one identity's budget, as `tollgate
/// explain --json` states it: the limit, a split's share for eu, or a
/// leased policy's floor for eu (a new ledger grants nothing for a term and
/// a rest, and the rest of an hour's window is an hour: the floor is the
/// whole share while the test runs).
fn enforced_here(explained: &Value) -> u64 {
    let policy = &explained["policies"][0];
    let scope = &policy["scope"];
    let number = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("a number: {scope}"));
    match scope["name"].as_str() {
        Some("split") => number(&scope["split"]["enforced_here"]),
        Some("leased") => {
            assert_eq!(scope["lease"]["rest_ms"], WINDOW_MS, "{scope}");
            number(&scope["lease"]["floor_here"])
        }
        _ => number(&policy["limit"]),
    }
}

/// The three doors, in the order calls rotate through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Door {
    Check,
    Authorize,
    Rls,
}

const DOORS: [Door; 3] = [Door::Check, Door::Authorize, Door::Rls];

/// One `tollgate serve`'s HTTP and gRPC listeners.
struct Doors {
    http: reqwest::Client,
    base: String,
    rls: RateLimitServiceClient<Channel>,
}

impl Doors {
    /// Asks `door` once for one unit of `tenant`'s budget: (admitted, the
    /// units the door says remain).
    async fn ask(&mut self, door: Door, tenant: &str) -> (bool, u64) {
        match door {
            Door::Check => self.check(tenant).await,
            Door::Authorize => self.authorize(tenant).await,
            Door::Rls => self.should_rate_limit(tenant).await,
        }
    }

    async fn check(&self, tenant: &str) -> (bool, u64) {
        let response = self
            .http
            .post(format!("{}/v1/check", self.base))
            .body(format!(
                r#"{{"policy":"api","key":{{"tenant":"{tenant}"}}}}"#
            ))
            .send()
            .await
            .expect("POST /v1/check");
        assert_eq!(response.status().as_u16(), 200);
        let answer: Value = response.json().await.expect("JSON");
        let allowed = answer["allowed"].as_bool();
        let remaining = answer["remaining"].as_u64();
        match (allowed, remaining, answer.get("degraded")) {
            (Some(allowed), Some(remaining), None) => (allowed, remaining),
            _ => panic!("/v1/check answered {answer}"),
        }
    }

    /// As nginx asks (server.forward_auth's default): the original method
    /// and URI in headers, from a trusted proxy.
    async fn authorize(&self, tenant: &str) -> (bool, u64) {
        let response = self
            .http
            .get(format!("{}/v1/authorize", self.base))
            .header("x-original-method", "GET")
            .header("x-original-uri", "/api/orders")
            .header("Tenant", tenant)
            .send()
            .await
            .expect("GET /v1/authorize");
        let status = response.status().as_u16();
        let field = response
            .headers()
            .get("ratelimit")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        // `"api";r=<remaining>;t=<seconds>`: the one matched policy.
        let remaining = field
            .strip_prefix(r#""api";r="#)
            .and_then(|rest| rest.split(';').next())
            .and_then(|r| r.parse().ok());
        match (status, remaining) {
            (200, Some(remaining)) => (true, remaining),
            (429, Some(remaining)) => (false, remaining),
            _ => panic!(
                "/v1/authorize answered {status} with RateLimit {field:?}: {}",
                response.text().await.unwrap_or_default()
            ),
        }
    }

    async fn should_rate_limit(&mut self, tenant: &str) -> (bool, u64) {
        let request = RateLimitRequest {
            domain: "shop".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "tenant".into(),
                    value: tenant.into(),
                }],
                ..RateLimitDescriptor::default()
            }],
            hits_addend: 0,
        };
        let answer = self
            .rls
            .should_rate_limit(request)
            .await
            .expect("ShouldRateLimit answered")
            .into_inner();
        let [status] = answer.statuses.as_slice() else {
            panic!("one status a descriptor: {answer:?}");
        };
        assert_eq!(status.code, answer.overall_code, "{answer:?}");
        let allowed = match Code::try_from(answer.overall_code) {
            Ok(Code::Ok) => true,
            Ok(Code::OverLimit) => false,
            _ => panic!("ShouldRateLimit answered {answer:?}"),
        };
        (allowed, u64::from(status.limit_remaining))
    }
}

/// Waits out the last 20 s of the policy's hour: a window that renewed
/// mid-test would admit a second budget (windows are aligned to the epoch;
/// every store on this machine dates them by its clock).
async fn clear_of_the_window_edge() {
    let into = wall_ms() % WINDOW_MS;
    if into > WINDOW_MS - 20_000 {
        tokio::time::sleep(Duration::from_millis(WINDOW_MS - into + 1_000)).await;
    }
}

/// `calls` calls of `tenant`, round robin over the doors from `/v1/check`:
/// (door, admitted, remaining) of each, in order.
async fn rotate(doors: &mut Doors, tenant: &str, calls: u64) -> Vec<(Door, bool, u64)> {
    let mut seen = Vec::new();
    for door in DOORS.into_iter().cycle().take(calls as usize) {
        let (admitted, remaining) = doors.ask(door, tenant).await;
        seen.push((door, admitted, remaining));
    }
    seen
}

/// What [`rotate`] must see when one budget of `budget` units stands
/// behind every door: the first `budget` calls admitted, counting down,
/// every later one rejected with nothing left, whichever door it came to.
fn one_budget(budget: u64, calls: u64) -> Vec<(Door, bool, u64)> {
    DOORS
        .into_iter()
        .cycle()
        .zip(0..calls)
        .map(|(door, i)| (door, i < budget, budget.saturating_sub(i + 1)))
        .collect()
}

/// The shared body: `scope` as the config spells it; `budget` what this
/// instance admits of one identity under it.
async fn is_one_budget_across_doors(scope: &str, budget: u64) {
    let redis = (scope != "instance").then(|| {
        (
            RedisServer::start().expect("eu's redis"),
            RedisServer::start().expect("the global redis"),
        )
    });
    let urls = redis.as_ref().map(|(r, g)| (r.url(), g.url()));
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("shop.yaml"), RULES).expect("write rules");
    let path = dir.path().join("tollgate.yaml");
    let yaml = config(scope, urls.as_ref().map(|(r, g)| (r.as_str(), g.as_str())));
    std::fs::write(&path, yaml).expect("write config");
    assert_eq!(
        enforced_here(&explain_json(&path, &[])),
        budget,
        "what explain states this instance admits"
    );
    let (process, grpc) = TollgateProcess::spawn_with_grpc(&path, &[("TOLLGATE_REGION", "eu")]);
    let mut doors = Doors {
        http: reqwest::Client::new(),
        base: process.base.clone(),
        rls: RateLimitServiceClient::connect(format!("http://{grpc}"))
            .await
            .expect("connect to ShouldRateLimit"),
    };
    clear_of_the_window_edge().await;

    // Three times the limit, round robin: the first `budget` calls are
    // admitted whichever door they came to, and then every door rejects.
    let calls = 3 * LIMIT;
    assert_eq!(
        rotate(&mut doors, "acme", calls).await,
        one_budget(budget, calls)
    );
    // Another tenant is another identity: its whole budget is still there,
    // and it too is one across the doors.
    assert_eq!(
        rotate(&mut doors, "globex", budget + 3).await,
        one_budget(budget, budget + 3)
    );
    drop(process);
}

macro_rules! one_budget_under_every_scope {
    ($($name:ident: $scope:expr => $budget:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            is_one_budget_across_doors($scope, $budget).await;
        }
    )*};
}

// The budget each scope leaves this instance (region eu: weight 2 of 3):
// the whole limit, except split's share (8 × 2/3 → 5 by the largest
// remainder) and leased's floor (75% of 8 = 6 floors, eu's 4).
one_budget_under_every_scope! {
    a_policy_is_one_budget_across_check_authorize_and_rls_under_scope_instance:
        "instance" => 8;
    a_policy_is_one_budget_across_check_authorize_and_rls_under_scope_region:
        "region" => 8;
    a_policy_is_one_budget_across_check_authorize_and_rls_under_scope_split:
        "split" => 5;
    a_policy_is_one_budget_across_check_authorize_and_rls_under_scope_leased:
        "{leased: {term: 1s, renew: 250ms, floor: 75%}}" => 4;
    a_policy_is_one_budget_across_check_authorize_and_rls_under_scope_global:
        "global" => 8;
}
