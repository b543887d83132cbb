use super::*;
use crate::{ClientNetworks, Config};

/// One policy, as a config states it.
fn serve_policy() -> ServePolicy {
    let yaml = "policies:\n  - {name: p, algorithm: fixed_window, limit: 5, window: 1m}\n";
    match Config::parse(yaml, |_| None) {
        Ok(mut config) => config.policies.remove(0),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn every_spelling_of_a_host_is_one_bucket() {
    for spelling in [
        "api.example.com",
        "API.Example.com",
        "api.example.com.",
        "api.example.com:8443",
        "API.example.com.:443",
    ] {
        assert_eq!(canonical_host(spelling), "api.example.com", "{spelling}");
    }
    assert_eq!(canonical_host("[::1]:80"), "[::1]");
    assert_eq!(canonical_host("[::1]"), "[::1]");
    assert_eq!(canonical_host(""), "");
}

#[test]
fn an_address_as_text_is_read_with_or_without_a_port_and_mapped_is_ipv4() {
    let ip = |t: &str| t.parse::<IpAddr>().expect("ip");
    assert_eq!(address("203.0.113.9"), Some(ip("203.0.113.9")));
    assert_eq!(address("203.0.113.9:443"), Some(ip("203.0.113.9")));
    assert_eq!(address("[2001:db8::1]:443"), Some(ip("2001:db8::1")));
    assert_eq!(address("::ffff:1.2.3.4"), Some(ip("1.2.3.4")));
    assert_eq!(address("10.*"), None);
    assert_eq!(address(""), None);
}

#[test]
fn a_bearer_part_is_the_token_of_a_bearer_authorization() {
    assert_eq!(bearer_token("Bearer abc"), Some("abc"));
    assert_eq!(bearer_token("bearer   abc "), Some("abc"));
    assert_eq!(bearer_token("Basic abc"), None);
    assert_eq!(bearer_token("Bearer "), None);
    assert_eq!(bearer_token("abc"), None);
}

#[test]
fn networks_group_addresses_told_as_text_or_worked_out() {
    let networks = IdentityPart::ClientIp(ClientNetworks::default());
    let policy = serve_policy();
    let text = |t: &'static str| shape_part(&policy, &networks, Some(Told::Text(t)), None);
    assert_eq!(
        text("2001:db8:1:2::7"),
        Ok(Cow::Borrowed("2001:db8:1:2::/64"))
    );
    assert_eq!(text("::ffff:1.2.3.4"), Ok(Cow::Borrowed("1.2.3.4")));
    assert_eq!(text(" "), Err(PartFault::Missing));
    assert_eq!(text("nope"), Err(PartFault::NotAnAddress("nope".into())));
    let told = Told::Address("::ffff:1.2.3.4".parse().expect("ip"));
    assert_eq!(
        shape_part(&policy, &networks, Some(told), None),
        Ok(Cow::Borrowed("1.2.3.4"))
    );
}

#[test]
fn secrets_are_only_ever_their_keyed_hash() {
    let policy = serve_policy();
    let hasher = SecretHasher::new(b"k");
    let key = IdentityPart::ApiKey("x-api-key".into());
    let shaped = shape_part(&policy, &key, Some(Told::Text("sk_live_1")), Some(&hasher));
    assert_eq!(shaped, Ok(Cow::Owned(hasher.hash(b"sk_live_1"))));
    let bearer = IdentityPart::Bearer;
    let shaped = shape_part(
        &policy,
        &bearer,
        Some(Told::Text("Bearer tok")),
        Some(&hasher),
    );
    assert_eq!(shaped, Ok(Cow::Owned(hasher.hash(b"tok"))));
    assert_eq!(
        shape_part(&policy, &key, Some(Told::Text("")), Some(&hasher)),
        Err(PartFault::Missing)
    );
    assert_eq!(
        shape_part(&policy, &key, Some(Told::Text("k")), None),
        Err(PartFault::NoHasher)
    );
}
