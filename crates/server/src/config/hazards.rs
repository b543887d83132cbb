//! What makes a valid config dangerous to serve, each found by one precise
//! rule (docs/config.md, Hazards): an endpoint group without a required
//! token on a listener beyond loopback, trusted proxies wider than a
//! network of proxies, a path limit a respelled path skips, a login that
//! admits everyone when its store cannot decide. `validate` prints each as
//! a warning (`--strict` fails on it); `serve` logs each at start.

use std::net::SocketAddr;

use crate::limiter::OnStoreFailure;
use ipnet::IpNet;

use super::ServeConfig;
use crate::listen::ListenAddress;
use crate::tokens::Guarded;

/// The widest IPv4 network `trusted_proxies` may name unwarned: a /16 is a
/// cluster's pod network (Kubernetes' flannel and Calico hand out /16s),
/// where a /8 is every pod, node and VPN address of an organisation.
pub const WIDEST_TRUSTED_V4: u8 = 16;
/// The same for IPv6: a /48 is one site.
pub const WIDEST_TRUSTED_V6: u8 = 48;

/// Words in a path that make a policy a login's, or a credential's: such a
/// limit must hold while its store cannot decide.
const LOGIN_WORDS: [&str; 12] = [
    "login", "logon", "signin", "sign-in", "sign_in", "session", "token", "password", "oauth",
    "otp", "mfa", "2fa",
];

/// Every hazard of `config` served on `http` (and `grpc`), in a fixed
/// order: listeners, trusted proxies, then each policy in the file's order.
pub(super) fn hazards(
    config: &ServeConfig,
    http: &ListenAddress,
    grpc: Option<&ListenAddress>,
) -> Vec<String> {
    let mut found = Vec::new();
    let required = &config.server.require_tokens;
    let listeners = [
        ("server.listen", Some(http), &Guarded::ALL[..]),
        ("server.grpc_listen", grpc, &[Guarded::Check][..]),
    ];
    for (setting, address, groups) in listeners {
        let Some(address) = address.filter(|a| beyond_loopback(a)) else {
            continue;
        };
        let open: Vec<&str> = groups
            .iter()
            .filter(|group| !required.contains(group))
            .map(|group| group.name())
            .collect();
        if !open.is_empty() {
            found.push(format!(
                "{setting} {address} is beyond loopback, but server.require_tokens does not name {}: whoever reaches it may use those endpoints without a token (reset limits with DELETE /v1/state, read client addresses from /v1/hot, spend or refund anyone's budget through /v1/check, describe any client's request to /v1/authorize); name every group in require_tokens and set its TOLLGATE_*_TOKEN",
                open.join(", ")
            ));
        }
    }
    for network in &config.server.trusted_proxies {
        if too_wide(network) {
            found.push(format!(
                "server.trusted_proxies {network} is wider than a /{WIDEST_TRUSTED_V4} (IPv4) or /{WIDEST_TRUSTED_V6} (IPv6): every address in it may set a client's address (X-Forwarded-For) and describe any request to /v1/authorize; name only your proxies' own addresses or network"
            ));
        }
    }
    for serve in &config.policies {
        let name = serve.policy.name();
        let m = &serve.matcher;
        let respellings = m.respellings();
        if let (Some(path), false) = (m.route(), respellings.is_empty()) {
            let spelled: Vec<String> = respellings
                .iter()
                .map(|r| format!("{} ({})", r.example, r.option))
                .collect();
            found.push(format!(
                "policy {name}: match {path} does not take {}: routers that serve these spellings from the same handler (Express and ASP.NET Core ignore case, Rails takes a format suffix) serve them unlimited",
                spelled.join(", ")
            ));
        }
        if serve.on_store_failure == OnStoreFailure::FailOpen
            && let Some(path) = m.route().filter(|p| login_like(p))
        {
            found.push(format!(
                "policy {name}: match {path} looks like a login, and the policy fails open: while its store cannot decide (unreachable, or a memory store full of limiting states) every attempt is admitted; set on_store_failure: fail_closed"
            ));
        }
    }
    found
}

/// Whether a listener on `address` may be reached from beyond this host:
/// any address but a loopback one or `localhost`. A host name is taken to
/// be reachable (it is resolved only when bound).
pub fn beyond_loopback(address: &ListenAddress) -> bool {
    let text = address.as_str();
    if let Ok(socket) = text.parse::<SocketAddr>() {
        return !socket.ip().is_loopback();
    }
    let host = text.rsplit_once(':').map_or(text, |(host, _)| host);
    !host.eq_ignore_ascii_case("localhost")
}

