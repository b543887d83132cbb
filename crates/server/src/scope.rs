//! Where a policy's limit is enforced (docs/design.md §7): its scope, the
//! store that scope decides on, and the deployment (this instance's region,
//! the regions there are) that a scope's share and stated bound depend on.
//!
//! A config names its stores by role — `local` (memory: this instance),
//! `regional` (this region's Redis; one config for every region can name
//! each region's), `global` (one Redis for every region) — and each policy
//! its scope; a scope decides on the store of its role. Today's single
//! `store:` is still read: a memory store is `local` (policies `instance`),
//! a Redis store `global` (policies `global`).

use serde_json::{Map, Value};
use tollgate_core::{
    ConfigError, Limits, Policy, describe, format_duration_ms, parse_duration_ms, split_policy,
    split_shares,
};

use crate::config::{StoreSettings, parse_store_value};

/// The environment variable naming this instance's region (below
/// `--region`, above the file's `region:`).
pub const REGION_ENV: &str = "TOLLGATE_REGION";

/// The stores' roles, in the order the limiter asks them: the cheapest
/// first, so a local rejection never pays a round trip.
pub const STORE_ROLES: [&str; 3] = ["local", "regional", "global"];

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

pub use tollgate_limiter::Leased;

/// Defaults of `scope: leased`.
pub const LEASE_TERM_MS: u64 = 10_000;
/// The floors' default share of the limit: half stays put, half moves.
pub const LEASE_FLOOR_PERCENT: u64 = 50;
/// The shortest term: renewals are round trips to another region.
const MIN_TERM_MS: u64 = 200;
/// The longest term (a day).
const MAX_TERM_MS: u64 = 86_400_000;

/// The time `policy` takes to forget a use: a bucket's refill from empty
/// to full, a fixed window or a log's window, two windows for a sliding
/// window (its estimate weighs the previous one). Units one region let go
/// rest this long before another may spend them, so no interval of the
/// policy's own bound sees them spent twice.
pub fn rest_ms(policy: &Policy) -> u64 {
    match policy.limits() {
        Limits::TokenBucket(r) | Limits::Gcra(r) => {
            let ms = u128::from(r.capacity()) * u128::from(r.per_ms());
            u64::try_from(ms.div_ceil(u128::from(r.tokens().max(1)))).unwrap_or(u64::MAX / 4)
        }
        Limits::FixedWindow(w) | Limits::SlidingLog(w) => w.window_ms(),
        Limits::SlidingWindow(w) => w.window_ms().saturating_mul(2),
    }
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

/// One region of the deployment, as `regions:` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    pub name: String,
    /// Instances serving in the region, for the stated bounds.
    pub instances: u64,
    /// Its weight in `split` shares (default 1).
    pub weight: u64,
}

/// This instance's region and the regions there are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deployment {
    pub region: Option<String>,
    pub regions: Vec<Region>,
}

impl Deployment {
    /// Reads `region:` (overridden by [`REGION_ENV`]) and `regions:`.
    pub fn parse(
        top: &Map<String, Value>,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let file_region = match top.get("region") {
            None | Some(Value::Null) => None,
            Some(Value::String(r)) if valid_region(r) => Some(r.clone()),
            Some(other) => {
                return Err(doc(format!(
                    "region: must be a region name (letters, digits, '-', '_'), got {}",
                    describe(other)
                )));
            }
        };
        let region = match env(REGION_ENV).filter(|r| !r.is_empty()) {
            Some(r) if valid_region(&r) => Some(r),
            Some(r) => {
                return Err(doc(format!(
                    "{REGION_ENV}: {r:?} is not a region name (letters, digits, '-', '_')"
                )));
            }
            None => file_region,
        };
        let regions = match top.get("regions") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(map)) if !map.is_empty() => map
                .iter()
                .map(|(name, v)| parse_region(name, v))
                .collect::<Result<Vec<_>, _>>()?,
            Some(other) => {
                return Err(doc(format!(
                    "regions: must map each region to {{instances, weight}}, got {}",
                    describe(other)
                )));
            }
        };
        if let (Some(r), false) = (&region, regions.is_empty())
            && !regions.iter().any(|x| &x.name == r)
        {
            return Err(doc(format!(
                "region: {r:?} is not among regions ({})",
                names(&regions)
            )));
        }
        Ok(Self { region, regions })
    }

    /// Instances across every region, when `regions:` says.
    pub fn instances(&self) -> Option<u64> {
        (!self.regions.is_empty()).then(|| self.regions.iter().map(|r| r.instances).sum())
    }
}

