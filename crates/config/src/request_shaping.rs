//! Request shaping: which requests a policy limits (`match`), whose
//! bucket each one counts against (`identity`) and what it costs (`cost`).
//! These are the fields forward auth and `/v1/check` read from a request.

use std::collections::HashSet;
use std::net::IpAddr;

use http::HeaderName;
use ipnet::IpNet;
use serde_json::{Map, Value};
use tollgate_core::{ConfigError, Policy, describe, did_you_mean, unknown_field};

use crate::fields::{field_error, whole_number};
use crate::matching::{FormatSuffix, Matcher, PathPattern, TrailingSlash};
use crate::request_path::normalize;

/// One part of an identity, taken from the request being limited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityPart {
    /// A header's value, as is.
    Header(String),
    /// An API key in a header, hashed with the identity key.
    ApiKey(String),
    /// The token of `Authorization: Bearer <token>`, hashed.
    Bearer,
    /// The client's network (its address forwarded only from trusted
    /// proxies), at the prefixes given.
    ClientIp(ClientNetworks),
    /// The request's method, upper-cased.
    Method,
    /// The request's path, as the policy's `match` compares it.
    Path,
    /// The policy's `match.path` pattern (or prefix) that matched.
    Route,
    /// The request's host.
    Host,
    /// A constant: every request shares one bucket.
    Literal(String),
}

impl IdentityPart {
    /// The part's name inside a composite identity.
    pub fn name(&self) -> &str {
        match self {
            IdentityPart::Header(h) => h,
            IdentityPart::ApiKey(_) => "api_key",
            IdentityPart::Bearer => "bearer",
            IdentityPart::ClientIp(_) => "client_ip",
            IdentityPart::Method => "method",
            IdentityPart::Path => "path",
            IdentityPart::Route => "route",
            IdentityPart::Host => "host",
            IdentityPart::Literal(_) => "literal",
        }
    }

    /// Whether the part is a credential, kept only hashed.
    pub fn is_secret(&self) -> bool {
        matches!(self, IdentityPart::ApiKey(_) | IdentityPart::Bearer)
    }

    /// The part as written in config, for `/v1/policies`.
    pub fn describe(&self) -> String {
        match self {
            IdentityPart::Header(h) => format!("header:{h}"),
            IdentityPart::ApiKey(h) => format!("api_key:{h}"),
            IdentityPart::Literal(v) => format!("literal:{v}"),
            IdentityPart::ClientIp(networks) if *networks != ClientNetworks::default() => {
                format!(
                    "client_ip:ipv4_prefix={},ipv6_prefix={}",
                    networks.ipv4_prefix, networks.ipv6_prefix
                )
            }
            other => other.name().to_owned(),
        }
    }
}

/// How wide a network one `client_ip` budget covers. One host of IPv6
/// usually holds a whole /64 (and a home a /56 or /48), so keying per
/// address would give one client as many budgets as it has addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientNetworks {
    /// IPv4 addresses are keyed by this prefix (32: the address).
    pub ipv4_prefix: u8,
    /// IPv6 addresses are keyed by this prefix (64 unless configured).
    pub ipv6_prefix: u8,
}

impl Default for ClientNetworks {
    fn default() -> Self {
        Self {
            ipv4_prefix: 32,
            ipv6_prefix: 64,
        }
    }
}

impl ClientNetworks {
    /// The identity value of a client at `ip`: an IPv4-mapped IPv6 address
    /// (`::ffff:198.51.100.77`) is its IPv4 address; a full-length prefix
    /// gives the plain address (`198.51.100.77`), any other the network in
    /// CIDR text (`2001:db8:1:2::/64`).
    pub fn key(&self, ip: IpAddr) -> String {
        let ip = ip.to_canonical();
        let prefix = match ip {
            IpAddr::V4(_) => self.ipv4_prefix,
            IpAddr::V6(_) => self.ipv6_prefix,
        };
        match IpNet::new(ip, prefix) {
            Ok(net) if net.prefix_len() < net.max_prefix_len() => net.trunc().to_string(),
            // A full prefix, or one out of range (refused at load).
            _ => ip.to_string(),
        }
    }
}

/// What a request costs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CostRule {
    /// The same for every request.
    Constant(u64),
    /// Read from a header; `default` when absent, refused below `min`
    /// (1 unless the config says 0: a client never chooses a free request)
    /// and above `max`.
    Header {
        /// The header, lower-cased.
        name: String,
        /// The least cost a request may ask.
        min: u64,
        /// The most cost a request may ask.
        max: u64,
        /// The cost of a request without the header.
        default: u64,
    },
}

