//! What a concurrency permit costs a request, against one token-bucket
//! decision, in the same run, through the limiter a service runs (a
//! [`Configured`] config): on the embedded memory store and on Redis (a
//! redis-server the bench starts on a free port).
//!
//! - `token_bucket`: one decision, admitted;
//! - `acquire + release`: a permit taken, then given back, one after the
//!   other as a request does (awaited here; the layer spawns the release);
//! - `layer/…`: a whole in-process request through the layer (memory
//!   store), whose release the layer spawns when the body ends.
//!
//! After the Redis rows it prints the script calls each made per request
//! (Redis `INFO commandstats`).
//!
//! Run: `cargo bench -p tollgate-tower --bench permits -- --noplot`

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use criterion::{Criterion, criterion_group, criterion_main};
use http::Request;
use tokio::runtime::Runtime;
use tollgate_core::{Identity, SystemClock};
use tollgate_limiter::{Check, Limiter, Plan};
use tollgate_testkit::RedisServer;
use tollgate_tower::Configured;
use tower::ServiceExt;

/// Limits no run reaches: every decision admits.
const BUCKET: &str = r"
  - name: writes
    algorithm: token_bucket
    capacity: 1000000000
    refill: { tokens: 1000000000, per: 1s }
    identity: [{ header: X-Tenant }]
    on_store_failure: fail_closed";
const PERMITS: &str = r"
  - name: reports
    algorithm: concurrency
    limit: 10000
    lease: 1m
    identity: [{ header: X-Tenant }]
    on_store_failure: fail_closed";

fn write(dir: &Path, name: &str, store: &str, policies: &[&str]) -> PathBuf {
    let path = dir.join(name);
    let yaml = format!("store:\n  {store}\npolicies:{}\n", policies.concat());
    std::fs::write(&path, yaml).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

fn load(rt: &Runtime, path: &Path) -> Configured {
    rt.block_on(Configured::load(path, Arc::new(SystemClock)))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

async fn decide(limiter: &Limiter, plan: &Plan, who: &Identity) {
    let decided = limiter.decide(&[Check::new(plan, who, 1)]).await;
    assert!(decided.decisions.first().is_some_and(|d| d.allowed));
}

async fn acquire_release(limiter: &Limiter, plan: &Plan, who: &Identity) {
    let decided = limiter.decide(&[Check::new(plan, who, 1)]).await;
    let permit = decided.decisions.first().and_then(|d| d.permit);
    let Some(permit) = permit else {
        panic!("no permit: {:?}", decided.decisions);
    };
    assert!(matches!(limiter.release(plan, who, permit).await, Ok(true)));
}

fn app() -> Router {
    Router::new().route("/items", get(|| async { "{\"items\":[]}" }))
}

fn request() -> Request<Body> {
    Request::get("/items")
        .header("x-tenant", "acme")
        .body(Body::empty())
        .unwrap_or_default()
}

fn permits(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("a runtime: {e}"));
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("redis-server starts: {e}"));
    let dir = redis.dir();
    let who = Identity::composite([("x-tenant", "acme")]).unwrap_or_else(|_| unreachable!());
    let memory = "memory: { max_keys: 100000 }".to_owned();
    let on_redis = format!("redis: {{ url: \"{}\" }}", redis.url());
    let mut group = c.benchmark_group("permits");
    for (name, store) in [("memory", &memory), ("redis", &on_redis)] {
        let configured = load(&rt, &write(dir, name, store, &[BUCKET, PERMITS]));
        let rules = configured.rules();
        let (bucket, reports) = (rules[0].plan(), rules[1].plan());
        let limiter = configured.limiter();
        group.bench_function(format!("{name}/token_bucket"), |b| {
            b.to_async(&rt).iter(|| decide(limiter, bucket, &who));
        });
        group.bench_function(format!("{name}/acquire + release"), |b| {
            b.to_async(&rt)
                .iter(|| acquire_release(limiter, reports, &who));
        });
        if name == "redis" {
            let calls = |f: &dyn Fn() -> u64| {
                let before = redis.script_calls().unwrap_or(0);
                let n = f();
                (redis.script_calls().unwrap_or(0) - before) as f64 / n as f64
            };
            let per_bucket = calls(&|| {
                rt.block_on(async {
                    for _ in 0..1_000 {
                        decide(limiter, bucket, &who).await;
                    }
                });
                1_000
            });
            let per_permit = calls(&|| {
                rt.block_on(async {
                    for _ in 0..1_000 {
                        acquire_release(limiter, reports, &who).await;
                    }
                });
                1_000
            });
            println!(
                "script calls per request on Redis: token_bucket {per_bucket:.2}, acquire + release {per_permit:.2}"
            );
        }
    }
    let layered = |policy: &str| {
        let configured = load(&rt, &write(dir, "layer.yaml", &memory, &[policy]));
        let app = app().layer(configured.layer());
        (configured, app)
    };
    for (name, policy) in [("token_bucket", BUCKET), ("concurrency", PERMITS)] {
        let (_configured, app) = layered(policy);
        group.bench_function(format!("layer/{name}"), |b| {
            b.to_async(&rt).iter(|| {
                let app = app.clone();
                async move {
                    let answer = app.oneshot(request()).await;
                    assert!(answer.is_ok_and(|r| r.status() == 200));
                    // The body is gone: its release, spawned, runs now,
                    // inside the measured request.
                    tokio::task::yield_now().await;
                }
            });
        });
    }
    group.finish();
}

criterion_group!(benches, permits);
criterion_main!(benches);
