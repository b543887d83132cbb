//! The request being limited, as forward auth describes it (or as a
//! service receives it), whether a policy's `match` takes it, and the
//! identity and cost the policy takes from it, by the config's rules
//! (`tollgate-config`): one reading for every door.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::net::{IpAddr, SocketAddr};

use http::header::{AUTHORIZATION, AsHeaderName, HOST};
use http::request::Parts;
use http::{HeaderMap, HeaderName};
use ipnet::IpNet;
use tollgate_config::{
    ComposeFault, CostRule, IdentityPart, PartFault, ServePolicy, Told, compose, normalize,
    shape_part,
};
use tollgate_core::{Identity, SecretHasher, quote};

use crate::forward_auth::ForwardAuth;
use crate::peer::{Peer, is_trusted};

/// The original request behind a forward-auth call, as the configured
/// proxy describes it (`server.forward_auth`), its path normalized the way
/// routers see it ([`normalize`]).
#[derive(Debug)]
pub struct Forwarded<'a> {
    /// The original method.
    pub method: &'a str,
    /// The normalized path, without its query string.
    pub path: Cow<'a, str>,
    /// The original host, as the proxy names it.
    pub host: &'a str,
    /// The forwarded request's header fields.
    pub headers: &'a HeaderMap,
    /// Who asked: the proxy, or the client itself.
    pub peer: Peer,
    trusted_proxies: &'a [IpNet],
    /// Worked out on first use: only `client_ip` identities need it.
    client_ip: OnceCell<Result<IpAddr, RequestFault>>,
}

// Names known at compile time, so a lookup hashes without parsing the name.
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

pub use tollgate_config::RequestFault;

/// The one value of header `name`, trimmed; `None` when absent or blank.
/// A header sent twice is ambiguous (which copy would the application
/// read?) and one that is not UTF-8 cannot be compared: both are faults.
pub fn single_header<'h, N>(
    headers: &'h HeaderMap,
    name: &N,
) -> Result<Option<&'h str>, RequestFault>
where
    N: std::fmt::Display + ?Sized,
    for<'n> &'n N: AsHeaderName,
{
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(RequestFault(format!(
            "header {} appears more than once: send it once",
            name.to_string().to_ascii_lowercase()
        )));
    }
    let text = std::str::from_utf8(first.as_bytes())
        .map_err(|_| {
            RequestFault(format!(
                "header {} is not valid UTF-8",
                name.to_string().to_ascii_lowercase()
            ))
        })?
        .trim();
    Ok((!text.is_empty()).then_some(text))
}

