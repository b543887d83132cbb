//! A policy as the server applies it: the core's policy plus the fields a
//! server adds (`scope`, `shards`, `hot_lease`, the request shaping, the
//! failure mode, request ids), each checked against the others.

use serde_json::{Map, Value};
use tollgate_core::{ConfigError, Policy, PolicySet, describe, node_path, parse_policy};
use tollgate_limiter::OnStoreFailure;

use crate::failure_mode::parse_failure_mode;
use crate::fields::field_error;
use crate::matching::Matcher;
use crate::regions::Deployment;
use crate::request_shaping::{CostRule, IdentityPart, parse_cost, parse_identity, parse_matcher};
use crate::retry::{self, RetryRule};
use crate::scope::{Scope, enforced, parse_scope};
use crate::stores::Stores;

/// Fields a policy may carry beyond the core's.
const SERVE_FIELDS: &[&str] = &[
    "scope",
    "shards",
    "hot_lease",
    "match",
    "identity",
    "cost",
    "on_store_failure",
    "local_share_percent",
    "retry_window",
    "retry_ids",
    "client_request_ids",
    "mode",
];

/// A policy as the server applies it.
#[derive(Debug, Clone)]
pub struct ServePolicy {
    /// What this instance enforces: the policy as declared, or under
    /// `split` its region's share.
    pub policy: Policy,
    /// The policy as the config declares it.
    pub declared: Policy,
    /// Where it is enforced, and so its bound.
    pub scope: Scope,
    /// Its store, in [`Stores::list`].
    pub store: usize,
    /// Which requests it limits (`match`).
    pub matcher: Matcher,
    /// Parts of the identity taken from a forwarded request.
    pub identity: Vec<IdentityPart>,
    /// What a request costs.
    pub cost: CostRule,
    /// What the policy does when the shared store cannot decide.
    pub on_store_failure: OnStoreFailure,
    /// Sub-buckets each identity's limit is split over (1: not sharded).
    pub shards: u16,
    /// Local leases for hot identities (off: `None`).
    pub hot_lease: Option<HotLeaseRule>,
    /// How it remembers request ids; `None`: `retry_window: off`.
    pub retry: Option<RetryRule>,
    /// `client_request_ids`: whether ids from `server.request_id_header`,
    /// chosen by the client, may replay its admissions (default false).
    pub client_request_ids: bool,
    /// `mode: shadow`: decided, spent and counted, never enforced
    /// (`server.shadow_mode` puts every policy in shadow besides).
    pub shadow: bool,
}

/// A policy's `hot_lease` settings: the limiter's own type.
pub use tollgate_limiter::HotLeaseRule;

/// The most shards a policy may split an identity over.
const MAX_SHARDS: u64 = 256;

/// `policies`: each entry a core policy (its name unique in the set)
/// and the server's fields on it.
pub(super) fn parse_policies(
    list: &[Value],
    stores: &Stores,
    deployment: &Deployment,
) -> Result<(PolicySet, Vec<ServePolicy>), ConfigError> {
    let mut set = PolicySet::default();
    let mut policies = Vec::with_capacity(list.len());
    for (index, entry) in list.iter().enumerate() {
        let fields = entry.as_object().ok_or_else(|| {
            ConfigError::Document(format!("policies[{index}] must be a mapping"))
                .at(node_path!["policies", index])
        })?;
        let policy = parse_policy(index, fields, SERVE_FIELDS)?;
        let serve = parse_serve_fields(policy.clone(), fields, stores, deployment)?;
        // Names are unique: the second of two is the one to point at.
        set.push(policy)
            .map_err(|e| e.at(node_path!["policies", index, "name"]))?;
        policies.push(serve);
    }
    Ok((set, policies))
}

