use super::*;
use tollgate_config::{FormatSuffix, TrailingSlash};

fn with_match(m: &str) -> Result<ServeConfig, String> {
    let yaml = format!(
        "policies:\n  - name: x\n    algorithm: gcra\n    capacity: 1\n    refill: {{ tokens: 1, per: 1s }}\n    match: {m}\n"
    );
    ServeConfig::parse(&yaml, |_| None).map_err(|e| e.to_string())
}

fn matcher(m: &str) -> Matcher {
    match with_match(m) {
        Ok(config) => config.policies[0].matcher.clone(),
        Err(e) => panic!("match {m} was refused: {e}"),
    }
}

fn refusal(m: &str) -> String {
    match with_match(m) {
        Ok(_) => panic!("match {m} was accepted"),
        Err(e) => e,
    }
}

#[test]
fn match_path_options_default_to_exact_comparison() {
    let m = matcher("{ path: /login }");
    assert!(!m.case_insensitive);
    assert_eq!(m.trailing_slash, TrailingSlash::Strict);
}

#[test]
fn match_path_options_are_read() {
    let m = matcher("{ path_prefix: /api/, case_insensitive: true, trailing_slash: ignore }");
    assert!(m.case_insensitive);
    assert_eq!(m.trailing_slash, TrailingSlash::Ignore);
    assert!(m.matches("GET", "/API", ""));
    let strict = matcher("{ path: /login, trailing_slash: strict }");
    assert_eq!(strict.trailing_slash, TrailingSlash::Strict);
}

#[test]
fn match_format_suffix_is_read_and_strict_by_default() {
    assert_eq!(
        matcher("{ path: /login }").format_suffix,
        FormatSuffix::Strict
    );
    let m = matcher("{ path: /login, format_suffix: ignore }");
    assert_eq!(m.format_suffix, FormatSuffix::Ignore);
    assert!(m.matches("POST", "/login.json", ""));
    assert_eq!(
        matcher("{ path: /login, format_suffix: strict }").format_suffix,
        FormatSuffix::Strict
    );
    assert_eq!(
        refusal("{ format_suffix: true }"),
        r#"policy "x": match.format_suffix: must be ignore or strict, got boolean true"#
    );
}

#[test]
fn bad_match_path_options_are_refused_with_the_field_named() {
    assert_eq!(
        refusal("{ trailing_slash: \"yes\" }"),
        r#"policy "x": match.trailing_slash: must be ignore or strict, got "yes""#
    );
    // YAML reads a bare yes as a boolean.
    assert_eq!(
        refusal("{ trailing_slash: yes }"),
        r#"policy "x": match.trailing_slash: must be ignore or strict, got boolean true"#
    );
    assert_eq!(
        refusal("{ trailing_slash: 1 }"),
        r#"policy "x": match.trailing_slash: must be ignore or strict, got number 1"#
    );
    assert_eq!(
        refusal("{ case_insensitive: \"yes\" }"),
        r#"policy "x": match.case_insensitive: must be true or false, got string "yes""#
    );
}

#[test]
fn match_paths_no_request_can_have_are_refused() {
    assert_eq!(
        refusal("{ path_prefix: /api//v1/ }"),
        r#"policy "x": match.path_prefix: "/api//v1/" matches no request: requests are matched by their normalized path, here "/api/v1/" (docs/config.md, How paths are normalized)"#
    );
    assert_eq!(
        refusal("{ path: /a%20b }"),
        r#"policy "x": match.path: "/a%20b" matches no request: requests are matched by their normalized path, here "/a b" (docs/config.md, How paths are normalized)"#
    );
    assert_eq!(
        refusal("{ path: /a/../.. }"),
        r#"policy "x": match.path: "/a/../..": the path climbs above the root with `..`"#
    );
    matcher("{ path: \"/orders/{id}/{*rest}\" }");
}

#[test]
fn a_fully_qualified_match_host_is_the_plain_host() {
    let m = matcher("{ host: API.example.com. }");
    assert_eq!(m.host.as_deref(), Some("api.example.com"));
    assert!(m.matches("GET", "/", "api.example.com"));
}

#[test]
fn a_yaml_error_names_the_config_file() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, "policies: [\n").expect("write");
    let shown = path.display().to_string();
    match ServeConfig::load_with_env(&path, |_| None) {
        Ok(_) => panic!("accepted"),
        Err(e) => assert_eq!(
            e.to_string(),
            format!(
                "{shown}: config is not valid YAML: error: line 1 column 11: unclosed bracket '['\n --> {shown}:1:11\n  |\n1 | policies: [\n  |           ^ unclosed bracket '['"
            )
        ),
    }
}

