//! The deployment: this instance's region (`region:`, `--region`,
//! `TOLLGATE_REGION`) and the regions there are (`regions:`). A scope's
//! share, a store per region and the stated bounds all depend on it.

use serde_json::{Map, Value};
use tollgate_core::{ConfigError, describe, node_path, unknown_field};

use crate::fields::doc;

/// The environment variable naming this instance's region (below
/// `--region`, above the file's `region:`).
pub const REGION_ENV: &str = "TOLLGATE_REGION";

/// One region of the deployment, as `regions:` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// The region's name, as `regions:` keys it.
    pub name: String,
    /// Instances serving in the region, for the stated bounds.
    pub instances: u64,
    /// Its weight in `split` shares (default 1).
    pub weight: u64,
}

/// This instance's region and the regions there are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deployment {
    /// This instance's region, if it was told one.
    pub region: Option<String>,
    /// `regions:` in the file's order (empty: not listed).
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
                ))
                .at(node_path!["region"]));
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
                ))
                .at(node_path!["regions"]));
            }
        };
        if let (Some(r), false) = (&region, regions.is_empty())
            && !regions.iter().any(|x| &x.name == r)
        {
            // The region may come from the environment: the list is in the file.
            return Err(doc(format!(
                "region: {r:?} is not among regions ({})",
                names(&regions)
            ))
            .at(node_path!["regions"]));
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
        ))
        .at(node_path!["regions", name]));
    }
    let fields = match value {
        Value::Null => Map::new(),
        Value::Object(m) => m.clone(),
        other => {
            return Err(doc(format!(
                "regions.{name}: must be {{instances, weight}}, got {}",
                describe(other)
            ))
            .at(node_path!["regions", name]));
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
                    "regions.{name}.{other}: {}",
                    unknown_field(other, &["instances", "weight"])
                ))
                .at(node_path!["regions", name, other]));
            }
        };
        *slot = v.as_u64().filter(|&n| n > 0).ok_or_else(|| {
            doc(format!(
                "regions.{name}.{key}: must be a whole number ≥ 1, got {}",
                describe(v)
            ))
            .at(node_path!["regions", name, key])
        })?;
    }
    Ok(region)
}

/// Whether `name` is a region name: 1 to 64 letters, digits, `-` or `_`.
pub(super) fn valid_region(name: &str) -> bool {
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