/// Whether `network` is wider than a network of proxies.
fn too_wide(network: &IpNet) -> bool {
    match network {
        IpNet::V4(v4) => v4.prefix_len() < WIDEST_TRUSTED_V4,
        IpNet::V6(v6) => v6.prefix_len() < WIDEST_TRUSTED_V6,
    }
}

/// Whether a `match` path names a login or a credential ([`LOGIN_WORDS`]).
fn login_like(path: &str) -> bool {
    let path = path.to_ascii_lowercase();
    LOGIN_WORDS.iter().any(|word| path.contains(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hazards_of(yaml: &str) -> Vec<String> {
        let token = |name: &str| name.ends_with("_TOKEN").then(|| "t".repeat(32));
        let config = ServeConfig::parse(yaml, token).expect("valid config");
        config.warnings()
    }

    #[test]
    fn a_listener_beyond_loopback_names_each_group_without_a_required_token() {
        let open = hazards_of(
            "server: {listen: 0.0.0.0:8080, require_tokens: [check, admin]}\npolicies:\n  - {name: a, algorithm: gcra, capacity: 1, refill: {tokens: 1, per: 1s}}\n",
        );
        assert_eq!(
            open,
            [
                "server.listen 0.0.0.0:8080 is beyond loopback, but server.require_tokens does not name metrics, authorize: whoever reaches it may use those endpoints without a token (reset limits with DELETE /v1/state, read client addresses from /v1/hot, spend or refund anyone's budget through /v1/check, describe any client's request to /v1/authorize); name every group in require_tokens and set its TOLLGATE_*_TOKEN"
            ]
        );
        for local in [
            "127.0.0.1:8080",
            "[::1]:8080",
            "localhost:8080",
            "127.0.0.2:1",
        ] {
            let address: ListenAddress = local.parse().expect("address");
            assert!(!beyond_loopback(&address), "{local}");
        }
        for remote in [
            "0.0.0.0:8080",
            "[::]:8080",
            "10.0.0.1:80",
            "tollgate.internal:80",
        ] {
            let address: ListenAddress = remote.parse().expect("address");
            assert!(beyond_loopback(&address), "{remote}");
        }
    }

    #[test]
    fn trusted_proxies_wider_than_a_16_are_named() {
        let wide = hazards_of(
            "server: {trusted_proxies: [10.0.0.0/8, 10.244.0.0/16, 127.0.0.1, 'fd00::/8', 'fd00:1:2::/48']}\npolicies:\n  - {name: a, algorithm: gcra, capacity: 1, refill: {tokens: 1, per: 1s}}\n",
        );
        assert_eq!(wide.len(), 2, "{wide:?}");
        assert!(wide[0].starts_with("server.trusted_proxies 10.0.0.0/8 is wider than a /16"));
        assert!(wide[1].starts_with("server.trusted_proxies fd00::/8 is wider"));
    }

    #[test]
    fn a_login_that_fails_open_or_takes_one_spelling_is_named() {
        let login = hazards_of(
            "server: {trusted_proxies: [127.0.0.1]}\npolicies:\n  - {name: login, algorithm: sliding_log, limit: 5, window: 10m, match: {methods: [POST], path: /login}}\n",
        );
        assert_eq!(
            login,
            [
                "policy login: match /login does not take /LOGIN (case_insensitive: true), /login/ (trailing_slash: ignore), /login.json (format_suffix: ignore): routers that serve these spellings from the same handler (Express and ASP.NET Core ignore case, Rails takes a format suffix) serve them unlimited",
                "policy login: match /login looks like a login, and the policy fails open: while its store cannot decide (unreachable, or a memory store full of limiting states) every attempt is admitted; set on_store_failure: fail_closed",
            ]
        );
        let hardened = hazards_of(
            "server: {trusted_proxies: [127.0.0.1]}\npolicies:\n  - {name: login, algorithm: sliding_log, limit: 5, window: 10m, on_store_failure: fail_closed, match: {methods: [POST], path: /Login, case_insensitive: true, trailing_slash: ignore, format_suffix: ignore}}\n",
        );
        assert_eq!(hardened, Vec::<String>::new());
    }
}