fn parse_region(name: &str, value: &Value) -> Result<Region, ConfigError> {
    if !valid_region(name) {
        return Err(doc(format!(
            "regions: {name:?} is not a region name (letters, digits, '-', '_')"
        )));
    }
    let fields = match value {
        Value::Null => Map::new(),
        Value::Object(m) => m.clone(),
        other => {
            return Err(doc(format!(
                "regions.{name}: must be {{instances, weight}}, got {}",
                describe(other)
            )));
        }
    };
    let mut region = Region {
        name: name.to_owned(),
        instances: 1,
        weight: 1,
    };
    for (key, v) in &fields {
        let slot = match key.as_str() {
            "instances" => &mut region.instances,
            "weight" => &mut region.weight,
            other => {
                return Err(doc(format!(
                    "regions.{name}.{other}: unknown field (expected: instances, weight)"
                )));
            }
        };
        *slot = v.as_u64().filter(|&n| n > 0).ok_or_else(|| {
            doc(format!(
                "regions.{name}.{key}: must be a whole number ≥ 1, got {}",
                describe(v)
            ))
        })?;
    }
    Ok(region)
}

fn valid_region(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn names(regions: &[Region]) -> String {
    regions
        .iter()
        .map(|r| r.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn doc(message: String) -> ConfigError {
    ConfigError::Document(message)
}

/// The stores a config names, by role, in [`STORE_ROLES`] order.
#[derive(Debug, Clone)]
pub struct Stores {
    pub list: Vec<(&'static str, StoreSettings)>,
}

impl Stores {
    /// `stores:` (roles to stores; `regional` may map each region to its
    /// store), or today's single `store:`, or the memory store by default.
    pub fn parse(top: &Map<String, Value>, deployment: &Deployment) -> Result<Self, ConfigError> {
        match (top.get("store"), top.get("stores")) {
            (Some(_), Some(_)) => Err(doc(
                "give store (one store) or stores (by role), not both".into()
            )),
            (None, Some(Value::Object(map))) if !map.is_empty() => {
                Self::parse_roles(map, deployment)
            }
            (None, Some(other)) => Err(doc(format!(
                "stores: must map roles (local, regional, global) to stores, got {}",
                describe(other)
            ))),
            (store, None) => {
                let settings = parse_store_value(store, "store")?;
                let role = match settings {
                    StoreSettings::Memory { .. } => "local",
                    StoreSettings::Redis(_) => "global",
                };
                Ok(Self {
                    list: vec![(role, settings)],
                })
            }
        }
    }

    fn parse_roles(map: &Map<String, Value>, deployment: &Deployment) -> Result<Self, ConfigError> {
        if let Some(role) = map.keys().find(|k| !STORE_ROLES.contains(&k.as_str())) {
            return Err(doc(format!(
                "stores.{role}: unknown role (expected: local, regional, global)"
            )));
        }
        let mut list = Vec::new();
        for role in STORE_ROLES {
            let Some(value) = map.get(role) else { continue };
            let field = format!("stores.{role}");
            let value = if role == "regional" {
                this_regions_store(value, deployment)?
            } else {
                value
            };
            // `local: memory` is a store with its defaults.
            let settings = match value {
                Value::String(kind) => {
                    let mut m = Map::new();
                    m.insert(kind.clone(), Value::Null);
                    parse_store_value(Some(&Value::Object(m)), &field)?
                }
                other => parse_store_value(Some(other), &field)?,
            };
            match (role, &settings) {
                ("local", StoreSettings::Memory { .. })
                | ("regional" | "global", StoreSettings::Redis(_)) => {}
                ("local", _) => {
                    return Err(doc(format!(
                        "{field}: must be a memory store (it is this instance's own)"
                    )));
                }
                _ => {
                    return Err(doc(format!(
                        "{field}: must be a redis store (a memory store is one instance's, not a {role} one)"
                    )));
                }
            }
            list.push((role, settings));
        }
        Ok(Self { list })
    }

    /// Where the store of `role` is in [`Stores::list`].
    pub fn index(&self, role: &str) -> Option<usize> {
        self.list.iter().position(|(r, _)| *r == role)
    }

    /// The store envoyproxy/ratelimit rules decide on: the most shared one.
    pub fn default_index(&self) -> usize {
        self.list.len().saturating_sub(1)
    }
}

/// `regional` as one store, or as a map of regions to stores from which
/// this instance's region's is taken.
fn this_regions_store<'v>(
    value: &'v Value,
    deployment: &Deployment,
) -> Result<&'v Value, ConfigError> {
    let Value::Object(map) = value else {
        return Ok(value);
    };
    if map.contains_key("redis") || map.contains_key("memory") {
        return Ok(value);
    }
    let region = deployment.region.as_deref().ok_or_else(|| {
        doc(format!(
            "stores.regional: names a store per region, so this instance needs its region (region:, --region or {REGION_ENV})"
        ))
    })?;
    map.get(region).ok_or_else(|| {
        doc(format!(
            "stores.regional: no store for this instance's region {region:?} (it names: {})",
            map.keys().cloned().collect::<Vec<_>>().join(", ")
        ))
    })
}

/// A policy's `scope` field (absent: the one store's natural scope).
pub fn parse_scope(
    policy: &Policy,
    value: Option<&Value>,
    stores: &Stores,
    deployment: &Deployment,
) -> Result<Scope, ConfigError> {
    let field = |reason: String| ConfigError::Field {
        policy: policy.name().to_owned(),
        field: "scope".into(),
        reason,
    };
    let scope = match value {
        None | Some(Value::Null) => match stores.list.as_slice() {
            [(role, _)] => match *role {
                "local" => Scope::Instance,
                "regional" => Scope::Region,
                _ => Scope::Global,
            },
            _ => {
                return Err(field(format!(
                    "missing: this config names several stores ({}), so say which scope (instance, region, split, leased, global)",
                    stores
                        .list
                        .iter()
                        .map(|(r, _)| *r)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        },
        Some(Value::String(s)) => match s.as_str() {
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
            "leased" => Scope::Leased(parse_leased(policy, None, deployment).map_err(field)?),
            other => {
                return Err(field(format!(
                    "unknown scope {other:?} (expected: instance, region, split, leased, global)"
                )));
            }
        },
        Some(Value::Object(m)) if m.len() == 1 && m.contains_key("leased") => {
            let terms = match m.get("leased") {
                Some(Value::Object(terms)) => Some(terms),
                Some(Value::Null) => None,
                Some(other) => {
                    return Err(field(format!(
                        "leased: must be {{term, renew, floor}}, got {}",
                        describe(other)
                    )));
                }
                None => None,
            };
            Scope::Leased(parse_leased(policy, terms, deployment).map_err(field)?)
        }
        Some(Value::Object(m)) if m.len() == 1 && m.contains_key("split") => {
            let Some(Value::Object(weights)) = m.get("split") else {
                return Err(field("split: must map regions to weights".into()));
            };
            let weights = weights
                .iter()
                .map(|(region, w)| match w.as_u64() {
                    Some(n) if n > 0 && valid_region(region) => Ok((region.clone(), n)),
                    _ => Err(field(format!(
                        "split.{region}: must be a whole-number weight ≥ 1, got {}",
                        describe(w)
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Scope::Split { weights }
        }
        Some(other) => {
            return Err(field(format!(
                "must be instance, region, split, {{split: {{REGION: WEIGHT}}}}, leased, {{leased: {{term, renew, floor}}}} or global, got {}",
                describe(other)
            )));
        }
    };
    if stores.index(scope.store_role()).is_none() {
        return Err(field(format!(
            "{} needs a {} store (stores.{})",
            scope.name(),
            scope.store_role(),
            scope.store_role()
        )));
    }
    if let Scope::Leased(_) = &scope
        && stores.index("global").is_none()
    {
        return Err(field(
            "leased needs a global store (stores.global): its ledger lives there".into(),
        ));
    }
    if let Scope::Split { weights } = &scope {
        if weights.is_empty() {
            return Err(field(
                "split needs weights: list the regions (regions:) or give {split: {REGION: WEIGHT}}"
                    .into(),
            ));
        }
        let region = deployment.region.as_deref().ok_or_else(|| {
            field(format!(
                "split needs this instance's region (region:, --region or {REGION_ENV})"
            ))
        })?;
        if !weights.iter().any(|(r, _)| r == region) {
            return Err(field(format!(
                "split: this instance's region {region:?} has no weight"
            )));
        }
        let w: Vec<u64> = weights.iter().map(|(_, w)| *w).collect();
        for (index, (name, _)) in weights.iter().enumerate() {
            if split_policy(policy, &w, index).is_none() {
                return Err(field(format!(
                    "split: region {name:?}'s share of the limit {} is 0: it could admit nothing (lower its count of regions or raise the limit)",
                    policy.limits().limit()
                )));
            }
        }
    }
    Ok(scope)
}

/// `leased`'s terms: `term` (default 10 s), `renew` (default a quarter of
/// the term, below half of it), `floor` (the floors' sum, a percentage of
/// the limit split by region weight; default 50%).
fn parse_leased(
    policy: &Policy,
    terms: Option<&Map<String, Value>>,
    deployment: &Deployment,
) -> Result<Leased, String> {
    let empty = Map::new();
    let terms = terms.unwrap_or(&empty);
    if let Some(key) = terms
        .keys()
        .find(|k| !["term", "renew", "floor"].contains(&k.as_str()))
    {
        return Err(format!(
            "leased.{key}: unknown field (expected: term, renew, floor)"
        ));
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
    })
}

/// What this instance enforces of `policy` under `scope`: the policy
/// itself, or under `split` its region's share.
pub fn enforced(policy: &Policy, scope: &Scope, deployment: &Deployment) -> Policy {
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
