use super::*;

/// A change to one setting.
type Edit = fn(&mut ServerSettings);

/// Each start-only setting's name and a change to it alone.
fn one_change_each() -> Vec<(&'static str, Edit)> {
    vec![
        ("server.listen", |s| s.listen = address("127.0.0.1:9090")),
        ("server.grpc_listen", |s| {
            s.grpc_listen = Some(address("127.0.0.1:8081"));
        }),
        ("server.proxy_socket", |s| {
            s.proxy_socket = Some(ProxySocket {
                path: "proxy.sock".into(),
                mode: 0o600,
            });
        }),
        ("server.http_workers", |s| s.http_workers = 3),
        ("server.max_connections", |s| s.max_connections = 7),
        ("server.max_connections_per_peer", |s| {
            s.max_connections_per_peer = 2;
        }),
        ("server.proxy_reserved_connections", |s| {
            s.proxy_reserved_connections = Some(1);
        }),
        ("server.header_timeout_ms", |s| s.header_timeout_ms = 100),
        ("server.proxy_idle_timeout_ms", |s| {
            s.proxy_idle_timeout_ms = 100;
        }),
        ("server.request_timeout_ms", |s| s.request_timeout_ms = 5),
        ("server.max_headers", |s| s.max_headers = 32),
        ("server.max_header_bytes", |s| s.max_header_bytes = 8192),
        ("server.tls", |s| {
            s.tls = Some(TlsPaths {
                cert: "cert.pem".into(),
                key: "key.pem".into(),
            });
        }),
        ("server.trace", |s| {
            s.trace = Some(TraceSettings {
                path: "capture.jsonl".into(),
                sample_percent: 100.0,
                max_bytes: 1024,
            });
        }),
        ("server.otlp", |s| {
            s.otlp = Some(OtlpFile {
                endpoint: Some("http://collector:4317".to_owned()),
                ..OtlpFile::default()
            });
        }),
    ]
}

fn address(text: &str) -> ListenAddress {
    match text.parse() {
        Ok(address) => address,
        Err(e) => panic!("{text}: {e}"),
    }
}

#[test]
fn every_start_only_setting_is_covered_here() {
    let covered: Vec<&str> = one_change_each().iter().map(|(name, _)| *name).collect();
    let table: Vec<&str> = START_ONLY.iter().map(|setting| setting.name).collect();
    assert_eq!(covered, table);
}

#[test]
fn a_change_to_a_start_only_setting_is_reported_and_its_running_value_kept() {
    let running = ServerSettings::default();
    for (name, edit) in one_change_each() {
        let mut new = ServerSettings::default();
        edit(&mut new);
        assert_ne!(new, running, "{name} changed");
        assert_eq!(running.start_only_changes(&new), [name]);
        new.keep_start_only(&running);
        assert_eq!(new, running, "{name} keeps its running value");
    }
}

#[test]
fn start_only_changes_are_reported_in_the_tables_order() {
    let running = ServerSettings::default();
    let mut new = ServerSettings::default();
    for (_, edit) in one_change_each().into_iter().rev() {
        edit(&mut new);
    }
    let names: Vec<&str> = START_ONLY.iter().map(|setting| setting.name).collect();
    assert_eq!(running.start_only_changes(&new), names);
    new.keep_start_only(&running);
    assert_eq!(new, running);
}

#[test]
fn a_setting_read_on_every_reload_is_neither_reported_nor_kept() {
    let running = ServerSettings::default();
    let mut new = ServerSettings {
        deny_status: 403,
        max_checks: 3,
        watch_interval_ms: 0,
        decision_log: Some(DecisionLogSettings {
            sample_percent: 5.0,
        }),
        ..ServerSettings::default()
    };
    assert!(running.start_only_changes(&new).is_empty());
    new.keep_start_only(&running);
    assert_eq!(new.deny_status, 403);
    assert_eq!(new.max_checks, 3);
    assert_eq!(new.watch_interval_ms, 0);
    assert_eq!(new.decision_log.map(|d| d.sample_percent), Some(5.0));
}

#[test]
fn connection_bounds_that_cannot_serve_are_refused_naming_the_setting() {
    let refused = |yaml: &str| {
        let value: Value = serde_saphyr::from_str(yaml).expect("YAML");
        ServerSettings::parse(Some(&value))
            .expect_err("refused")
            .to_string()
    };
    for name in [
        "max_connections",
        "max_connections_per_peer",
        "header_timeout_ms",
        "proxy_idle_timeout_ms",
    ] {
        assert!(
            refused(&format!("{name}: 0")).contains(&format!("server: {name} must be positive")),
            "{name}"
        );
    }
    assert!(
        refused("{max_connections: 10, proxy_reserved_connections: 10}").contains(
            "server: proxy_reserved_connections 10 must be below max_connections 10: peers that are not trusted proxies need some"
        )
    );
    assert!(
        refused("proxy_socket: {path: x.sock, mode: \"0999\"}")
            .contains("proxy_socket.mode: \"0999\" is not a file mode in octal (e.g. \"0660\")")
    );
}

#[test]
fn the_proxies_reserve_is_a_quarter_unless_set_and_none_while_nobody_is_trusted() {
    let mut server = ServerSettings {
        max_connections: 100,
        ..ServerSettings::default()
    };
    assert_eq!(server.reserved_of(server.max_connections), 0);
    server.trusted_proxies = vec!["127.0.0.1/32".parse().expect("net")];
    assert_eq!(server.reserved_of(server.max_connections), 25);
    server.proxy_reserved_connections = Some(60);
    assert_eq!(server.reserved_of(server.max_connections), 60);
    server.trusted_proxies.clear();
    server.proxy_socket = Some(ProxySocket {
        path: "p.sock".into(),
        mode: 0o660,
    });
    assert_eq!(server.reserved_of(server.max_connections), 60);
}