impl<'a> Forwarded<'a> {
    /// Reads the request description from the headers of
    /// `server.forward_auth`, believed only from a trusted proxy; an
    /// untrusted peer that sends them is refused (it could otherwise pick
    /// which policies apply to it). Without them, the call describes itself
    /// (its method, its path below `/v1/authorize/`, its `Host`).
    pub fn read(
        headers: &'a HeaderMap,
        own_method: &'a str,
        own_path: &'a str,
        peer: Peer,
        forward: &ForwardAuth,
        trusted_proxies: &'a [IpNet],
    ) -> Result<Self, RequestFault> {
        let trusted = peer.is_trusted(trusted_proxies);
        let described = |name: &Option<HeaderName>| -> Result<Option<&'a str>, RequestFault> {
            let Some(name) = name else { return Ok(None) };
            let value = single_header(headers, name)?;
            if value.is_some() && !trusted {
                return Err(RequestFault(format!(
                    "header {name} describes the request, but this caller ({}) is not in server.trusted_proxies: only a trusted proxy may describe a request",
                    peer.ip()
                        .map_or_else(|| peer.to_string(), |ip| ip.to_string())
                )));
            }
            Ok(value)
        };
        let uri = described(&forward.uri)?;
        let method = described(&forward.method)?.unwrap_or(own_method);
        let target = match (uri, &forward.uri) {
            (Some(uri), _) => uri,
            // A trusted proxy of a header-describing family must describe:
            // falling back to `/v1/authorize` would match no policy.
            (None, Some(name)) if trusted => {
                return Err(RequestFault(format!(
                    "header {name} is missing: server.forward_auth is {}, so the proxy must send the original request's URI in it",
                    forward.family
                )));
            }
            (None, _) => own_path,
        };
        let path = normalize(target).map_err(|fault| RequestFault(fault.to_string()))?;
        let host = match described(&forward.host)? {
            Some(host) => host,
            None => single_header(headers, &HOST)?.unwrap_or(""),
        };
        Ok(Self {
            method,
            path,
            host,
            headers,
            peer,
            trusted_proxies,
            client_ip: OnceCell::new(),
        })
    }

    /// A service's own request, limited where it is served (a tower
    /// layer): its method, its path and its host (`Host`, or the URI's
    /// authority in HTTP/2), with the client's address from `peer` and
    /// the `X-Forwarded-For` of `trusted_proxies` in front of it.
    pub fn own(
        parts: &'a Parts,
        peer: Peer,
        trusted_proxies: &'a [IpNet],
    ) -> Result<Self, RequestFault> {
        let mut request = Self::read(
            &parts.headers,
            parts.method.as_str(),
            parts.uri.path(),
            peer,
            &ForwardAuth::envoy(),
            trusted_proxies,
        )?;
        if request.host.is_empty() {
            request.host = parts.uri.host().unwrap_or("");
        }
        Ok(request)
    }

    /// The client's address (see [`client_ip`]), worked out once. On the
    /// proxy socket the proxy must name it: there is no peer address to
    /// fall back on, and one shared bucket for every client is never one.
    pub fn client_ip(&self) -> Result<IpAddr, RequestFault> {
        self.client_ip
            .get_or_init(|| client_ip(self.headers, self.peer.ip(), self.trusted_proxies))
            .clone()
    }
}

/// One `X-Forwarded-For` hop: an address, optionally with a port
/// (`203.0.113.9`, `203.0.113.9:443`, `[2001:db8::1]:443`).
fn hop_address(hop: &str) -> Option<IpAddr> {
    hop.parse::<IpAddr>()
        .ok()
        .or_else(|| hop.parse::<SocketAddr>().ok().map(|s| s.ip()))
}

/// The client address: the socket peer, unless the peer is a trusted proxy,
/// in which case the rightmost untrusted `X-Forwarded-For` hop (the first one
/// no trusted proxy vouches for), else `X-Real-IP`. Hops are read from the
/// right until that one; a hop read on the way that is not an address is a
/// fault (naming the header), while what stands left of the client's hop
/// was written by the client and is never read. An IPv4-mapped address
/// comes back as its IPv4 address, so one client has one spelling.
///
/// On the proxy socket (`peer` is `None`) the proxy is trusted and has no
/// address: without either header there is no client address at all.
pub fn client_ip(
    headers: &HeaderMap,
    peer: impl Into<Option<IpAddr>>,
    trusted: &[IpNet],
) -> Result<IpAddr, RequestFault> {
    told_client_ip(headers, peer.into(), trusted).map(|ip| ip.to_canonical())
}

fn told_client_ip(
    headers: &HeaderMap,
    peer: Option<IpAddr>,
    trusted: &[IpNet],
) -> Result<IpAddr, RequestFault> {
    if let Some(peer) = peer
        && !is_trusted(trusted, &peer)
    {
        return Ok(peer);
    }
    let mut leftmost = None;
    let mut any = false;
    for value in headers.get_all(X_FORWARDED_FOR).iter().rev() {
        let text = std::str::from_utf8(value.as_bytes())
            .map_err(|_| RequestFault("header x-forwarded-for is not valid UTF-8".into()))?;
        for hop in text.rsplit(',') {
            let hop = hop.trim();
            any = true;
            let ip = hop_address(hop).ok_or_else(|| {
                RequestFault(format!(
                    "header x-forwarded-for: {} is not an IP address",
                    quote(hop)
                ))
            })?;
            if !is_trusted(trusted, &ip) {
                return Ok(ip);
            }
            leftmost = Some(ip);
        }
    }
    if let Some(ip) = leftmost {
        return Ok(ip);
    }
    debug_assert!(!any);
    match single_header(headers, &X_REAL_IP)? {
        Some(text) => hop_address(text).ok_or_else(|| {
            RequestFault(format!(
                "header x-real-ip: {} is not an IP address",
                quote(text)
            ))
        }),
        None => peer.ok_or_else(|| {
            RequestFault(
                "this request came on server.proxy_socket without X-Forwarded-For or X-Real-IP: the proxy must name the client's address".to_owned(),
            )
        }),
    }
}

