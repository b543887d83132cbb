//! `/ui/state`: one JSON document of what the page shows, read from the
//! same in-process counters, gauges and summaries `/metrics` encodes (the
//! policies' decision counters, the stores' readings, the hot identities'
//! summaries, the leases' gauges). Counts are since start; the page turns
//! two of them a second apart into rates.

use serde_json::{Value, json};
use tollgate_core::Identity;
use tollgate_limiter::{HOT_IDENTITIES, HOT_WINDOW_MS, HotReport, HotSeries, Lease};

use crate::app::App;
use crate::live::{LiveConfig, LivePolicy};

/// The page's state now. Identities are named as the log and the hot
/// identity series name them (`hash:` and the keyed hash; raw only under
/// `hot_identity_metrics: raw`), or `null` without an identity key.
pub(crate) fn state(app: &App, live: &LiveConfig) -> Value {
    let now_ms = app.limiter.clock().now_ms();
    let limiter_metrics = &app.metrics.limiter;
    let hot = limiter_metrics.hot.report(now_ms);
    let shadow_hot = limiter_metrics.shadow_hot.report(now_ms);
    let name = |identity: &Identity| -> Value {
        let label = app.limiter.log_name(identity);
        if label == "-" {
            Value::Null
        } else {
            Value::String(label)
        }
    };
    let policies: Vec<Value> = live
        .policies
        .iter()
        .map(|policy| {
            let reports = if policy.plan.shadow() {
                &shadow_hot
            } else {
                &hot
            };
            let report = reports
                .iter()
                .find(|(p, _)| p == policy.serve.policy.name())
                .map(|(_, r)| r);
            policy_state(policy, report, &name)
        })
        .collect();
    // The stores' readings as a scrape refreshes them.
    app.limiter.maintain_gauges();
    let stores: Vec<Value> = limiter_metrics
        .stores
        .readings()
        .into_iter()
        .map(|store| {
            let label = |key: &str| {
                store
                    .labels
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, v)| v.clone())
            };
            json!({
                "role": label("role"),
                "region": label("region"),
                "shared": store.shared,
                "circuit": store.circuit,
                "keys": store.keys,
            })
        })
        .collect();
    let identities = match &live.config.decision_sampling.identity {
        HotSeries::Off => "unnamed",
        HotSeries::Hashed(_) => "hashed",
        HotSeries::Raw => "raw",
    };
    json!({
        "now_ms": now_ms,
        "config_hash": live.config.hash,
        "region": live.config.deployment.region,
        "identities": identities,
        "hot_window_ms": HOT_WINDOW_MS,
        "policies": policies,
        "stores": stores,
    })
}

/// One policy's counts since start, its hot identities and its lease.
fn policy_state(
    policy: &LivePolicy,
    hot: Option<&HotReport>,
    name: &dyn Fn(&Identity) -> Value,
) -> Value {
    let shadow = policy.plan.shadow();
    let counters = policy.plan.counters();
    let count = |get: fn(&tollgate_limiter::PolicyCounters) -> u64| counters.map_or(0, get);
    let list = |entries: &[(Identity, u64)]| -> Vec<Value> {
        entries
            .iter()
            .take(HOT_IDENTITIES)
            .map(|(identity, n)| json!({"identity": name(identity), "count": n}))
            .collect()
    };
    let hot_list = |pick: fn(&HotReport) -> &Vec<(Identity, u64)>| {
        hot.map_or_else(Vec::new, |r| list(pick(r)))
    };
    json!({
        "policy": policy.serve.policy.name(),
        "mode": if shadow { "shadow" } else { "enforced" },
        "scope": policy.serve.scope.name(),
        "limit": policy.serve.policy.limits().limit(),
        "allowed": count(|c| c.allowed.get()),
        "rejected": count(|c| c.rejected.get()),
        "shadow_rejected": count(|c| c.shadow.as_ref().map_or(0, |s| s.get())),
        "degraded": {
            "fail_open": count(|c| c.degraded.fail_open.get()),
            "fail_closed": count(|c| c.degraded.fail_closed.get()),
            "local": count(|c| c.degraded.local.get()),
            "total": count(|c| c.degraded.total()),
        },
        "hot": {
            "now": {
                "by_decisions": hot_list(|r| &r.current_decisions),
                "by_rejections": hot_list(|r| &r.current_rejections),
            },
            "last": {
                "by_decisions": hot_list(|r| &r.decisions),
                "by_rejections": hot_list(|r| &r.rejections),
            },
        },
        "lease": policy.plan.lease().map(|lease| lease_state(lease)),
    })
}

/// A leased policy's shares: every region's floor (the config's), the
/// spare, and this region's gauges (`tollgate_lease_*`).
fn lease_state(lease: &Lease) -> Value {
    let (floor, terms) = lease.terms();
    let counters = lease.counters();
    let floors: Vec<Value> = terms
        .floors
        .iter()
        .map(|(region, units)| json!({"region": region, "floor": units}))
        .collect();
    json!({
        "floor": floor,
        "spare": terms.spare,
        "floors": floors,
        "share": counters.share.get(),
        "demand": counters.demand.get(),
        "unleased": counters.unleased.get(),
        "identities": counters.identities.get(),
    })
}