/// A policy's `match` (absent: every request).
pub(super) fn parse_matcher(
    policy: &Policy,
    value: Option<&Value>,
) -> Result<Matcher, ConfigError> {
    match value {
        None | Some(Value::Null) => Ok(Matcher::default()),
        Some(Value::Object(m)) => parse_match(policy, m),
        Some(other) => Err(field_error(
            policy,
            "match",
            format!("must be a mapping, got {}", describe(other)),
        )),
    }
}

/// A policy's `identity` (absent: the client's address): distinct parts,
/// `route` only when `match` names one.
pub(super) fn parse_identity(
    policy: &Policy,
    value: Option<&Value>,
    matcher: &Matcher,
) -> Result<Vec<IdentityPart>, ConfigError> {
    let identity = match value {
        None | Some(Value::Null) => vec![IdentityPart::ClientIp(ClientNetworks::default())],
        Some(Value::Array(parts)) if !parts.is_empty() => parts
            .iter()
            .enumerate()
            .map(|(i, p)| parse_identity_part(policy, i, p))
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => {
            return Err(field_error(
                policy,
                "identity",
                format!("must be a non-empty list of parts, got {}", describe(other)),
            ));
        }
    };
    let mut seen = HashSet::new();
    for part in &identity {
        if !seen.insert(part.name().to_ascii_lowercase()) {
            return Err(field_error(
                policy,
                "identity",
                format!("part {:?} appears twice", part.describe()),
            ));
        }
        if *part == IdentityPart::Route && matcher.route().is_none() {
            return Err(field_error(
                policy,
                "identity",
                "part \"route\" needs match.path or match.path_prefix to name the route",
            ));
        }
    }
    Ok(identity)
}

/// A policy's `cost` (absent: 1): a constant within the limit, or read
/// from a header.
pub(super) fn parse_cost(policy: &Policy, value: Option<&Value>) -> Result<CostRule, ConfigError> {
    match value {
        None | Some(Value::Null) => Ok(CostRule::Constant(1)),
        Some(v @ Value::Number(_)) => {
            let cost = whole_number(policy, "cost", v)?;
            let limit = policy.limits().limit();
            if cost > limit {
                return Err(field_error(
                    policy,
                    "cost",
                    format!(
                        "{cost} is above the policy's limit {limit}: no request would ever be admitted"
                    ),
                ));
            }
            Ok(CostRule::Constant(cost))
        }
        Some(Value::Object(m)) => parse_cost_header(policy, m),
        Some(other) => Err(field_error(
            policy,
            "cost",
            format!(
                "must be a whole number or {{header, max}}, got {}",
                describe(other)
            ),
        )),
    }
}

/// `match`'s fields; `path` and `path_prefix` exclude each other.
fn parse_match(policy: &Policy, m: &Map<String, Value>) -> Result<Matcher, ConfigError> {
    let mut matcher = Matcher::default();
    for (key, value) in m {
        let field = format!("match.{key}");
        match key.as_str() {
            "methods" => matcher.methods = Some(parse_methods(policy, &field, value)?),
            "path_prefix" => {
                let prefix = value
                    .as_str()
                    .filter(|s| s.starts_with('/'))
                    .ok_or_else(|| {
                        field_error(policy, &field, "must be a path starting with '/'")
                    })?;
                normalized(policy, &field, prefix)?;
                matcher.path_prefix = Some(prefix.to_owned());
            }
            "path" => {
                let text = value.as_str().ok_or_else(|| {
                    field_error(
                        policy,
                        &field,
                        "must be a path pattern such as \"/orders/{id}\"",
                    )
                })?;
                matcher.path = Some(
                    PathPattern::parse(text)
                        .map_err(|reason| field_error(policy, &field, reason))?,
                );
                normalized(policy, &field, text)?;
            }
            "host" => {
                let host = value.as_str().filter(|s| !s.is_empty()).ok_or_else(|| {
                    field_error(
                        policy,
                        &field,
                        "must be a host name such as api.example.com or *.example.com",
                    )
                })?;
                // `api.example.com.` is `api.example.com`, fully qualified.
                let host = host.strip_suffix('.').unwrap_or(host);
                matcher.host = Some(host.to_ascii_lowercase());
            }
            "case_insensitive" => {
                matcher.case_insensitive = value.as_bool().ok_or_else(|| {
                    field_error(
                        policy,
                        &field,
                        format!("must be true or false, got {}", describe(value)),
                    )
                })?;
            }
            "trailing_slash" => {
                matcher.trailing_slash = if ignore_or_strict(policy, &field, value)? {
                    TrailingSlash::Ignore
                } else {
                    TrailingSlash::Strict
                };
            }
            "format_suffix" => {
                matcher.format_suffix = if ignore_or_strict(policy, &field, value)? {
                    FormatSuffix::Ignore
                } else {
                    FormatSuffix::Strict
                };
            }
            _ => {
                let known = [
                    "methods",
                    "path_prefix",
                    "path",
                    "host",
                    "case_insensitive",
                    "trailing_slash",
                    "format_suffix",
                ];
                return Err(field_error(policy, &field, unknown_field(key, &known)));
            }
        }
    }
    if matcher.path.is_some() && matcher.path_prefix.is_some() {
        return Err(field_error(
            policy,
            "match",
            "give path or path_prefix, not both",
        ));
    }
    Ok(matcher)
}