/// The identity `policy` takes from `request`: what forward auth reads for
/// each part, shaped by the one identity code every door calls. A missing
/// part is a fault, never a shared bucket.
pub fn identity_of(
    policy: &ServePolicy,
    request: &Forwarded<'_>,
    hasher: Option<&SecretHasher>,
    max_key_bytes: usize,
) -> Result<Identity, RequestFault> {
    let name = policy.policy.name();
    let mut values: Vec<(&str, Cow<'_, str>)> = Vec::with_capacity(policy.identity.len());
    for part in &policy.identity {
        let told = match part {
            IdentityPart::Header(header) | IdentityPart::ApiKey(header) => {
                single_header(request.headers, header.as_str())?.map(Told::Text)
            }
            IdentityPart::Bearer => single_header(request.headers, &AUTHORIZATION)?.map(Told::Text),
            IdentityPart::ClientIp(_) => Some(Told::Address(request.client_ip()?)),
            IdentityPart::Method => Some(Told::Text(request.method)),
            IdentityPart::Path | IdentityPart::Route => Some(Told::Text(&request.path)),
            IdentityPart::Host => Some(Told::Text(request.host)),
            IdentityPart::Literal(_) => None,
        };
        let value = shape_part(policy, part, told, hasher).map_err(|fault| match fault {
            PartFault::Missing => RequestFault(format!(
                "policy {name}: identity part {} is missing from the request",
                missing_part(part)
            )),
            PartFault::NotAnAddress(text) => RequestFault(format!(
                "policy {name}: identity part client_ip: {text:?} is not an IP address"
            )),
            PartFault::NoHasher => RequestFault("no identity hashing key is configured".into()),
        })?;
        values.push((part.name(), value));
    }
    compose(values.iter().map(|(n, v)| (*n, v.as_ref())), max_key_bytes).map_err(
        |fault| match fault {
            ComposeFault::Parts(e) => RequestFault(format!("policy {name}: {e}")),
            ComposeFault::TooLong(_) => RequestFault(format!(
                "policy {name}: the identity is longer than {max_key_bytes} bytes"
            )),
        },
    )
}

/// Whether `policy`'s `match` takes `request`, and if so the identity and
/// cost it charges: the one step from a request to a policy's check.
pub fn policy_check(
    policy: &ServePolicy,
    request: &Forwarded<'_>,
    hasher: Option<&SecretHasher>,
    max_key_bytes: usize,
) -> Result<Option<(Identity, u64)>, RequestFault> {
    if !policy
        .matcher
        .matches(request.method, &request.path, request.host)
    {
        return Ok(None);
    }
    let identity = identity_of(policy, request, hasher, max_key_bytes)?;
    Ok(Some((identity, cost_of(policy, request.headers)?)))
}

/// How forward auth names a part a request left out.
fn missing_part(part: &IdentityPart) -> String {
    match part {
        IdentityPart::Header(name) => format!("header {name}"),
        IdentityPart::ApiKey(name) => format!("api_key (header {name})"),
        IdentityPart::Bearer => "bearer (Authorization: Bearer <token>)".to_owned(),
        other => other.name().to_owned(),
    }
}

/// The cost `policy` charges for `request`.
pub fn cost_of(policy: &ServePolicy, headers: &HeaderMap) -> Result<u64, RequestFault> {
    let (name, min, max, default) = match &policy.cost {
        CostRule::Constant(c) => return Ok(*c),
        CostRule::Header {
            name,
            min,
            max,
            default,
        } => (name, min, max, default),
    };
    let Some(text) = single_header(headers, name.as_str())? else {
        if headers.contains_key(name.as_str()) {
            return Err(RequestFault(format!(
                "policy {}: header {name} is empty: send a whole number from {min} to {max}, or leave it out",
                policy.policy.name()
            )));
        }
        return Ok(*default);
    };
    let cost: u64 = text.parse().map_err(|_| {
        RequestFault(format!(
            "policy {}: header {name} must be a whole number from {min} to {max}, got {}",
            policy.policy.name(),
            quote(text)
        ))
    })?;
    if cost > *max {
        return Err(RequestFault(format!(
            "policy {}: header {name} is {cost}, above the maximum {max}",
            policy.policy.name()
        )));
    }
    if cost < *min {
        return Err(RequestFault(format!(
            "policy {}: header {name} is {cost}, below the minimum {min}",
            policy.policy.name()
        )));
    }
    Ok(cost)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_config::ClientNetworks;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().expect("valid header"));
        }
        h
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    #[test]
    fn client_ip_keys_are_networks_ipv6_per_64_and_ipv4_per_address() {
        let default = ClientNetworks::default();
        let cases = [
            ("198.51.100.77", "198.51.100.77"),
            ("::ffff:198.51.100.77", "198.51.100.77"),
            ("2001:db8:1:2::1", "2001:db8:1:2::/64"),
            ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
            ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
            ("::1", "::/64"),
        ];
        for (address, key) in cases {
            assert_eq!(default.key(ip(address)), key, "{address}");
        }
        let wide = ClientNetworks {
            ipv4_prefix: 24,
            ipv6_prefix: 56,
        };
        assert_eq!(wide.key(ip("2001:db8:1:2ff::9")), "2001:db8:1:200::/56");
        assert_eq!(wide.key(ip("::ffff:198.51.100.77")), "198.51.100.0/24");
        let exact = ClientNetworks {
            ipv4_prefix: 32,
            ipv6_prefix: 128,
        };
        assert_eq!(exact.key(ip("2001:db8::1")), "2001:db8::1");
    }

    #[test]
    fn a_mapped_address_is_one_client_and_one_proxy_with_its_ipv4_spelling() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().expect("net")];
        let h = headers(&[("x-forwarded-for", "::ffff:203.0.113.9")]);
        // A dual-stack socket's peer is a mapped address: still the proxy.
        let mapped_proxy = ip("::ffff:10.0.0.7");
        assert_eq!(client_ip(&h, mapped_proxy, &trusted), Ok(ip("203.0.113.9")));
        // A hop spelled mapped is the proxy it names, and is skipped.
        let hops = headers(&[("x-forwarded-for", "203.0.113.9, ::ffff:10.0.0.9")]);
        assert_eq!(
            client_ip(&hops, ip("10.0.0.7"), &trusted),
            Ok(ip("203.0.113.9"))
        );
        // An untrusted mapped peer is its IPv4 address.
        let stranger = ip("::ffff:192.0.2.1");
        assert_eq!(client_ip(&h, stranger, &trusted), Ok(ip("192.0.2.1")));
        // A network written mapped still matches.
        let mapped_net: Vec<IpNet> = vec!["::ffff:10.0.0.0/104".parse().expect("net")];
        assert_eq!(
            client_ip(&h, mapped_proxy, &mapped_net),
            Ok(ip("203.0.113.9"))
        );
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().expect("net")];
        let h = headers(&[("x-forwarded-for", "203.0.113.9, 10.0.0.7")]);
        let proxy = ip("10.0.0.1");
        let stranger = ip("198.51.100.1");
        assert_eq!(client_ip(&h, proxy, &trusted), Ok(ip("203.0.113.9")));
        assert_eq!(client_ip(&h, stranger, &trusted), Ok(stranger));
        let spoof = headers(&[("x-forwarded-for", "1.2.3.4, 203.0.113.9")]);
        assert_eq!(client_ip(&spoof, proxy, &trusted), Ok(ip("203.0.113.9")));
        let real = headers(&[("x-real-ip", "203.0.113.5")]);
        assert_eq!(client_ip(&real, proxy, &trusted), Ok(ip("203.0.113.5")));
    }

    #[test]
    fn forwarded_for_hops_are_read_from_the_right_across_repeated_headers() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().expect("net")];
        let proxy = ip("10.0.0.1");
        // Two header lines are one list, in order.
        let h = headers(&[
            ("x-forwarded-for", "198.51.100.7"),
            ("x-forwarded-for", "203.0.113.9:5555, 10.0.0.7"),
        ]);
        assert_eq!(client_ip(&h, proxy, &trusted), Ok(ip("203.0.113.9")));
        // What the client wrote left of its own hop is never read.
        let junk = headers(&[("x-forwarded-for", "not-an-ip, 203.0.113.9")]);
        assert_eq!(client_ip(&junk, proxy, &trusted), Ok(ip("203.0.113.9")));
        let v6 = headers(&[("x-forwarded-for", "[2001:db8::1]:443")]);
        assert_eq!(client_ip(&v6, proxy, &trusted), Ok(ip("2001:db8::1")));
        let all_trusted = headers(&[("x-forwarded-for", "10.0.0.9, 10.0.0.7")]);
        assert_eq!(client_ip(&all_trusted, proxy, &trusted), Ok(ip("10.0.0.9")));
    }

    #[test]
    fn an_unreadable_forwarded_for_is_a_fault_naming_the_header() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().expect("net")];
        let proxy = ip("10.0.0.1");
        let bad = headers(&[("x-forwarded-for", "203.0.113.9, garbage")]);
        assert_eq!(
            client_ip(&bad, proxy, &trusted),
            Err(RequestFault(
                "header x-forwarded-for: \"garbage\" is not an IP address".into()
            ))
        );
        let real = headers(&[("x-real-ip", "nope")]);
        assert_eq!(
            client_ip(&real, proxy, &trusted),
            Err(RequestFault(
                "header x-real-ip: \"nope\" is not an IP address".into()
            ))
        );
        // From an untrusted peer the header is not read at all.
        assert_eq!(
            client_ip(&bad, ip("192.0.2.1"), &trusted),
            Ok(ip("192.0.2.1"))
        );
    }

    #[test]
    fn on_the_proxy_socket_the_proxy_must_name_the_client() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().expect("net")];
        let h = headers(&[("x-forwarded-for", "203.0.113.9, 10.0.0.7")]);
        assert_eq!(client_ip(&h, None, &trusted), Ok(ip("203.0.113.9")));
        let real = headers(&[("x-real-ip", "203.0.113.5")]);
        assert_eq!(client_ip(&real, None, &[]), Ok(ip("203.0.113.5")));
        // No address to fall back on: a fault, never one shared bucket.
        assert_eq!(
            client_ip(&headers(&[]), None, &trusted),
            Err(RequestFault(
                "this request came on server.proxy_socket without X-Forwarded-For or X-Real-IP: the proxy must name the client's address".into()
            ))
        );
    }

    #[test]
    fn a_repeated_or_non_utf8_header_is_ambiguous() {
        let twice = headers(&[("x-tenant", "d1"), ("x-tenant", "d2")]);
        assert_eq!(
            single_header(&twice, "x-tenant"),
            Err(RequestFault(
                "header x-tenant appears more than once: send it once".into()
            ))
        );
        let mut latin1 = HeaderMap::new();
        latin1.insert(
            "x-tenant",
            http::HeaderValue::from_bytes(b"caf\xe9").expect("obs-text value"),
        );
        assert_eq!(
            single_header(&latin1, "x-tenant"),
            Err(RequestFault("header x-tenant is not valid UTF-8".into()))
        );
        let mut utf8 = HeaderMap::new();
        utf8.insert(
            "x-tenant",
            http::HeaderValue::from_bytes("café".as_bytes()).expect("utf-8 value"),
        );
        assert_eq!(single_header(&utf8, "x-tenant"), Ok(Some("café")));
        let blank = headers(&[("x-tenant", "  ")]);
        assert_eq!(single_header(&blank, "x-tenant"), Ok(None));
    }
}
