//! Policies described for people: `/v1/policies` and `tollgate validate`.

use serde_json::{Value, json};
use tollgate_core::{Limits, format_duration_ms};

use tollgate_store::{OnStoreFailure, local_policy};

use crate::config::{CostRule, ServePolicy, StoreSettings};

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
        CostRule::Header { name, max, default } => {
            json!({"header": name, "max": max, "default": default})
        }
    };
    v
}

pub fn store_json(store: &StoreSettings) -> Value {
    match store {
        StoreSettings::Memory { max_keys } => json!({"memory": {"max_keys": max_keys}}),
        // The topology and timeouts, never credentials.
        StoreSettings::Redis(config) => json!({"redis": {
            "topology": if config.url.is_some() { "standalone" } else if config.cluster.is_some() { "cluster" } else { "sentinel" },
            "prefix": config.prefix,
            "timeout_ms": config.timeout_ms,
        }}),
    }
}

/// The failure mode and what it may cost while the shared store is down.
/// With the memory store nothing is shared, so nothing can degrade.
fn failure_json(serve: &ServePolicy) -> Value {
    match serve.on_store_failure {
        OnStoreFailure::FailOpen => json!({
            "mode": "fail_open",
            "while_degraded": "every request is admitted: no limit while the shared store is down",
        }),
        OnStoreFailure::FailClosed => json!({
            "mode": "fail_closed",
            "while_degraded": "every request is rejected (429) while the shared store is down",
        }),
        OnStoreFailure::Local { share_percent } => {
            let local = local_policy(&serve.policy, share_percent);
            let per = format_duration_ms(local.limits().window_ms());
            json!({
                "mode": "local",
                "local_share_percent": share_percent,
                "local_limit": local.limits().limit(),
                "while_degraded": format!(
                    "each instance enforces {} per {per} alone: at most instances × {} while the shared store is down",
                    local.limits().limit(),
                    local.limits().limit()
                ),
            })
        }
    }
}
