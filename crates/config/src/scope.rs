//! Where a policy's limit is enforced (docs/design.md §7): the policy's
//! `scope`, the store it decides on, and what this instance enforces of it
//! (under `split`, its region's share of the deployment's limit).
//!
//! A config names its stores by role — `local` (memory: this instance),
//! `regional` (this region's Redis; one config for every region can name
//! each region's), `global` (one Redis for every region) — and each policy
//! its scope; a scope decides on the store of its role. Today's single
//! `store:` is still read: a memory store is `local` (policies `instance`),
//! a Redis store `global` (policies `global`).

use serde_json::{Map, Value};
use tollgate_core::{
    ConfigError, Policy, describe, format_duration_ms, parse_duration_ms, split_policy,
    split_shares, unknown_field,
};

use crate::fields::field_error;
use crate::regions::{Deployment, REGION_ENV, valid_region};
use crate::stores::Stores;

/// Where a policy is enforced, and so what it can overshoot by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Each instance alone, on its memory store: N instances admit at most
    /// N × the limit.
    Instance,
    /// Each region alone, on its regional store: R regions admit at most
    /// R × the limit.
    Region,
    /// Each region a fixed integer share of the limit on its regional
    /// store: at most the limit together; a quiet region strands its share.
    Split {
        /// `(region, weight)` in order; this instance's share is its
        /// region's.
        weights: Vec<(String, u64)>,
    },
    /// Each region a share leased from a ledger in the global store,
    /// decided on its regional store: at most the limit together.
    Leased(Leased),
    /// Every decision on the global store: exact on a standalone Redis or
    /// a Cluster.
    Global,
}

use tollgate_limiter::DEFAULT_MAX_IDENTITIES;
/// A `leased` policy's terms: the limiter's own type.
pub use tollgate_limiter::Leased;

/// Defaults of `scope: leased`.
const LEASE_TERM_MS: u64 = 10_000;
/// The floors' default share of the limit: half stays put, half moves.
const LEASE_FLOOR_PERCENT: u64 = 50;
/// The shortest term: renewals are round trips to another region.
const MIN_TERM_MS: u64 = 200;
/// The longest term (a day).
const MAX_TERM_MS: u64 = 86_400_000;
/// The most `leased.identities` an instance may lease for at once.
const MAX_LEASED_IDENTITIES: u64 = 100_000;

/// The time `policy` takes to forget a use: a bucket's refill from empty
/// to full, a fixed window or a log's window, two windows for a sliding
/// window (its estimate weighs the previous one). Units one region let go
/// rest this long before another may spend them, so no interval of the
/// policy's own bound sees them spent twice.
pub fn rest_ms(policy: &Policy) -> u64 {
    policy.limits().rest_ms()
}

impl Scope {
    /// As the config spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Scope::Instance => "instance",
            Scope::Region => "region",
            Scope::Split { .. } => "split",
            Scope::Leased(_) => "leased",
            Scope::Global => "global",
        }
    }

    /// The role of the store this scope decides on.
    pub fn store_role(&self) -> &'static str {
        match self {
            Scope::Instance => "local",
            Scope::Region | Scope::Split { .. } | Scope::Leased(_) => "regional",
            Scope::Global => "global",
        }
    }
}

/// A policy's `scope` field (absent: the one store's natural scope).
pub(super) fn parse_scope(
    policy: &Policy,
    value: Option<&Value>,
    stores: &Stores,
    deployment: &Deployment,
) -> Result<Scope, ConfigError> {
    let scope = match value {
        None | Some(Value::Null) => natural_scope(policy, stores)?,
        Some(Value::String(name)) => named_scope(policy, name, deployment)?,
        Some(Value::Object(m)) if m.len() == 1 && m.contains_key("leased") => {
            leased_scope(policy, m.get("leased"), deployment)?
        }
        Some(Value::Object(m)) if m.len() == 1 && m.contains_key("split") => {
            split_scope(policy, m.get("split"))?
        }
        Some(other) => {
            return Err(scope_error(
                policy,
                format!(
                    "must be instance, region, split, {{split: {{REGION: WEIGHT}}}}, leased, {{leased: {{term, renew, floor}}}} or global, got {}",
                    describe(other)
                ),
            ));
        }
    };
    check_stores(policy, &scope, stores)?;
    if let Scope::Split { weights } = &scope {
        check_split(policy, weights, deployment)?;
    }
    Ok(scope)
}

/// A fault in the policy's `scope` field.
fn scope_error(policy: &Policy, reason: String) -> ConfigError {
    field_error(policy, "scope", reason)
}

