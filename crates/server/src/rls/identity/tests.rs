use super::*;
use crate::config::ServeConfig;

/// The identity's text is part of every Redis key an RLS limit has
/// written: it must not change between versions.
#[test]
fn a_descriptor_identity_is_the_length_prefixed_domain_and_entries() {
    let entries = [("key", "value"), ("remote_address", "10.0.0.1")];
    let identity = descriptor_identity("edge", entries.into_iter(), None, 1024);
    assert_eq!(
        identity,
        Ok(Identity::value(
            "rls:4:edge|3:key5:value|14:remote_address8:10.0.0.1"
        ))
    );
    let shared = [None, Some("10.*")];
    let identity = descriptor_identity("edge", entries.into_iter(), Some(&shared), 1024);
    assert_eq!(
        identity,
        Ok(Identity::value(
            "rls:4:edge|3:key5:value|14:remote_address4:10.*"
        ))
    );
    let refused = descriptor_identity("edge", entries.into_iter(), None, 40);
    assert_eq!(
        refused,
        Err(IdentityFault::Refused(
            "the descriptor's entries take 51 bytes; at most 40 are accepted (server.max_key_bytes)"
                .to_owned()
        ))
    );
}

/// `login`, keyed by the client's network and an API key.
fn login() -> ServePolicy {
    let yaml = "policies:
  - name: login
    algorithm: fixed_window
    limit: 5
    window: 1m
    identity: [client_ip, {api_key: X-Api-Key}, {header: Tenant}]
";
    let env = |name: &str| (name == "TOLLGATE_IDENTITY_KEY").then(|| "k".repeat(32));
    match ServeConfig::parse(yaml, env) {
        Ok(mut config) => config.policies.remove(0),
        Err(e) => panic!("{e}"),
    }
}

fn entries<'a>(pairs: &[(&'a str, &'a str)]) -> Vec<Entry<'a>> {
    pairs
        .iter()
        .map(|(key, value)| Entry { key, value })
        .collect()
}

#[test]
fn a_bound_descriptor_is_keyed_by_the_policys_identity_rules() {
    let policy = login();
    let hasher = SecretHasher::new(b"k");
    let bound = |pairs: &[(&str, &str)]| {
        bound_identity(&policy, &entries(pairs), None, Some(&hasher), 1024)
    };
    let hashed = hasher.hash(b"sk_live_1");
    let expected = Identity::composite([
        ("client_ip", "2001:db8:1:2::/64"),
        ("api_key", hashed.as_str()),
        ("tenant", "acme"),
    ])
    .expect("valid");
    let one = [
        ("client_ip", "2001:db8:1:2::7"),
        ("api_key", "sk_live_1"),
        ("Tenant", "acme"),
    ];
    assert_eq!(bound(&one), Ok(expected.clone()));
    // Envoy's `remote_address` is the client_ip part; a /64 is one client.
    let two = [
        ("remote_address", "2001:db8:1:2:ffff::1"),
        ("api_key", " sk_live_1 "),
        ("tenant", "acme"),
    ];
    assert_eq!(bound(&two), Ok(expected));
    let mapped = bound(&[("client_ip", "::ffff:1.2.3.4")]);
    assert_eq!(mapped, bound(&[("client_ip", "1.2.3.4")]));
    let key = bound(&[("api_key", "sk_live_1")]).expect("keyed");
    assert!(!format!("{key:?}{key}").contains("sk_live"), "{key}");
}

#[test]
fn an_empty_or_unreadable_part_is_refused_by_the_client_not_by_envoy() {
    let policy = login();
    let hasher = SecretHasher::new(b"k");
    let bound = |pairs: &[(&str, &str)]| {
        bound_identity(&policy, &entries(pairs), None, Some(&hasher), 1024)
    };
    let refused = |text: &str| Err(IdentityFault::Refused(text.to_owned()));
    assert_eq!(
        bound(&[("client_ip", "")]),
        refused("policy login: identity part client_ip is empty")
    );
    assert_eq!(
        bound(&[("api_key", "  ")]),
        refused("policy login: identity part api_key is empty")
    );
    assert_eq!(
        bound(&[("client_ip", "1.2.3.x")]),
        refused("policy login: identity part client_ip is not an IP address")
    );
    assert_eq!(
        bound(&[("plan", "")]),
        refused("policy login: entries[0] has an empty value")
    );
    assert_eq!(
        bound(&[("client_ip", "1.2.3.4"), ("remote_address", "1.2.3.4")]),
        Err(IdentityFault::Invalid(
            "identity part \"client_ip\" appears twice".to_owned()
        ))
    );
}
