//! What the gRPC tests share beside [`Rls`] (the harness every RLS test
//! target starts): a config of envoyproxy/ratelimit files alone, and the
//! readers of its answers.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::DescriptorStatus;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

pub use crate::support::rls::{OK, OVER, Rls};

pub const SECOND: i32 = 1;
pub const MINUTE: i32 = 2;
pub const HOUR: i32 = 3;
pub const DAY: i32 = 4;

impl Rls {
    /// A config holding only envoyproxy/ratelimit files (one per domain).
    pub async fn envoy_only(files: &[&str]) -> Self {
        let named: Vec<(String, &str)> = files
            .iter()
            .enumerate()
            .map(|(i, f)| (format!("ratelimit/config{i}.yaml"), *f))
            .collect();
        let refs: Vec<(&str, &str)> = named.iter().map(|(n, f)| (n.as_str(), *f)).collect();
        Self::start_files(
            "server: {watch_interval_ms: 0}\nenvoy_ratelimit_configs: [ratelimit]\n",
            &refs,
        )
        .await
    }

    pub async fn ask(
        &mut self,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
    ) -> RateLimitResponse {
        self.send(request(domain, descriptors, 0))
            .await
            .expect("answered")
    }

    pub async fn ask_hits(
        &mut self,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
        hits: u32,
    ) -> RateLimitResponse {
        self.send(request(domain, descriptors, hits))
            .await
            .expect("answered")
    }

    /// The first status of `n` identical one-descriptor requests' last answer.
    pub async fn spend(
        &mut self,
        domain: &str,
        entries: &[(&str, &str)],
        n: usize,
    ) -> RateLimitResponse {
        let mut last = None;
        for _ in 0..n {
            last = Some(self.ask(domain, vec![desc(entries)]).await);
        }
        last.expect("n > 0")
    }

    pub fn metrics(&self) -> String {
        self.app.metrics.encode()
    }
}

pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: hits,
    }
}

/// (code, requests_per_unit, unit, remaining) of a status; a status
/// without a limit reads (code, 0, 0, remaining).
pub fn brief(s: &DescriptorStatus) -> (i32, u32, i32, u32) {
    let (rpu, unit) = s
        .current_limit
        .as_ref()
        .map_or((0, 0), |l| (l.requests_per_unit, l.unit));
    (s.code, rpu, unit, s.limit_remaining)
}

pub fn reset_ms(s: &DescriptorStatus) -> u64 {
    let d = s
        .duration_until_reset
        .as_ref()
        .expect("duration_until_reset");
    u64::try_from(d.seconds).expect("seconds") * 1000
        + u64::try_from(d.nanos).expect("nanos") / 1_000_000
}
