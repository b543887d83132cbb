//! A policy's identity rules, applied by every door alike: forward auth
//! (`http/request.rs`), Envoy's RLS (`rls/resolve.rs`) and any door to come
//! (a tower layer) say only what they read for each part; this module says
//! what it means. So one client is one budget whichever door it came
//! through: an address is keyed by its network (IPv6 per /64 by default, a
//! mapped `::ffff:a.b.c.d` as `a.b.c.d`), a secret (API key, bearer token)
//! only by its keyed hash, and a missing or empty part is refused, never a
//! bucket shared by everyone who left it out.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use tollgate_core::{Identity, IdentityError, SecretHasher};

use crate::{IdentityPart, ServePolicy};

/// Why a request could not be given an identity or a cost: a 400 naming
/// the fault on HTTP (an over-limit answer on RLS), never a shared bucket
/// and never a fail-open status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestFault(pub String);

/// What a door read for one identity part, before its rule shapes it.
#[derive(Debug, Clone, Copy)]
pub enum Told<'a> {
    /// Text as the door carries it: a header's value, a descriptor
    /// entry's value (an address as text, the `Authorization` value for
    /// `bearer`).
    Text(&'a str),
    /// An address the door worked out itself (forward auth's client).
    Address(IpAddr),
}

/// Why one part's value was refused; each door names where it read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartFault {
    /// Absent, empty or blank (for `bearer`: no `Bearer <token>`).
    Missing,
    /// A `client_ip` value that is not an IP address.
    NotAnAddress(String),
    /// A secret part with no identity key to hash it (config loading
    /// refuses such a config, so this is never reached from a file).
    NoHasher,
}

/// The value `part` of `policy` keys by, from what the door `told`: the
/// one shaping every door calls. `None` (nothing read) and blank text are
/// [`PartFault::Missing`]; a `literal` needs nothing from the door.
pub fn shape_part<'v>(
    policy: &'v ServePolicy,
    part: &'v IdentityPart,
    told: Option<Told<'v>>,
    hasher: Option<&SecretHasher>,
) -> Result<Cow<'v, str>, PartFault> {
    if let IdentityPart::Literal(value) = part {
        return Ok(Cow::Borrowed(value.as_str()));
    }
    let text = match told {
        Some(Told::Address(ip)) => {
            return match part {
                IdentityPart::ClientIp(networks) => Ok(Cow::Owned(networks.key(ip))),
                _ => Ok(Cow::Owned(ip.to_string())),
            };
        }
        Some(Told::Text(text)) => text.trim(),
        None => "",
    };
    if text.is_empty() {
        return Err(PartFault::Missing);
    }
    match part {
        IdentityPart::Header(_) => Ok(Cow::Borrowed(text)),
        IdentityPart::ApiKey(_) => hash(hasher, text),
        IdentityPart::Bearer => hash(hasher, bearer_token(text).ok_or(PartFault::Missing)?),
        IdentityPart::ClientIp(networks) => address(text)
            .map(|ip| Cow::Owned(networks.key(ip)))
            .ok_or_else(|| PartFault::NotAnAddress(text.to_owned())),
        IdentityPart::Method => Ok(upper(text)),
        IdentityPart::Path => Ok(policy.matcher.canonical_path(text)),
        IdentityPart::Route => Ok(match policy.matcher.route() {
            Some(route) => Cow::Borrowed(route),
            None => policy.matcher.canonical_path(text),
        }),
        IdentityPart::Host => {
            let host = canonical_host(text);
            if host.is_empty() {
                return Err(PartFault::Missing);
            }
            Ok(host)
        }
        IdentityPart::Literal(value) => Ok(Cow::Borrowed(value.as_str())),
    }
}

/// Why shaped values make no identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComposeFault {
    /// No parts, or a part named twice.
    Parts(IdentityError),
    /// Longer than `server.max_key_bytes`: this many bytes.
    TooLong(usize),
}

/// The composite of named, shaped values: the identity every door keys
/// by, refused when longer than `max_key_bytes` (`server.max_key_bytes`).
pub fn compose<'a>(
    values: impl IntoIterator<Item = (&'a str, &'a str)>,
    max_key_bytes: usize,
) -> Result<Identity, ComposeFault> {
    let identity = Identity::composite(values).map_err(ComposeFault::Parts)?;
    if identity.as_bytes().len() > max_key_bytes {
        return Err(ComposeFault::TooLong(identity.as_bytes().len()));
    }
    Ok(identity)
}

/// The token of an `Authorization: Bearer <token>` value.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// An address as text: `203.0.113.9`, `2001:db8::1`, and with a port
/// (`203.0.113.9:443`, `[2001:db8::1]:443`), as forwarded headers and
/// Envoy's `remote_address` write it; a mapped address as its IPv4.
pub fn address(text: &str) -> Option<IpAddr> {
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .map(|ip| ip.to_canonical())
}

/// The host as one bucket sees it, whatever its spelling: lower case,
/// without a port (`api.example.com:443`) or the root's trailing dot
/// (`api.example.com.`), as `match.host` compares it.
pub fn canonical_host(host: &str) -> Cow<'_, str> {
    let bare = match host.rsplit_once(':') {
        // Not an IPv6 literal's colon: `[::1]:80` keeps `[::1]`.
        Some((name, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!name.contains(':') || name.ends_with(']')) =>
        {
            name
        }
        _ => host,
    };
    lower(bare.strip_suffix('.').unwrap_or(bare))
}

/// `text` in upper case, copied only when it is not already.
fn upper(text: &str) -> Cow<'_, str> {
    if text.bytes().any(|b| b.is_ascii_lowercase()) {
        Cow::Owned(text.to_ascii_uppercase())
    } else {
        Cow::Borrowed(text)
    }
}

/// `text` in lower case, copied only when it is not already.
fn lower(text: &str) -> Cow<'_, str> {
    if text.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(text.to_ascii_lowercase())
    } else {
        Cow::Borrowed(text)
    }
}

fn hash<'v>(hasher: Option<&SecretHasher>, secret: &str) -> Result<Cow<'v, str>, PartFault> {
    hasher
        .map(|h| Cow::Owned(h.hash(secret.as_bytes())))
        .ok_or(PartFault::NoHasher)
}

#[cfg(test)]
mod tests;
