//! Policies described for people: `/v1/policies`, `tollgate validate` and
//! `tollgate explain`. What a policy promises (its scope, its bound, what it
//! does when the store fails) is stated here once, so every surface says
//! the same thing.

use std::fmt::Write as _;

use serde_json::{Value, json};
use tollgate_core::{
    LOG_EXACT_ENTRIES, LOG_MAX_ENTRIES, Limits, Policy, format_duration_ms, log_bucket_ms,
    split_shares,
};

use tollgate_store::local_policy;

use crate::limiter::{MAX_REPLAYS, OnStoreFailure, RedisConfig};

use crate::config::{CostRule, ServeConfig, ServePolicy, StoreSettings};
use tollgate_config::Stores;

mod envoy;
mod leased_identities;
mod lines;
mod matching;
mod scope;
mod span;

pub use envoy::envoy_rules_json;
pub use lines::WIDTH as EXPLAIN_WIDTH;
pub use span::{SpanBound, span_bound};

/// `name: algorithm capacity C refill N per P` or `name: algorithm limit L per W`.
pub fn describe_policy(policy: &Policy) -> String {
    format!("{}: {}", policy.name(), policy.limits())
}

/// `tollgate explain`: for each policy its limits, its scope and the bound
/// that scope gives as a number in the policy's units (given the regions
/// and instances `regions:` describes) and over a span of time, what it
/// does when its store fails, the keys it writes and what an identity
/// costs. The text a reviewer reads before approving a config change, in
/// lines of at most [`EXPLAIN_WIDTH`] characters.
pub fn explain(config: &ServeConfig, path: &str) -> String {
    lines::wrap(&explain_text(
        config,
        path,
        &config.policies.iter().collect::<Vec<_>>(),
        true,
    ))
}

/// `tollgate explain --policy NAME`: the config's header and that policy
/// alone (no envoyproxy/ratelimit rules), as text or JSON.
pub fn explain_one(
    config: &ServeConfig,
    path: &str,
    name: &str,
    as_json: bool,
) -> Result<String, UnknownPolicy> {
    let Some(serve) = config.policies.iter().find(|p| p.declared.name() == name) else {
        return Err(UnknownPolicy {
            name: name.to_owned(),
            known: config
                .policies
                .iter()
                .map(|p| p.declared.name().to_owned())
                .collect(),
        });
    };
    Ok(if as_json {
        let mut v = explain_json_of(config, path, &[serve]);
        v["envoy_rules"] = json!([]);
        format!("{v}\n")
    } else {
        lines::wrap(&explain_text(config, path, &[serve], false))
    })
}

/// A name `explain --policy` was given that the config has no policy of.
#[derive(Debug)]
pub struct UnknownPolicy {
    name: String,
    known: Vec<String>,
}

impl std::fmt::Display for UnknownPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--policy: no policy named {:?}; ", self.name)?;
        if self.known.is_empty() {
            write!(f, "the config has no policies")
        } else {
            write!(f, "the config's policies: {}", self.known.join(", "))
        }
    }
}

impl std::error::Error for UnknownPolicy {}