/// No `scope`: the scope of the one store's role; a config naming several
/// stores must say.
fn natural_scope(policy: &Policy, stores: &Stores) -> Result<Scope, ConfigError> {
    match stores.list.as_slice() {
        [(role, _)] => Ok(match *role {
            "local" => Scope::Instance,
            "regional" => Scope::Region,
            _ => Scope::Global,
        }),
        _ => Err(scope_error(
            policy,
            format!(
                "missing: this config names several stores ({}), so say which scope (instance, region, split, leased, global)",
                stores
                    .list
                    .iter()
                    .map(|(r, _)| *r)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// `scope: NAME`; `split` weighs the regions by `regions:`, `leased` takes
/// its default terms.
fn named_scope(policy: &Policy, name: &str, deployment: &Deployment) -> Result<Scope, ConfigError> {
    Ok(match name {
        "instance" => Scope::Instance,
        "region" => Scope::Region,
        "global" => Scope::Global,
        "split" => Scope::Split {
            weights: deployment
                .regions
                .iter()
                .map(|r| (r.name.clone(), r.weight))
                .collect(),
        },
        "leased" => Scope::Leased(
            parse_leased(policy, None, deployment).map_err(|r| scope_error(policy, r))?,
        ),
        other => {
            return Err(scope_error(
                policy,
                format!(
                    "unknown scope {other:?} (expected: instance, region, split, leased, global)"
                ),
            ));
        }
    })
}

/// `scope: {leased: {term, renew, floor}}` (or `{leased: null}`).
fn leased_scope(
    policy: &Policy,
    value: Option<&Value>,
    deployment: &Deployment,
) -> Result<Scope, ConfigError> {
    let terms = match value {
        Some(Value::Object(terms)) => Some(terms),
        Some(Value::Null) => None,
        Some(other) => {
            return Err(scope_error(
                policy,
                format!(
                    "leased: must be {{term, renew, floor}}, got {}",
                    describe(other)
                ),
            ));
        }
        None => None,
    };
    let leased = parse_leased(policy, terms, deployment).map_err(|r| scope_error(policy, r))?;
    Ok(Scope::Leased(leased))
}

/// `scope: {split: {REGION: WEIGHT}}`.
fn split_scope(policy: &Policy, value: Option<&Value>) -> Result<Scope, ConfigError> {
    let Some(Value::Object(weights)) = value else {
        return Err(scope_error(
            policy,
            "split: must map regions to weights".into(),
        ));
    };
    let weights = weights
        .iter()
        .map(|(region, w)| match w.as_u64() {
            Some(n) if n > 0 && valid_region(region) => Ok((region.clone(), n)),
            _ => Err(scope_error(
                policy,
                format!(
                    "split.{region}: must be a whole-number weight ≥ 1, got {}",
                    describe(w)
                ),
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Scope::Split { weights })
}

/// The scope's store is named; a leased scope's ledger has its global store.
fn check_stores(policy: &Policy, scope: &Scope, stores: &Stores) -> Result<(), ConfigError> {
    if stores.index(scope.store_role()).is_none() {
        return Err(scope_error(
            policy,
            format!(
                "{} needs a {} store (stores.{})",
                scope.name(),
                scope.store_role(),
                scope.store_role()
            ),
        ));
    }
    if let Scope::Leased(_) = scope
        && stores.index("global").is_none()
    {
        return Err(scope_error(
            policy,
            "leased needs a global store (stores.global): its ledger lives there".into(),
        ));
    }
    Ok(())
}

/// A split has weights, this instance's region among them, and no region's
/// share of the limit is 0.
fn check_split(
    policy: &Policy,
    weights: &[(String, u64)],
    deployment: &Deployment,
) -> Result<(), ConfigError> {
    if weights.is_empty() {
        return Err(scope_error(
            policy,
            "split needs weights: list the regions (regions:) or give {split: {REGION: WEIGHT}}"
                .into(),
        ));
    }
    let region = deployment.region.as_deref().ok_or_else(|| {
        scope_error(
            policy,
            format!("split needs this instance's region (region:, --region or {REGION_ENV})"),
        )
    })?;
    if !weights.iter().any(|(r, _)| r == region) {
        return Err(scope_error(
            policy,
            format!("split: this instance's region {region:?} has no weight"),
        ));
    }
    let w: Vec<u64> = weights.iter().map(|(_, w)| *w).collect();
    for (index, (name, _)) in weights.iter().enumerate() {
        if split_policy(policy, &w, index).is_none() {
            return Err(scope_error(
                policy,
                format!(
                    "split: region {name:?}'s share of the limit {} is 0: it could admit nothing (lower its count of regions or raise the limit)",
                    policy.limits().limit()
                ),
            ));
        }
    }
    Ok(())
}

/// `leased`'s terms: `term` (default 10 s), `renew` (default a quarter of
/// the term, below half of it), `floor` (the floors' sum, a percentage of
/// the limit split by region weight; default 50%), `identities` (how many
/// this instance leases for at once; default 1000).
fn parse_leased(
    policy: &Policy,
    terms: Option<&Map<String, Value>>,
    deployment: &Deployment,
) -> Result<Leased, String> {
    let empty = Map::new();
    let terms = terms.unwrap_or(&empty);
    let known = ["term", "renew", "floor", "identities"];
    if let Some(key) = terms.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!("leased.{key}: {}", unknown_field(key, &known)));
    }
    let duration = |key: &str| -> Result<Option<u64>, String> {
        match terms.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => parse_duration_ms(text)
                .map(Some)
                .map_err(|e| format!("leased.{key}: {e}")),
            Some(other) => Err(format!(
                "leased.{key}: must be a duration such as \"10s\", got {}",
                describe(other)
            )),
        }
    };
    let term_ms = duration("term")?.unwrap_or(LEASE_TERM_MS);
    if !(MIN_TERM_MS..=MAX_TERM_MS).contains(&term_ms) {
        return Err(format!(
            "leased.term: {} is outside {}..={}",
            format_duration_ms(term_ms),
            format_duration_ms(MIN_TERM_MS),
            format_duration_ms(MAX_TERM_MS)
        ));
    }
    let renew_ms = duration("renew")?.unwrap_or(term_ms / 4);
    if renew_ms == 0 || renew_ms.saturating_mul(2) > term_ms {
        return Err(format!(
            "leased.renew: {} must be above 0 and at most half the term ({}), so a lease is renewed before it runs out even when one renewal is lost",
            format_duration_ms(renew_ms),
            format_duration_ms(term_ms)
        ));
    }
    let floor_percent = match terms.get("floor") {
        None | Some(Value::Null) => LEASE_FLOOR_PERCENT,
        Some(Value::String(text)) => text
            .strip_suffix('%')
            .and_then(|n| n.trim().parse::<u64>().ok())
            .filter(|&n| n <= 100)
            .ok_or_else(|| format!("leased.floor: must be a percentage 0%..100%, got {text:?}"))?,
        Some(other) => {
            return Err(format!(
                "leased.floor: must be a percentage such as \"50%\", got {}",
                describe(other)
            ));
        }
    };
    let max_identities = parse_identities(terms.get("identities"))?;
    if deployment.regions.is_empty() {
        return Err(
            "leased needs the regions listed (regions:), for their floors and weights".into(),
        );
    }
    if deployment.region.is_none() {
        return Err(format!(
            "leased needs this instance's region (region:, --region or {REGION_ENV})"
        ));
    }
    let limit = policy.limits().limit();
    let floor_total =
        u64::try_from(u128::from(limit) * u128::from(floor_percent) / 100).unwrap_or(limit);
    let weights: Vec<u64> = deployment.regions.iter().map(|r| r.weight).collect();
    let floors: Vec<(String, u64)> = deployment
        .regions
        .iter()
        .zip(split_shares(floor_total, &weights))
        .map(|(r, f)| (r.name.clone(), f))
        .collect();
    if let Some((r, _)) = floors.iter().find(|(_, f)| *f == 0) {
        return Err(format!(
            "leased: region {r:?}'s floor is 0 of the limit {limit} ({floor_percent}% split by weight): a region cut off from the ledger could admit nothing; raise floor or the limit"
        ));
    }
    // Every share a region can hold (1..limit units) must scale exactly;
    // the extremes carry the largest factors.
    if limit >= 2
        && (split_policy(policy, &[1, limit - 1], 0).is_none()
            || split_policy(policy, &[limit - 1, 1], 0).is_none())
    {
        return Err(format!(
            "leased: the limit {limit} cannot be split into shares exactly (its rate's numbers are too large); lower them"
        ));
    }
    let spare = limit - floors.iter().map(|(_, f)| f).sum::<u64>();
    Ok(Leased {
        term_ms,
        renew_ms,
        rest_ms: rest_ms(policy),
        floor_percent,
        floors,
        spare,
        max_identities,
    })
}

/// `leased.identities`: how many identities an instance leases for at
/// once (default [`DEFAULT_MAX_IDENTITIES`]).
fn parse_identities(value: Option<&Value>) -> Result<usize, String> {
    match value {
        None | Some(Value::Null) => Ok(DEFAULT_MAX_IDENTITIES),
        Some(Value::Number(n)) => n
            .as_u64()
            .filter(|n| (1..=MAX_LEASED_IDENTITIES).contains(n))
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                format!(
                    "leased.identities: must be a whole number 1..={MAX_LEASED_IDENTITIES}, got {n}"
                )
            }),
        Some(other) => Err(format!(
            "leased.identities: must be a whole number such as 1000, got {}",
            describe(other)
        )),
    }
}

/// What this instance enforces of `policy` under `scope`: the policy
/// itself, or under `split` its region's share.
pub(super) fn enforced(policy: &Policy, scope: &Scope, deployment: &Deployment) -> Policy {
    let Scope::Split { weights } = scope else {
        return policy.clone();
    };
    let w: Vec<u64> = weights.iter().map(|(_, w)| *w).collect();
    deployment
        .region
        .as_deref()
        .and_then(|region| weights.iter().position(|(r, _)| r == region))
        .and_then(|index| split_policy(policy, &w, index))
        // parse_scope refused every case where this is None.
        .unwrap_or_else(|| policy.clone())
}
