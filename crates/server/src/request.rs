//! The request being limited, as forward auth describes it, and the
//! identity and cost a policy takes from it.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use axum::http::header::{AUTHORIZATION, AsHeaderName, HOST};
use axum::http::{HeaderMap, HeaderName};
use ipnet::IpNet;
use tollgate_core::{Identity, SecretHasher};

use crate::config::{CostRule, IdentityPart, ServePolicy};

/// The original request behind a forward-auth call.
#[derive(Debug)]
pub struct Forwarded<'a> {
    pub method: &'a str,
    /// The path without its query string.
    pub path: &'a str,
    pub host: &'a str,
    pub client_ip: IpAddr,
    pub headers: &'a HeaderMap,
}

// Names known at compile time, so a lookup hashes without parsing the name.
const X_ORIGINAL_METHOD: HeaderName = HeaderName::from_static("x-original-method");
const X_ORIGINAL_URI: HeaderName = HeaderName::from_static("x-original-uri");
const X_FORWARDED_METHOD: HeaderName = HeaderName::from_static("x-forwarded-method");
const X_FORWARDED_URI: HeaderName = HeaderName::from_static("x-forwarded-uri");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

fn header(headers: &HeaderMap, name: impl AsHeaderName) -> Option<&str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

impl<'a> Forwarded<'a> {
    /// Reads nginx (`X-Original-*`), Traefik and Envoy (`X-Forwarded-*`)
    /// headers, falling back to the call's own method, path and host.
    pub fn read(
        headers: &'a HeaderMap,
        own_method: &'a str,
        own_path: &'a str,
        peer: SocketAddr,
        trusted_proxies: &[IpNet],
    ) -> Self {
        let method = header(headers, X_ORIGINAL_METHOD)
            .or_else(|| header(headers, X_FORWARDED_METHOD))
            .unwrap_or(own_method);
        let uri = header(headers, X_ORIGINAL_URI)
            .or_else(|| header(headers, X_FORWARDED_URI))
            .unwrap_or(own_path);
        let path = uri.split(['?', '#']).next().unwrap_or(uri);
        let host = header(headers, X_FORWARDED_HOST)
            .or_else(|| header(headers, HOST))
            .unwrap_or("");
        Self {
            method,
            path,
            host,
            client_ip: client_ip(headers, peer.ip(), trusted_proxies),
            headers,
        }
    }
}

/// The client address: the socket peer, unless the peer is a trusted proxy,
/// in which case the rightmost untrusted `X-Forwarded-For` hop (the first one
/// no trusted proxy vouches for), else `X-Real-IP`.
pub fn client_ip(headers: &HeaderMap, peer: IpAddr, trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let hops: Vec<IpAddr> = headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|hop| hop.trim().parse().ok())
        .collect();
    if let Some(ip) = hops.iter().rev().find(|ip| !is_trusted(ip)) {
        return *ip;
    }
    if let Some(first) = hops.first() {
        return *first;
    }
    header(headers, X_REAL_IP)
        .and_then(|v| v.parse().ok())
        .unwrap_or(peer)
}

/// Why a request could not be given an identity or a cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestFault(pub String);