/// `match.methods`: a non-empty list of methods, upper-cased.
fn parse_methods(policy: &Policy, field: &str, value: &Value) -> Result<Vec<String>, ConfigError> {
    let list = value
        .as_array()
        .filter(|l| !l.is_empty())
        .ok_or_else(|| field_error(policy, field, "must be a non-empty list of HTTP methods"))?;
    let mut methods = Vec::with_capacity(list.len());
    for item in list {
        let method = item
            .as_str()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphabetic()))
            .ok_or_else(|| {
                field_error(
                    policy,
                    field,
                    format!("{} is not an HTTP method", describe(item)),
                )
            })?;
        methods.push(method.to_ascii_uppercase());
    }
    Ok(methods)
}

/// `match.trailing_slash` and `match.format_suffix`: `ignore` (true) or
/// `strict`.
fn ignore_or_strict(policy: &Policy, field: &str, value: &Value) -> Result<bool, ConfigError> {
    match value.as_str() {
        Some("ignore") => Ok(true),
        Some("strict") => Ok(false),
        Some(other) => Err(field_error(
            policy,
            field,
            format!("must be ignore or strict, got {other:?}"),
        )),
        None => Err(field_error(
            policy,
            field,
            format!("must be ignore or strict, got {}", describe(value)),
        )),
    }
}

/// Refuses a `match` path that no request can have: requests are matched by
/// their normalized path, so `/a//b` or `/a%20b` would silently match nothing.
fn normalized(policy: &Policy, field: &str, path: &str) -> Result<(), ConfigError> {
    match normalize(path) {
        Ok(p) if p == path => Ok(()),
        Ok(p) => Err(field_error(
            policy,
            field,
            format!(
                "{path:?} matches no request: requests are matched by their normalized path, here {p:?} (docs/config.md, How paths are normalized)"
            ),
        )),
        Err(fault) => Err(field_error(policy, field, format!("{path:?}: {fault}"))),
    }
}

/// One entry of `identity`: a bare part (`bearer`, `client_ip`…) or a
/// one-key mapping (`header: NAME`, `api_key: HEADER`, `literal: VALUE`).
fn parse_identity_part(
    policy: &Policy,
    index: usize,
    value: &Value,
) -> Result<IdentityPart, ConfigError> {
    let field = format!("identity[{index}]");
    let kinds = [
        "header",
        "api_key",
        "bearer",
        "client_ip",
        "method",
        "path",
        "route",
        "host",
        "literal",
    ];
    let unknown = |what: &str, named: &str| {
        field_error(
            policy,
            &field,
            format!(
                "{what} is not an identity part{} (expected one of: header: NAME, api_key: HEADER, bearer, client_ip, method, path, route, host, literal: VALUE)",
                did_you_mean(named, &kinds)
            ),
        )
    };
    match value {
        Value::String(s) => match s.as_str() {
            "bearer" => Ok(IdentityPart::Bearer),
            "client_ip" => Ok(IdentityPart::ClientIp(ClientNetworks::default())),
            "method" => Ok(IdentityPart::Method),
            "path" => Ok(IdentityPart::Path),
            "route" => Ok(IdentityPart::Route),
            "host" => Ok(IdentityPart::Host),
            other => Err(unknown(&format!("{other:?}"), other)),
        },
        Value::Object(m) if m.len() == 1 && m.contains_key("client_ip") => {
            parse_client_networks(policy, &format!("{field}.client_ip"), &m["client_ip"])
                .map(IdentityPart::ClientIp)
        }
        Value::Object(m) if m.len() == 1 => {
            let (kind, arg) = m
                .iter()
                .next()
                .ok_or_else(|| unknown("an empty mapping", ""))?;
            let arg = arg.as_str().filter(|s| !s.is_empty()).ok_or_else(|| {
                field_error(
                    policy,
                    &format!("{field}.{kind}"),
                    format!("must be a non-empty string, got {}", describe(arg)),
                )
            })?;
            let header = |name: &str| -> Result<String, ConfigError> {
                if name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                {
                    Ok(name.to_ascii_lowercase())
                } else {
                    Err(field_error(
                        policy,
                        &format!("{field}.{kind}"),
                        format!("{name:?} is not a header name"),
                    ))
                }
            };
            match kind.as_str() {
                "header" => Ok(IdentityPart::Header(header(arg)?)),
                "api_key" => Ok(IdentityPart::ApiKey(header(arg)?)),
                "literal" => Ok(IdentityPart::Literal(arg.to_owned())),
                other => Err(unknown(&format!("{other:?}"), other)),
            }
        }
        other => Err(unknown(&describe(other), "")),
    }
}

