//! The systemd unit serves the config, reloads on SIGHUP and is hardened.

use tollgate::ServerSettings;

use crate::files::read;

/// `key=value` lines of the unit's `[Service]` section (repeatable keys
/// keep every value).
fn unit_settings() -> Vec<(String, String)> {
    let unit = read("deploy/systemd/tollgate.service");
    let mut section = "";
    let mut settings = Vec::new();
    for line in unit.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if section == "[Service]"
            && !line.starts_with('#')
            && let Some((k, v)) = line.split_once('=')
        {
            settings.push((k.to_owned(), v.to_owned()));
        }
    }
    settings
}

#[test]
fn the_systemd_unit_serves_the_config_reloads_on_hup_and_is_hardened() {
    let settings = unit_settings();
    let all = |key: &str| -> Vec<&str> {
        settings
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let one = |key: &str| match all(key)[..] {
        [value] => value,
        ref values => panic!("{key}: expected one value, got {values:?}"),
    };
    assert!(
        one("ExecStart").ends_with("tollgate serve --config /etc/tollgate/tollgate.yaml"),
        "{}",
        one("ExecStart")
    );
    assert_eq!(
        all("ExecReload").last(),
        Some(&"/bin/kill -HUP $MAINPID"),
        "tollgate reloads on SIGHUP"
    );
    for (key, value) in [
        ("DynamicUser", "yes"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("Restart", "on-failure"),
        ("EnvironmentFile", "-/etc/tollgate/env"),
    ] {
        assert_eq!(one(key), value, "{key}");
    }
    let files: usize = one("LimitNOFILE").parse().expect("a number");
    let connections = ServerSettings::default().max_connections;
    assert!(
        files > connections,
        "LimitNOFILE {files} must exceed max_connections {connections}"
    );
}
