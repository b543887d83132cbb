//! A small load client for Envoy's rate limit service: `ShouldRateLimit`
//! calls per second and latency percentiles against a running tollgate (or
//! any RLS v3 server). Used by bench/rls.sh.
//!
//!   rls_load ADDR [REQUESTS] [CONNECTIONS] [KEYS] [STREAMS]
//!
//! Every call sends domain `bench` with one descriptor (`user`, one of KEYS
//! values). CONNECTIONS HTTP/2 connections each carry STREAMS calls at a
//! time (default 1: one call in flight a connection, as wrk -c does over
//! HTTP/1.1; Envoy's cluster multiplexes many).

// A load generator: measuring wall time is its point.
#![allow(clippy::disallowed_methods)]

use std::time::Instant;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;

fn arg(args: &[String], i: usize, default: u64) -> Result<u64, String> {
    args.get(i).map_or(Ok(default), |a| {
        a.parse().map_err(|e| format!("argument {i} {a:?}: {e}"))
    })
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let addr = args
        .get(1)
        .cloned()
        .ok_or("usage: rls_load ADDR [REQUESTS] [CONNECTIONS] [KEYS] [STREAMS]")?;
    let requests = arg(&args, 2, 200_000)?;
    let concurrency = arg(&args, 3, 32)?.max(1);
    let keys = arg(&args, 4, 100_000)?.max(1);
    let streams = arg(&args, 5, 1)?.max(1);
    let per_worker = requests / (concurrency * streams);
    let mut workers = tokio::task::JoinSet::new();
    let started = Instant::now();
    for c in 0..concurrency {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .map_err(|e| e.to_string())?
            .connect()
            .await
            .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        for s in 0..streams {
            let w = c * streams + s;
            let channel = channel.clone();
            workers.spawn(async move {
                let mut client = RateLimitServiceClient::new(channel);
                let mut latencies = Vec::with_capacity(usize::try_from(per_worker).unwrap_or(0));
                let (mut ok, mut over, mut errors) = (0u64, 0u64, 0u64);
                for i in 0..per_worker {
                    let user = (w * per_worker + i) % keys;
                    let request = RateLimitRequest {
                        domain: "bench".into(),
                        descriptors: vec![RateLimitDescriptor {
                            entries: vec![Entry {
                                key: "user".into(),
                                value: user.to_string(),
                            }],
                            ..RateLimitDescriptor::default()
                        }],
                        hits_addend: 0,
                    };
                    let t = Instant::now();
                    match client.should_rate_limit(request).await {
                        Ok(r) if r.get_ref().overall_code == 1 => ok += 1,
                        Ok(_) => over += 1,
                        Err(_) => errors += 1,
                    }
                    latencies.push(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
                }
                (latencies, ok, over, errors)
            });
        }
    }
    let mut all = Vec::with_capacity(usize::try_from(requests).unwrap_or(0));
    let (mut ok, mut over, mut errors) = (0, 0, 0);
    while let Some(joined) = workers.join_next().await {
        let (l, o, v, e) = joined.map_err(|e| e.to_string())?;
        all.extend(l);
        ok += o;
        over += v;
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort_unstable();
    let pct = |p: usize| {
        all.get((all.len() * p / 100).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{:.0} calls/s  p50 {} us  p99 {} us  ({} calls, {concurrency} connections x {streams} streams, {keys} keys: {ok} ok, {over} over, {errors} errors)",
        all.len() as f64 / elapsed,
        pct(50),
        pct(99),
        all.len()
    );
    Ok(())
}
