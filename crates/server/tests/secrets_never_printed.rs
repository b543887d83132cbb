//! A Redis password never reaches stdout or stderr, whatever it holds:
//! `validate` and `serve` show a store URL only through one redaction,
//! whether the URL came from the config or from `--store` (which only
//! `serve` takes).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const POLICY: &str = "policies:\n  - {name: p, algorithm: token_bucket, capacity: 10, refill: {tokens: 1, per: 1s}}\n";

/// Pieces of the passwords below; none may be printed.
const SECRETS: [&str; 6] = ["pa/ss", "ss@w", "w/rd", "pa%2F", "s3cr", "hunter"];

/// A loopback port with nothing listening.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn assert_hidden(what: &str, out: &str) {
    for secret in SECRETS {
        assert!(!out.contains(secret), "{what} printed {secret:?}:\n{out}");
    }
}

/// `tollgate <args>` run to completion: (exit code, stdout + stderr).
fn run(args: &[&str], config: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove("TOLLGATE_STORE")
        .stdin(Stdio::null())
        .output()
        .expect("tollgate runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn write_config(dir: &Path, name: &str, yaml: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, yaml).expect("write config");
    path
}

#[test]
fn a_password_holding_slash_and_at_is_never_printed_by_validate_or_serve() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = closed_port();
    let raw = format!("redis://user:pa/ss@w/rd@127.0.0.1:{port}/0");
    let from_config = write_config(
        dir.path(),
        "config.yaml",
        &format!("store:\n  redis: {{url: \"{raw}\"}}\n{POLICY}"),
    );
    let plain = write_config(dir.path(), "plain.yaml", POLICY);
    for (what, args, config) in [
        ("validate (config)", vec!["validate"], &from_config),
        ("serve (config)", vec!["serve"], &from_config),
        ("serve --store", vec!["serve", "--store", &raw], &plain),
    ] {
        let (code, out) = run(&args, config);
        assert_ne!(code, 0, "{what} accepted {raw}:\n{out}");
        assert!(out.contains("<redacted>@"), "{what}:\n{out}");
        assert_hidden(what, &out);
    }
}

#[test]
fn a_syntax_error_beside_a_password_shows_its_lines_without_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(
        dir.path(),
        "config.yaml",
        "store:\n  redis:\n    url: \"redis://user:s3cr@127.0.0.1:6379\"\n    password: hunter2\n  [\npolicies: []\n",
    );
    for what in ["validate", "serve"] {
        let (code, out) = run(&[what], &config);
        assert_ne!(code, 0, "{what} accepted:\n{out}");
        assert!(out.contains("not valid YAML"), "{what}:\n{out}");
        assert!(out.contains("|     password: <redacted>"), "{what}:\n{out}");
        assert!(out.contains("|     url: \"<redacted>\""), "{what}:\n{out}");
        assert_hidden(what, &out);
    }
}

#[test]
fn a_password_typed_as_a_number_is_refused_without_its_value() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(
        dir.path(),
        "config.yaml",
        &format!(
            "store:\n  redis: {{url: \"redis://127.0.0.1:6379\", password: 831415926}}\n{POLICY}"
        ),
    );
    let (code, out) = run(&["validate"], &config);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("store.redis.password"), "{out}");
    assert!(!out.contains("831415926"), "{out}");
}

#[test]
fn a_cluster_that_cannot_be_reached_fails_serve_without_its_password() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = closed_port();
    let config = write_config(
        dir.path(),
        "config.yaml",
        &format!(
            "store:\n  redis: {{cluster: [\"redis://user:s3cr%2Fet%40x@127.0.0.1:{port}\"], timeout: 100ms}}\n{POLICY}"
        ),
    );
    let (code, out) = run(&["serve", "--listen", "127.0.0.1:0"], &config);
    assert_ne!(code, 0, "{out}");
    assert_hidden("serve (cluster)", &out);
}

#[test]
fn serve_names_an_unreachable_store_without_its_password() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = closed_port();
    let plain = write_config(dir.path(), "plain.yaml", POLICY);
    let url = format!("redis://user:pa%2Fss%40w%2Frd@127.0.0.1:{port}/0");
    let (stdout, stderr) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            &url,
            "--config",
        ])
        .arg(&plain)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr).expect("stderr file"))
        .spawn()
        .expect("spawn tollgate serve");
    let read = || {
        format!(
            "{}{}",
            std::fs::read_to_string(&stdout).unwrap_or_default(),
            std::fs::read_to_string(&stderr).unwrap_or_default()
        )
    };
    // Up to 20 s, in steps of 50 ms.
    for _ in 0..400 {
        if read().contains("unreachable") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let out = read();
    assert!(out.contains("unreachable"), "serve never said so:\n{out}");
    assert!(
        out.contains(&format!("redis://<redacted>@127.0.0.1:{port}/0")),
        "{out}"
    );
    assert_hidden("serve (unreachable)", &out);
}