/// The identity `policy` takes from `request`. A missing part is a fault,
/// never a shared bucket.
pub fn identity_of(
    policy: &ServePolicy,
    request: &Forwarded<'_>,
    hasher: Option<&SecretHasher>,
    max_key_bytes: usize,
) -> Result<Identity, RequestFault> {
    let missing = |what: String| {
        RequestFault(format!(
            "policy {}: identity part {what} is missing from the request",
            policy.policy.name()
        ))
    };
    let mut values: Vec<(&str, Cow<'_, str>)> = Vec::with_capacity(policy.identity.len());
    for part in &policy.identity {
        let value = match part {
            IdentityPart::Header(name) => Cow::Borrowed(
                header(request.headers, name.as_str())
                    .ok_or_else(|| missing(format!("header {name}")))?,
            ),
            IdentityPart::ApiKey(name) => {
                let raw = header(request.headers, name.as_str())
                    .ok_or_else(|| missing(format!("api_key (header {name})")))?;
                Cow::Owned(hash(hasher, raw)?)
            }
            IdentityPart::Bearer => {
                let token = header(request.headers, AUTHORIZATION)
                    .and_then(|v| {
                        let (scheme, token) = v.split_once(' ')?;
                        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
                    })
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| missing("bearer (Authorization: Bearer <token>)".into()))?;
                Cow::Owned(hash(hasher, token)?)
            }
            IdentityPart::ClientIp => Cow::Owned(request.client_ip.to_string()),
            IdentityPart::Method => upper(request.method),
            IdentityPart::Path => Cow::Borrowed(request.path),
            IdentityPart::Route => Cow::Borrowed(policy.matcher.route().unwrap_or(request.path)),
            IdentityPart::Host => {
                if request.host.is_empty() {
                    return Err(missing("host".into()));
                }
                lower(request.host)
            }
            IdentityPart::Literal(v) => Cow::Borrowed(v.as_str()),
        };
        values.push((part.name(), value));
    }
    let identity = Identity::composite(values.iter().map(|(n, v)| (*n, v.as_ref())))
        .map_err(|e| RequestFault(format!("policy {}: {e}", policy.policy.name())))?;
    if identity.as_bytes().len() > max_key_bytes {
        return Err(RequestFault(format!(
            "policy {}: the identity is longer than {max_key_bytes} bytes",
            policy.policy.name()
        )));
    }
    Ok(identity)
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

fn hash(hasher: Option<&SecretHasher>, secret: &str) -> Result<String, RequestFault> {
    // Config loading guarantees a hasher whenever a policy has a secret part.
    hasher
        .map(|h| h.hash(secret.as_bytes()))
        .ok_or_else(|| RequestFault("no identity hashing key is configured".into()))
}

/// The cost `policy` charges for `request`.
pub fn cost_of(policy: &ServePolicy, headers: &HeaderMap) -> Result<u64, RequestFault> {
    match &policy.cost {
        CostRule::Constant(c) => Ok(*c),
        CostRule::Header { name, max, default } => match headers.get(name.as_str()) {
            None => Ok(*default),
            Some(v) => {
                let text = v.to_str().unwrap_or("").trim();
                let cost: u64 = text.parse().map_err(|_| {
                    RequestFault(format!(
                        "policy {}: header {name} must be a whole number ≥ 0, got {text:?}",
                        policy.policy.name()
                    ))
                })?;
                if cost > *max {
                    return Err(RequestFault(format!(
                        "policy {}: header {name} is {cost}, above the maximum {max}",
                        policy.policy.name()
                    )));
                }
                Ok(cost)
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().expect("valid header"));
        }
        h
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().expect("net")];
        let h = headers(&[("x-forwarded-for", "203.0.113.9, 10.0.0.7")]);
        let proxy: IpAddr = "10.0.0.1".parse().expect("ip");
        let stranger: IpAddr = "198.51.100.1".parse().expect("ip");
        assert_eq!(
            client_ip(&h, proxy, &trusted),
            "203.0.113.9".parse::<IpAddr>().expect("ip")
        );
        assert_eq!(client_ip(&h, stranger, &trusted), stranger);
        let spoof = headers(&[("x-forwarded-for", "1.2.3.4, 203.0.113.9")]);
        assert_eq!(
            client_ip(&spoof, proxy, &trusted),
            "203.0.113.9".parse::<IpAddr>().expect("ip")
        );
        let real = headers(&[("x-real-ip", "203.0.113.5")]);
        assert_eq!(
            client_ip(&real, proxy, &trusted),
            "203.0.113.5".parse::<IpAddr>().expect("ip")
        );
    }
}