/// The server's fields of `policy`, in the order their checks depend on:
/// a scope before the shards it excludes, the cost a shard must hold.
fn parse_serve_fields(
    policy: Policy,
    fields: &Map<String, Value>,
    stores: &Stores,
    deployment: &Deployment,
) -> Result<ServePolicy, ConfigError> {
    permits_scope(&policy, fields.get("scope"))?;
    let scope = parse_scope(&policy, fields.get("scope"), stores, deployment)?;
    let store = stores.index(scope.store_role()).unwrap_or_default();
    let matcher = parse_matcher(&policy, fields.get("match"))?;
    let identity = parse_identity(&policy, fields.get("identity"), &matcher)?;
    let cost = parse_cost(&policy, fields.get("cost"))?;
    permits_fit(&policy, &scope, &cost, fields)?;
    let on_store_failure = parse_failure_mode(fields)
        .map_err(|fault| field_error(&policy, fault.field, fault.reason))?
        .unwrap_or(OnStoreFailure::FailOpen);
    let shards = parse_shards(&policy, fields.get("shards"), &scope, &cost)?;
    let hot_lease = parse_hot_lease(&policy, fields.get("hot_lease"), &scope, shards)?;
    let retry = retry::parse_retry(&policy, fields)?;
    let client_request_ids = retry::parse_client_ids(&policy, fields, retry.as_ref())?;
    let shadow = parse_mode(&policy, fields.get("mode"))?;
    Ok(ServePolicy {
        retry,
        client_request_ids,
        shadow,
        policy: enforced(&policy, &scope, deployment),
        declared: policy,
        scope,
        store,
        matcher,
        identity,
        cost,
        on_store_failure,
        shards,
        hot_lease,
    })
}

/// What a concurrency policy cannot be combined with, and why: a permit
/// is acquired and released by id in the one store that holds its
/// identity's permits, one a request. Instance, region and global scopes
/// each have such a store; a split or leased share, a shard and a hot
/// lease's block divide a count of units, which permits are not.
fn permits_fit(
    policy: &Policy,
    scope: &Scope,
    cost: &CostRule,
    fields: &Map<String, Value>,
) -> Result<(), ConfigError> {
    if !policy.limits().holds_permits() {
        return Ok(());
    }
    let set = |name: &str| !matches!(fields.get(name), None | Some(Value::Null));
    let shards = set("shards") && fields.get("shards").and_then(Value::as_u64) != Some(1);
    let hot_lease = set("hot_lease");
    let refuse = |field: &str, why: &str| Err(field_error(policy, field, why));
    match scope {
        // Named in the file, refused before its settings were read; a
        // scope the file did not spell so is refused all the same.
        Scope::Split { .. } | Scope::Leased(_) => refuse(
            "scope",
            "a split or leased share cannot divide a concurrency limit; use instance, region or global",
        ),
        _ if shards => refuse(
            "shards",
            "cannot split a concurrency limit: a permit is released by its identity's one key, which shards would spread",
        ),
        _ if hot_lease => refuse(
            "hot_lease",
            "cannot take blocks of a concurrency limit: permits are released one by one, never given back as units",
        ),
        _ if *cost != CostRule::Constant(1) => refuse(
            "cost",
            "a concurrency check takes one permit a request: cost must be 1",
        ),
        _ => Ok(()),
    }
}

/// A concurrency policy's scope, refused before its settings are read
/// when it is split or leased (`scope: split`, `scope: {leased: …}`), so
/// the reason given is the one that matters.
fn permits_scope(policy: &Policy, value: Option<&Value>) -> Result<(), ConfigError> {
    if !policy.limits().holds_permits() {
        return Ok(());
    }
    let name = match value {
        Some(Value::String(name)) => name.as_str(),
        Some(Value::Object(m)) if m.len() == 1 => m.keys().next().map_or("", String::as_str),
        _ => "",
    };
    let why = match name {
        "split" => {
            "split cannot divide a concurrency limit: a region's fixed share of permits is not defined; use instance, region or global"
        }
        "leased" => {
            "leased cannot divide a concurrency limit: a leased share is a count of units, and permits are held and released by id; use instance, region or global"
        }
        _ => return Ok(()),
    };
    Err(field_error(policy, "scope", why))
}

/// `mode: enforce` (the default) or `shadow`: whether the policy is in
/// shadow mode.
fn parse_mode(policy: &Policy, value: Option<&Value>) -> Result<bool, ConfigError> {
    match value {
        None | Some(Value::Null) => Ok(false),
        Some(Value::String(mode)) if mode == "enforce" => Ok(false),
        Some(Value::String(mode)) if mode == "shadow" => Ok(true),
        Some(other) => Err(field_error(
            policy,
            "mode",
            format!("must be enforce or shadow, got {}", describe(other)),
        )),
    }
}