#[test]
fn a_key_given_twice_is_refused_not_last_wins() {
    let yaml = "policies:\n  - name: x\n    algorithm: gcra\n    capacity: 1\n    refill: { tokens: 1, per: 1s }\n    match: { path: /a, path: /b }\n";
    assert_eq!(
        ServeConfig::parse(yaml, |_| None)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Err(r#"config is not valid YAML: duplicate key "path" at line 6 column 24"#.to_owned())
    );
}

fn with_identity(identity: &str) -> Result<ServeConfig, String> {
    let yaml = format!(
        "policies:\n  - name: login\n    algorithm: gcra\n    capacity: 5\n    refill: {{ tokens: 1, per: 1s }}\n    identity: {identity}\n"
    );
    ServeConfig::parse(&yaml, |_| None).map_err(|e| e.to_string())
}

#[test]
fn client_ip_keys_ipv6_per_64_unless_a_policy_says_otherwise() {
    let networks = |identity: &str| match with_identity(identity) {
        Ok(config) => config.policies[0].identity.clone(),
        Err(e) => panic!("identity {identity} was refused: {e}"),
    };
    let default = ClientNetworks {
        ipv4_prefix: 32,
        ipv6_prefix: 64,
    };
    assert_eq!(networks("[client_ip]"), [IdentityPart::ClientIp(default)]);
    assert_eq!(
        networks("[{client_ip: {ipv6_prefix: 56}}]"),
        [IdentityPart::ClientIp(ClientNetworks {
            ipv4_prefix: 32,
            ipv6_prefix: 56
        })]
    );
    assert_eq!(
        networks("[{client_ip: {ipv6_prefix: 128, ipv4_prefix: 24}}, method]"),
        [
            IdentityPart::ClientIp(ClientNetworks {
                ipv4_prefix: 24,
                ipv6_prefix: 128
            }),
            IdentityPart::Method
        ]
    );
    assert_eq!(
        networks("[{client_ip: {}}]"),
        [IdentityPart::ClientIp(default)]
    );
    assert_eq!(
        IdentityPart::ClientIp(ClientNetworks {
            ipv4_prefix: 32,
            ipv6_prefix: 56
        })
        .describe(),
        "client_ip:ipv4_prefix=32,ipv6_prefix=56"
    );
    assert_eq!(IdentityPart::ClientIp(default).describe(), "client_ip");
}

#[test]
fn client_ip_prefixes_outside_their_range_are_refused_with_the_field_named() {
    let refused = |identity: &str| match with_identity(identity) {
        Ok(_) => panic!("identity {identity} was accepted"),
        Err(e) => e,
    };
    for (identity, words) in [
        (
            "[{client_ip: {ipv6_prefix: 0}}]",
            "identity[0].client_ip.ipv6_prefix: 0 is not a prefix length (expected 1 to 128)",
        ),
        (
            "[{client_ip: {ipv6_prefix: 129}}]",
            "identity[0].client_ip.ipv6_prefix: 129 is not a prefix length (expected 1 to 128)",
        ),
        (
            "[method, {client_ip: {ipv4_prefix: 33}}]",
            "identity[1].client_ip.ipv4_prefix: 33 is not a prefix length (expected 1 to 32)",
        ),
        (
            "[{client_ip: {ipv6_prefix: \"64\"}}]",
            "identity[0].client_ip.ipv6_prefix: \"64\" is not a prefix length",
        ),
        (
            "[{client_ip: {ipv6: 64}}]",
            "identity[0].client_ip: \"ipv6\" is not an option (expected ipv6_prefix, ipv4_prefix)",
        ),
        (
            "[{client_ip: 64}]",
            "identity[0].client_ip: expected a mapping of ipv6_prefix and ipv4_prefix",
        ),
    ] {
        let message = refused(identity);
        assert!(message.contains("login"), "{message}");
        assert!(message.contains(words), "{identity}: {message}");
    }
}

#[test]
fn the_server_reads_a_request_by_the_settings_every_door_reads() {
    let yaml = "server: {trusted_proxies: [10.0.0.0/24, 192.168.1.9], max_key_bytes: 64, request_id_header: Idempotency-Key, listen: 127.0.0.1:9000}\npolicies:\n  - {name: p, algorithm: fixed_window, limit: 10, window: 1s}\n";
    let served = ServeConfig::parse(yaml, |_| None).expect("valid");
    let shared = Config::parse(yaml, |_| None).expect("valid");
    assert_eq!(served.server.request(), shared.request);
    assert_eq!(served.request, shared.request);
    assert_eq!(shared.request.max_key_bytes, 64);
    assert_eq!(shared.request.trusted_proxies.len(), 2);
    let defaults = ServeConfig::parse(
        "policies:\n  - {name: p, algorithm: fixed_window, limit: 10, window: 1s}\n",
        |_| None,
    )
    .expect("valid");
    assert_eq!(
        defaults.server.request(),
        tollgate_config::RequestSettings::default()
    );
}