/// The text of `policies`, after the config's header; the envoy rules
/// too when `rules`.
fn explain_text(
    config: &ServeConfig,
    path: &str,
    policies: &[&ServePolicy],
    rules: bool,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "config {path} (hash {})", config.hash);
    let deployment = &config.deployment;
    if !deployment.regions.is_empty() || deployment.region.is_some() {
        let regions: Vec<String> = deployment
            .regions
            .iter()
            .map(|r| {
                format!(
                    "{} ({} instance{})",
                    r.name,
                    r.instances,
                    plural(r.instances)
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "region: {}; regions: {}",
            deployment.region.as_deref().unwrap_or("not set"),
            if regions.is_empty() {
                "not listed".to_owned()
            } else {
                regions.join(", ")
            }
        );
    }
    for (role, settings) in &config.stores.list {
        let _ = writeln!(out, "store {role}: {}", store_text(settings));
    }
    if config.server.shadow_mode {
        let _ = writeln!(
            out,
            "shadow mode: every policy and envoy rule is decided and counted but never rejects (server.shadow_mode)"
        );
    }
    for serve in policies {
        let e = explain_policy(config, serve);
        let _ = writeln!(out, "\n{}", describe_policy(&serve.declared));
        let _ = writeln!(out, "  match: {}", matching::match_text(&serve.matcher));
        let _ = writeln!(
            out,
            "  identity: {}",
            matching::identity_text(&serve.identity)
        );
        if serve.shadow || config.server.shadow_mode {
            let _ = writeln!(out, "  mode: {}", shadow_text(serve));
        }
        let _ = writeln!(out, "  scope: {}", e.scope_text);
        let _ = writeln!(out, "  bound: {}", e.bound_text);
        let _ = writeln!(out, "  span: {}", e.span_text);
        if let Some(split) = &e.split_text {
            let _ = writeln!(out, "  split: {split}");
        }
        if let Some(lease) = &e.lease_text {
            let _ = writeln!(out, "  lease:");
            for item in lease {
                let _ = writeln!(out, "    {item}");
            }
        }
        if let Some(shards) = &e.shards_text {
            let _ = writeln!(out, "  shards: {shards}");
        }
        if let Some(hot) = &e.hot_lease_text {
            let _ = writeln!(out, "  hot_lease: {hot}");
        }
        if let Some(log) = &e.log_text {
            let _ = writeln!(out, "  log: {log}");
        }
        let _ = writeln!(out, "  on store failure: {}", e.failure_text);
        let _ = writeln!(out, "  state: {}", e.state_text);
        let _ = writeln!(out, "  request ids: {}", e.ids_text);
    }
    if rules && !config.envoy_ratelimit_configs.is_empty() {
        let _ = writeln!(
            out,
            "\nenvoy_ratelimit_configs: {} file(s), decided on the {} store",
            config.envoy_ratelimit_configs.len(),
            config.stores.list[config.stores.default_index()].0
        );
        for rule in &config.envoy.rules {
            let _ = writeln!(
                out,
                "  envoy rule {} {}: {}",
                rule.domain,
                rule.key,
                envoy::limit_text(rule)
            );
        }
    }
    out
}

/// What shadow mode means for a policy, and where it comes from.
fn shadow_text(serve: &ServePolicy) -> &'static str {
    if serve.shadow {
        "shadow (mode: shadow): decided, spent and counted, never rejects; its would-be rejections count under outcome=\"shadow\""
    } else {
        "shadow (server.shadow_mode): decided, spent and counted, never rejects; its would-be rejections count under outcome=\"shadow\""
    }
}

/// `tollgate explain --json`: the same, for CI to diff.
pub fn explain_json(config: &ServeConfig, path: &str) -> Value {
    explain_json_of(config, path, &config.policies.iter().collect::<Vec<_>>())
}