/// `hot_lease: {above, term}`: blocks for identities deciding above `above`
/// a second on one instance, spent for `term` (default 200 ms); a block is
/// at most a tenth of the limit.
fn parse_hot_lease(
    policy: &Policy,
    value: Option<&Value>,
    scope: &Scope,
    shards: u16,
) -> Result<Option<HotLeaseRule>, ConfigError> {
    let fields = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(m)) => m,
        Some(other) => {
            return Err(field_error(
                policy,
                "hot_lease",
                format!("must be {{above, term}}, got {}", describe(other)),
            ));
        }
    };
    if let Some(key) = fields
        .keys()
        .find(|k| !["above", "term"].contains(&k.as_str()))
    {
        return Err(field_error(
            policy,
            "hot_lease",
            format!("{key}: unknown field (expected: above, term)"),
        ));
    }
    let above = fields
        .get("above")
        .and_then(Value::as_u64)
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            field_error(
                policy,
                "hot_lease",
                "above: must be a whole number of decisions a second ≥ 1",
            )
        })?;
    let term_ms = match fields.get("term") {
        None | Some(Value::Null) => 200,
        Some(Value::String(text)) => tollgate_core::parse_duration_ms(text)
            .map_err(|e| field_error(policy, "hot_lease", format!("term: {e}")))?,
        Some(other) => {
            return Err(field_error(
                policy,
                "hot_lease",
                format!(
                    "term: must be a duration such as \"200ms\", got {}",
                    describe(other)
                ),
            ));
        }
    };
    if !(10..=10_000).contains(&term_ms) {
        return Err(field_error(
            policy,
            "hot_lease",
            format!(
                "term: {} is outside 10ms..=10s",
                tollgate_core::format_duration_ms(term_ms)
            ),
        ));
    }
    if shards > 1 || matches!(scope, Scope::Leased(_)) {
        return Err(field_error(
            policy,
            "hot_lease",
            "cannot be combined with shards or scope leased (each already splits the limit)",
        ));
    }
    let max_block = policy.limits().limit() / 10;
    if max_block < 2 {
        return Err(field_error(
            policy,
            "hot_lease",
            format!(
                "the limit {} is too small: a block is at most a tenth of it and at least 2",
                policy.limits().limit()
            ),
        ));
    }
    Ok(Some(HotLeaseRule {
        above,
        term_ms,
        max_block,
        windowed: !matches!(
            policy.limits(),
            tollgate_core::Limits::TokenBucket(_) | tollgate_core::Limits::Gcra(_)
        ),
    }))
}

/// `shards: N`: each identity's limit split over N sub-buckets on distinct
/// hash tags, each an integer share (they sum to the limit), so a Cluster
/// spreads one hot identity over its masters.
fn parse_shards(
    policy: &Policy,
    value: Option<&Value>,
    scope: &Scope,
    cost: &CostRule,
) -> Result<u16, ConfigError> {
    let n = match value {
        None | Some(Value::Null) => return Ok(1),
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=MAX_SHARDS).contains(n))
            .ok_or_else(|| {
                field_error(
                    policy,
                    "shards",
                    format!(
                        "must be a whole number 1..={MAX_SHARDS}, got {}",
                        describe(v)
                    ),
                )
            })?,
    };
    if n == 1 {
        return Ok(1);
    }
    if matches!(scope, Scope::Leased(_)) {
        return Err(field_error(
            policy,
            "shards",
            "cannot be combined with scope leased (a leased share is already split by region)",
        ));
    }
    let limit = policy.limits().limit();
    let weights = vec![1; n as usize];
    let smallest = (0..n as usize)
        .map(|i| tollgate_core::split_policy(policy, &weights, i).map(|p| p.limits().limit()))
        .collect::<Option<Vec<u64>>>()
        .and_then(|shares| shares.into_iter().min())
        .ok_or_else(|| {
            field_error(
                policy,
                "shards",
                format!("{n} shards of the limit {limit} leave a shard nothing: at most {limit}"),
            )
        })?;
    if let CostRule::Constant(c) = cost
        && *c > smallest
    {
        return Err(field_error(
            policy,
            "shards",
            format!(
                "a shard's share is {smallest}, below the cost {c}: a request must fit one shard"
            ),
        ));
    }
    u16::try_from(n).map_err(|_| field_error(policy, "shards", "too many"))
}