/// `client_ip: {ipv6_prefix: 1..=128, ipv4_prefix: 1..=32}`, both optional.
fn parse_client_networks(
    policy: &Policy,
    field: &str,
    value: &Value,
) -> Result<ClientNetworks, ConfigError> {
    let mut networks = ClientNetworks::default();
    let options = match value {
        Value::Null => return Ok(networks),
        Value::Object(options) => options,
        other => {
            return Err(field_error(
                policy,
                field,
                format!(
                    "expected a mapping of ipv6_prefix and ipv4_prefix, got {}",
                    describe(other)
                ),
            ));
        }
    };
    for (name, value) in options {
        let (slot, max) = match name.as_str() {
            "ipv6_prefix" => (&mut networks.ipv6_prefix, 128),
            "ipv4_prefix" => (&mut networks.ipv4_prefix, 32),
            other => {
                return Err(field_error(
                    policy,
                    field,
                    format!("{other:?} is not an option (expected ipv6_prefix, ipv4_prefix)"),
                ));
            }
        };
        *slot = value
            .as_u64()
            .filter(|p| (1..=max).contains(p))
            .and_then(|p| u8::try_from(p).ok())
            .ok_or_else(|| {
                field_error(
                    policy,
                    &format!("{field}.{name}"),
                    format!("{value} is not a prefix length (expected 1 to {max})"),
                )
            })?;
    }
    Ok(networks)
}

/// `cost: {header, min, max, default}`: read from a header, bounded.
fn parse_cost_header(policy: &Policy, m: &Map<String, Value>) -> Result<CostRule, ConfigError> {
    if let Some(key) = m
        .keys()
        .find(|k| !matches!(k.as_str(), "header" | "min" | "max" | "default"))
    {
        return Err(field_error(
            policy,
            &format!("cost.{key}"),
            unknown_field(key, &["header", "min", "max", "default"]),
        ));
    }
    let name = m
        .get("header")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            field_error(
                policy,
                "cost.header",
                "missing: the header to read the cost from",
            )
        })?;
    let max = match m.get("max") {
        Some(v) => whole_number(policy, "cost.max", v)?,
        None => {
            return Err(field_error(
                policy,
                "cost.max",
                "missing: a cost read from a header needs a maximum",
            ));
        }
    };
    if max == 0 {
        return Err(field_error(policy, "cost.max", "must be positive"));
    }
    let min = match m.get("min") {
        Some(v) => whole_number(policy, "cost.min", v)?,
        None => 1,
    };
    if min > max {
        return Err(field_error(
            policy,
            "cost.min",
            format!("{min} is above cost.max {max}"),
        ));
    }
    let default = match m.get("default") {
        Some(v) => whole_number(policy, "cost.default", v)?,
        None => min.max(1),
    };
    if default > max {
        return Err(field_error(
            policy,
            "cost.default",
            format!("{default} is above cost.max {max}"),
        ));
    }
    if default < min {
        return Err(field_error(
            policy,
            "cost.default",
            format!("{default} is below cost.min {min}"),
        ));
    }
    if HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(field_error(
            policy,
            "cost.header",
            format!("{name:?} is not a header name"),
        ));
    }
    Ok(CostRule::Header {
        name: name.to_ascii_lowercase(),
        min,
        max,
        default,
    })
}