/// The JSON of `policies`, with the config's header and envoy rules.
fn explain_json_of(config: &ServeConfig, path: &str, policies: &[&ServePolicy]) -> Value {
    let policies: Vec<Value> = policies
        .iter()
        .map(|serve| {
            let e = explain_policy(config, serve);
            let mut v = policy_json(serve, &config.stores);
            v["scope"] = e.json;
            if config.server.shadow_mode {
                v["mode"] = json!("shadow");
            }
            v
        })
        .collect();
    json!({
        "config": path,
        "hash": config.hash,
        "region": config.deployment.region,
        "regions": config.deployment.regions.iter().map(|r| json!({
            "name": r.name, "instances": r.instances, "weight": r.weight,
        })).collect::<Vec<_>>(),
        "stores": stores_json(&config.stores),
        "policies": policies,
        "envoy_rules": envoy_rules_json(&config.envoy),
    })
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn store_text(settings: &StoreSettings) -> String {
    match settings {
        StoreSettings::Memory { max_keys } => {
            format!("memory, inside each tollgate process (at most {max_keys} keys)")
        }
        StoreSettings::Redis(redis) => format!(
            "redis {}, shared by every tollgate process that names it, prefix {:?} (timeout {})",
            topology(redis),
            redis.prefix,
            format_duration_ms(redis.timeout_ms)
        ),
    }
}

/// What one policy's scope promises, in words and as JSON.
struct Explained {
    scope_text: String,
    bound_text: String,
    span_text: String,
    split_text: Option<String>,
    lease_text: Option<Vec<String>>,
    shards_text: Option<String>,
    hot_lease_text: Option<String>,
    log_text: Option<String>,
    failure_text: String,
    state_text: String,
    ids_text: String,
    json: Value,
}

/// One policy explained: what its scope promises, then what holds whatever
/// the scope (shards, hot leases, a failing store, the state it keeps, its
/// request ids).
fn explain_policy(config: &ServeConfig, serve: &ServePolicy) -> Explained {
    let declared = &serve.declared;
    let (role, settings) = &config.stores.list[serve.store];
    let redis = match settings {
        StoreSettings::Redis(redis) => Some(redis.as_ref()),
        StoreSettings::Memory { .. } => None,
    };
    let promise = scope::promise(config, serve, role, redis);
    let (split_text, json_split) = promise.split;
    let (lease_text, json_lease) = promise.lease;
    let (span_text, json_span) = span::span(serve, &config.deployment);
    let (shards_text, json_shards) = shards(serve);
    let (hot_lease_text, json_hot_lease) = hot_lease(serve, config.deployment.instances());
    let (log_text, json_log) = log_bound(declared);
    let failure_text = failure_text(serve, role, settings, redis);
    let state_text = state_text(declared, redis);
    let ids_text = ids_text(serve, redis);
    let json = json!({
        "name": serve.scope.name(),
        "store": role,
        "bound": {
            "limit": declared.limits().limit(),
            "window_ms": declared.limits().window_ms(),
            "admitted_at_most": promise.at_most,
            "text": promise.bound_text,
            "span": json_span,
        },
        "split": json_split,
        "lease": json_lease,
        "shards": json_shards,
        "hot_lease": json_hot_lease,
        "log": json_log,
        "state": state_text,
        "request_ids": ids_text,
    });
    Explained {
        scope_text: promise.scope_text,
        bound_text: promise.bound_text,
        span_text,
        split_text,
        lease_text,
        shards_text,
        hot_lease_text,
        log_text,
        failure_text,
        state_text,
        ids_text,
        json,
    }
}

/// A sliding_log's bound on its length and the error that bound costs
/// (docs/design.md §3), in words and JSON; other algorithms keep no log.
fn log_bound(declared: &Policy) -> (Option<String>, Value) {
    let Limits::SlidingLog(w) = declared.limits() else {
        return (None, Value::Null);
    };
    let q = log_bucket_ms(w.window_ms());
    let text = if q == 1 {
        format!(
            "at most {LOG_MAX_ENTRIES} entries per identity, exact: a window under {LOG_EXACT_ENTRIES}ms has buckets of 1ms."
        )
    } else {
        format!(
            "at most {LOG_MAX_ENTRIES} entries per identity: exact while an identity's log holds fewer than {LOG_EXACT_ENTRIES}; beyond, a request is logged at the end of its {} bucket (the window / {LOG_EXACT_ENTRIES}, rounded up), so a unit counts up to {} longer than exact: never more than the limit in any {}, a rejection's Retry-After up to {} late.",
            format_duration_ms(q),
            format_duration_ms(q - 1),
            format_duration_ms(w.window_ms()),
            format_duration_ms(q - 1),
        )
    };
    let json = json!({
        "max_entries": LOG_MAX_ENTRIES,
        "exact_below_entries": LOG_EXACT_ENTRIES,
        "bucket_ms": q,
        "late_ms_at_most": q - 1,
        "text": text,
    });
    (Some(text), json)
}

/// What the policy does while its store cannot decide, and when a Redis
/// counts as down.
fn failure_text(
    serve: &ServePolicy,
    role: &str,
    settings: &StoreSettings,
    redis: Option<&RedisConfig>,
) -> String {
    let (mode, while_degraded) = degraded(serve, settings);
    match redis {
        None => format!("{while_degraded}."),
        Some(redis) => format!(
            "{mode} (its {role} store down, or slower than {}): {while_degraded}.",
            format_duration_ms(redis.timeout_ms)
        ),
    }
}

/// The state a policy keeps per identity: where, for how long, how large
/// (the bytes are docs/benchmarks.md's figures).
fn state_text(declared: &Policy, redis: Option<&RedisConfig>) -> String {
    let bytes = match declared.algorithm() {
        tollgate_core::Algorithm::Gcra => 72,
        _ => 120,
    };
    match redis {
        None => "one slot of the memory store per identity (128 bytes), forgotten once idle past its reset.".to_owned(),
        Some(redis) => format!(
            "key {}:{}:{}:{{<identity>}} with a TTL of the time to refill/forget it + {}; about {bytes} bytes per identity in Redis{}.",
            redis.prefix,
            declared.name(),
            declared.algorithm(),
            format_duration_ms(redis.ttl_margin_ms),
            if declared.algorithm() == tollgate_core::Algorithm::SlidingLog {
                format!(", plus each logged entry (at most {LOG_MAX_ENTRIES}, about 10 bytes each)")
            } else {
                String::new()
            }
        ),
    }
}

/// A policy's local leases for hot identities: the bound (unchanged) and
/// the error, in words and JSON.
fn hot_lease(serve: &ServePolicy, instances: Option<u64>) -> (Option<String>, Value) {
    let Some(rule) = serve.hot_lease else {
        return (None, Value::Null);
    };
    let early = match instances {
        Some(n) => format!(
            "up to {} units across the {n} instances `regions:` lists",
            n.saturating_mul(rule.max_block).saturating_sub(1)
        ),
        None => format!("fewer than N × {} units for N instances", rule.max_block),
    };
    let floor_ms = crate::limiter::REFUSED_FLOOR_MS;
    let takes_back = if rule.windowed {
        "a window's count takes it back while that window counts"
    } else {
        "a bucket takes back what could not have refilled since the block was taken"
    };
    let text = format!(
        "an identity deciding above {} a second on an instance takes a block of its budget in one store decision (what it spends in {}, at most {}) and admits from it locally; blocks are consumed before they are spent, so never admitted beyond the limit. What a block did not spend goes back to the key's state within {} ms of its end, as far as the state can take it exactly ({takes_back}); the rest is lost (at most {} an instance a term, and what an instance killed held). Over the limit, a block the store refuses is remembered until the store's own wait for it has passed (at least {floor_ms} ms): the identity's requests of up to that cost are rejected here until then, with the wait left as their retry (never early), and the store is asked at most once per wait. The error: a request can be rejected while other instances hold unspent blocks (up to {} each) and, after a refusal, while the store holds less than the refused block plus what was given back since — in all {early} — and for at most a round trip (or {floor_ms} ms) past the store's wait.",
        rule.above,
        format_duration_ms(rule.term_ms),
        rule.max_block,
        crate::limiter::GIVE_BACK_INTERVAL_MS,
        rule.max_block,
        rule.max_block,
    );
    let json = json!({
        "above_per_second": rule.above,
        "term_ms": rule.term_ms,
        "largest_block": rule.max_block,
        "given_back_within_ms": crate::limiter::GIVE_BACK_INTERVAL_MS,
        "lost_at_most_per_instance_and_term": rule.max_block,
        "refused_block_rejected_locally_for_at_least_ms": floor_ms,
        "rejected_while_store_holds_below_units": rule.max_block,
    });
    (Some(text), json)
}

/// A sharded policy's shares, its bound and its error, in words and JSON.
fn shards(serve: &ServePolicy) -> (Option<String>, Value) {
    let n = u64::from(serve.shards);
    if n < 2 {
        return (None, Value::Null);
    }
    let limit = serve.policy.limits().limit();
    let shares = split_shares(limit, &vec![1; usize::from(serve.shards)]);
    let largest = shares.iter().copied().max().unwrap_or(0);
    let early = (n - 2) * largest;
    let text = format!(
        "{n} sub-buckets per identity on distinct hash tags (a Cluster spreads them), shares {} summing to the limit {limit} (refill split exactly); a request tries one shard (round robin on each instance) and, rejected, one more: never admitted beyond the limit, and rejected early while at most {early} units (the other {} shards' shares) remain elsewhere; a request's cost must fit one shard ({} at least).",
        shares
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("/"),
        n - 2,
        shares.iter().copied().min().unwrap_or(0),
    );
    let json = json!({
        "count": n,
        "shares": shares,
        "admitted_at_most": limit,
        "rejected_while_left_elsewhere_at_most": early,
    });
    (Some(text), json)
}

/// What the policy's request ids promise and cost (docs/request-ids.md;
/// the bytes are docs/benchmarks.md's figures for UUIDs).
fn ids_text(serve: &ServePolicy, redis: Option<&RedisConfig>) -> String {
    let Some(rule) = serve.retry else {
        return "off (retry_window: off): a retry is charged again.".to_owned();
    };
    let window = format_duration_ms(rule.window_ms);
    let text = match redis {
        None => format!(
            "a retry inside {window} of its admission is charged once; at most {} ids per identity, each counted as a key toward max_keys.",
            rule.max_ids
        ),
        Some(redis) => format!(
            "a retry inside {window} of its admission is charged once; at most {} ids per identity in key {}:{}:{}:{{<identity>}}:ids with a TTL of {window}, about 170 bytes with one id and 57 for each more.",
            rule.max_ids,
            redis.prefix,
            serve.declared.name(),
            serve.declared.algorithm(),
        ),
    };
    if serve.client_request_ids {
        // The one setting that lets a client buy attempts: say it.
        return format!(
            "{text} Ids a client chooses (server.request_id_header) count too (client_request_ids: true), at most {MAX_REPLAYS} replays a charge."
        );
    }
    text
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

/// What a policy on the memory store does when "the store fails": there is
/// nothing to fail. `/v1/policies` and `explain` both say it in these words.
const IN_PROCESS: &str = "nothing can fail; the store is in the process";

/// The failure mode's name and what it admits while the store is down.
fn degraded(serve: &ServePolicy, store: &StoreSettings) -> (&'static str, String) {
    let mode = match serve.on_store_failure {
        OnStoreFailure::FailOpen => "fail_open",
        OnStoreFailure::FailClosed => "fail_closed",
        OnStoreFailure::Local { .. } => "local",
    };
    if let StoreSettings::Memory { .. } = store {
        return (mode, IN_PROCESS.to_owned());
    }
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

/// One policy as `/v1/policies` and `explain --json` show it; `stores` says
/// what its store failing can mean.
pub fn policy_json(serve: &ServePolicy, stores: &Stores) -> Value {
    let policy = &serve.policy;
    let mut v = json!({
        "name": policy.name(),
        "algorithm": policy.algorithm().as_str(),
    });
    matching::add_limits_json(&mut v, serve);
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
    if m.trailing_slash == tollgate_config::TrailingSlash::Ignore {
        v["match"]["trailing_slash"] = json!("ignore");
    }
    if m.format_suffix == tollgate_config::FormatSuffix::Ignore {
        v["match"]["format_suffix"] = json!("ignore");
    }
    v["identity"] = json!(
        serve
            .identity
            .iter()
            .map(|p| p.describe())
            .collect::<Vec<_>>()
    );
    v["on_store_failure"] = failure_json(serve, &stores.list[serve.store].1);
    // Only when set, as a config would write it.
    if serve.shadow {
        v["mode"] = json!("shadow");
    }
    match serve.retry {
        Some(rule) => {
            v["retry_window"] = json!(format_duration_ms(rule.window_ms));
            v["retry_ids"] = json!(rule.max_ids);
        }
        None => v["retry_window"] = json!("off"),
    }
    if serve.client_request_ids {
        v["client_request_ids"] = json!(true);
    }
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

/// Every store by role, as `/v1/policies` and `explain --json` show them.
pub fn stores_json(stores: &Stores) -> Value {
    Value::Object(
        stores
            .list
            .iter()
            .map(|(role, settings)| ((*role).to_owned(), store_json(settings)))
            .collect(),
    )
}

/// One store's settings as JSON, without credentials.
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
fn failure_json(serve: &ServePolicy, store: &StoreSettings) -> Value {
    let (mode, while_degraded) = degraded(serve, store);
    let mut v = json!({"mode": mode, "while_degraded": while_degraded});
    if let (OnStoreFailure::Local { share_percent }, StoreSettings::Redis(_)) =
        (serve.on_store_failure, store)
    {
        v["local_share_percent"] = json!(share_percent);
        v["local_limit"] = json!(local_policy(&serve.policy, share_percent).limits().limit());
    }
    v
}
