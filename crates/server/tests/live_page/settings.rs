//! `server.ui` as a setting: `on` and `off` (and YAML's booleans) taken,
//! anything else refused naming the fault, a misspelt name told the right
//! one, `validate` warning when the page could not name identities, and a
//! reload turning the page on and off.

use std::process::Command;

use crate::support::{TestServer, tollgate_bin};

const POLICY: &str = "policies:\n  - {name: api, algorithm: fixed_window, limit: 3, window: 1m}\n";

/// `tollgate validate [--strict] --config FILE` of `server_section` and a
/// policy, with `key` as the identity key: exit code, stdout, stderr.
fn validate(server_section: &str, key: Option<&str>, strict: bool) -> (i32, String, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, format!("{server_section}\n{POLICY}")).expect("write");
    let mut command = Command::new(tollgate_bin());
    command.arg("validate");
    if strict {
        command.arg("--strict");
    }
    command.arg("--config").arg(&config);
    command.env_remove("TOLLGATE_IDENTITY_KEY");
    if let Some(key) = key {
        command.env("TOLLGATE_IDENTITY_KEY", key);
    }
    let out = command.output().expect("tollgate validate runs");
    (
        out.status.code().expect("an exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const KEY: &str = "0123456789abcdef0123456789abcdef";

#[test]
fn on_and_off_are_taken_and_anything_else_refused() {
    for section in [
        "server: {ui: on}",
        "server: {ui: off}",
        "server: {ui: true}",
        "server: {ui: false}",
        "server: {ui: \"on\"}",
        "server: {ui: \"off\"}",
    ] {
        let (code, stdout, stderr) = validate(section, Some(KEY), true);
        assert_eq!(code, 0, "{section}: {stderr}");
        assert!(stdout.contains("is valid"), "{section}: {stdout}");
        assert_eq!(stderr, "", "{section}");
    }
    for (section, fault) in [
        (
            "server: {ui: maybe}",
            "ui: must be on or off, got string \"maybe\"",
        ),
        ("server: {ui: 1}", "ui: must be on or off, got number 1"),
        ("server: {ui: [on]}", "ui: must be on or off, got a list"),
    ] {
        let (code, stdout, stderr) = validate(section, Some(KEY), false);
        assert_eq!(code, 1, "{section}");
        assert_eq!(stdout, "", "{section}");
        assert!(stderr.contains(fault), "{section}: {stderr}");
        assert!(
            stderr.contains("server"),
            "{section} names its section: {stderr}"
        );
    }
    let (code, _, stderr) = validate("server: {uii: on}", Some(KEY), false);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("server: uii: unknown field, did you mean ui?"),
        "{stderr}"
    );
}

#[test]
fn validate_warns_when_the_page_could_not_name_identities() {
    let (code, stdout, stderr) = validate("server: {ui: on}", None, false);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("is valid"));
    assert_eq!(
        stderr,
        "tollgate: warning: server.ui is on, but TOLLGATE_IDENTITY_KEY holds no identity key: the page lists its hot identities unnamed (it names them only by their keyed hash); set it to tell them apart\n"
    );
    let (code, stdout, _) = validate("server: {ui: on}", None, true);
    assert_eq!((code, stdout.as_str()), (1, ""), "--strict fails on it");
    // Off, nothing to name: no warning.
    let (code, _, stderr) = validate("server: {ui: off}", None, true);
    assert_eq!((code, stderr.as_str()), (0, ""));
}

#[tokio::test]
async fn a_reload_turns_the_page_on_and_off() {
    let server = TestServer::start(POLICY).await;
    let status = |path: &'static str| {
        let request = server.client.get(server.url(path));
        async move { request.send().await.expect("GET").status().as_u16() }
    };
    assert_eq!((status("/ui").await, status("/ui/state").await), (404, 404));
    std::fs::write(&server.config_path, format!("server: {{ui: on}}\n{POLICY}")).expect("write");
    server.app.reload().expect("the reload applies");
    assert_eq!((status("/ui").await, status("/ui/state").await), (200, 200));
    std::fs::write(&server.config_path, POLICY).expect("write");
    server.app.reload().expect("the reload applies");
    assert_eq!((status("/ui").await, status("/ui/state").await), (404, 404));
    server.stop().await;
}
