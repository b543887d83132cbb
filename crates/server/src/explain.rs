//! Policies described for people: `/v1/policies`, `tollgate validate` and
//! `tollgate explain`. What a policy promises (its scope, its bound, what it
//! does when the store fails) is stated here once, so every surface says
//! the same thing.

use std::fmt::Write as _;

use serde_json::{Value, json};
use tollgate_core::{Limits, Policy, format_duration_ms};

use tollgate_store::{OnStoreFailure, RedisConfig, local_policy};

use crate::config::{CostRule, ServeConfig, ServePolicy, StoreSettings};

/// `name: algorithm capacity C refill N per P` or `name: algorithm limit L per W`.
pub fn describe_policy(policy: &Policy) -> String {
    match policy.limits() {
        Limits::TokenBucket(r) | Limits::Gcra(r) => format!(
            "{}: {} capacity {} refill {} per {}",
            policy.name(),
            policy.algorithm(),
            r.capacity(),
            r.tokens(),
            format_duration_ms(r.per_ms())
        ),
        Limits::FixedWindow(w) | Limits::SlidingWindow(w) | Limits::SlidingLog(w) => format!(
            "{}: {} limit {} per {}",
            policy.name(),
            policy.algorithm(),
            w.limit(),
            format_duration_ms(w.window_ms())
        ),
    }
}

/// `tollgate explain`: for each policy its scope, the bound that scope
/// gives across tollgate processes, and what it does when the store fails.
pub fn explain(config: &ServeConfig, path: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "config {path} (hash {})", config.hash);
    let redis = match &config.store {
        StoreSettings::Memory { max_keys } => {
            let _ = writeln!(
                out,
                "store: memory, inside each tollgate process (at most {max_keys} keys)"
            );
            None
        }
        StoreSettings::Redis(redis) => {
            let _ = writeln!(
                out,
                "store: redis {}, shared by every tollgate process with prefix {:?} (timeout {})",
                topology(redis),
                redis.prefix,
                format_duration_ms(redis.timeout_ms)
            );
            Some(redis)
        }
    };
    for serve in &config.policies {
        let _ = writeln!(out, "\n{}", describe_policy(&serve.policy));
        match redis {
            None => {
                let _ = writeln!(
                    out,
                    "  scope: instance. Each tollgate process decides alone: across N processes at most N × the limit is admitted (use a redis store for one limit across processes)."
                );
                let _ = writeln!(
                    out,
                    "  on store failure: nothing can fail; the store is in the process."
                );
            }
            Some(redis) => {
                let _ = writeln!(
                    out,
                    "  scope: global. One Redis decides every request, atomically and on its own clock: exact across any number of tollgate processes{}.",
                    if redis.cluster.is_some() {
                        " (a request whose checks span Cluster slots may be rejected after some slots consumed, never admitted beyond a limit: docs/redis.md)"
                    } else {
                        ""
                    }
                );
                let (mode, while_degraded) = degraded(serve);
                let _ = writeln!(
                    out,
                    "  on store failure: {mode} (Redis down, or slower than {}): {while_degraded}.",
                    format_duration_ms(redis.timeout_ms)
                );
            }
        }
    }
    if !config.envoy_ratelimit_configs.is_empty() {
        let _ = writeln!(
            out,
            "\nenvoy_ratelimit_configs: {} file(s), decided on the same store with the same scope",
            config.envoy_ratelimit_configs.len()
        );
    }
    out
}

fn topology(redis: &RedisConfig) -> &'static str {
    if redis.url.is_some() {
        "standalone"
    } else if redis.cluster.is_some() {
        "cluster"
    } else {
        "sentinel"
    }
}

/// The failure mode's name and what it admits while the store is down.
fn degraded(serve: &ServePolicy) -> (&'static str, String) {
    match serve.on_store_failure {
        OnStoreFailure::FailOpen => (
            "fail_open",
            "every request is admitted: no limit while the shared store is down".into(),
        ),
        OnStoreFailure::FailClosed => (
            "fail_closed",
            "every request is rejected (429) while the shared store is down".into(),
        ),
        OnStoreFailure::Local { share_percent } => {
            let local = local_policy(&serve.policy, share_percent);
            let per = format_duration_ms(local.limits().window_ms());
            let limit = local.limits().limit();
            (
                "local",
                format!(
                    "each instance enforces {limit} per {per} alone: at most instances × {limit} while the shared store is down"
                ),
            )
        }
    }
}

pub fn policy_json(serve: &ServePolicy) -> Value {
    let policy = &serve.policy;
    let mut v = json!({
        "name": policy.name(),
        "algorithm": policy.algorithm().as_str(),
        "limit": policy.limits().limit(),
    });
    match policy.limits() {
        Limits::TokenBucket(r) | Limits::Gcra(r) => {
            v["capacity"] = json!(r.capacity());
            v["refill"] = json!({"tokens": r.tokens(), "per": format_duration_ms(r.per_ms())});
        }
        Limits::FixedWindow(w) | Limits::SlidingWindow(w) | Limits::SlidingLog(w) => {
            v["window"] = json!(format_duration_ms(w.window_ms()));
        }
    }
    let m = &serve.matcher;
    v["match"] = json!({
        "methods": m.methods,
        "path_prefix": m.path_prefix,
        "path": m.path.as_ref().map(|p| p.as_str()),
        "host": m.host,
    });
    // The options only when set, as a config would write them.
    if m.case_insensitive {
        v["match"]["case_insensitive"] = json!(true);
    }
    if m.trailing_slash == crate::matching::TrailingSlash::Ignore {
        v["match"]["trailing_slash"] = json!("ignore");
    }
    v["identity"] = json!(
        serve
            .identity
            .iter()
            .map(|p| p.describe())
            .collect::<Vec<_>>()
    );
    v["on_store_failure"] = failure_json(serve);
    v["cost"] = match &serve.cost {
        CostRule::Constant(c) => json!(c),
        CostRule::Header {
            name,
            min,
            max,
            default,
        } => {
            json!({"header": name, "min": min, "max": max, "default": default})
        }
    };
    v
}

pub fn store_json(store: &StoreSettings) -> Value {
    match store {
        StoreSettings::Memory { max_keys } => json!({"memory": {"max_keys": max_keys}}),
        // The topology and timeouts, never credentials.
        StoreSettings::Redis(config) => json!({"redis": {
            "topology": topology(config),
            "prefix": config.prefix,
            "timeout_ms": config.timeout_ms,
        }}),
    }
}

/// The failure mode and what it may cost while the shared store is down.
/// With the memory store nothing is shared, so nothing can degrade.
fn failure_json(serve: &ServePolicy) -> Value {
    let (mode, while_degraded) = degraded(serve);
    let mut v = json!({"mode": mode, "while_degraded": while_degraded});
    if let OnStoreFailure::Local { share_percent } = serve.on_store_failure {
        v["local_share_percent"] = json!(share_percent);
        v["local_limit"] = json!(local_policy(&serve.policy, share_percent).limits().limit());
    }
    v
}
