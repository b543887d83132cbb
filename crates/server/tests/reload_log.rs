//! A reload says what it changed, read from a real `tollgate serve`'s log:
//! the policies added, removed and changed by name (SIGHUP or the file
//! watcher), that nothing changed when the file is the same, and that an
//! edit outside the policies changed none.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;
use support::tollgate_bin;

/// Only a guard against a hang: no assertion depends on it.
const PATIENCE: Duration = Duration::from_secs(30);

/// `tollgate serve --log-format json`, its stderr lines read as they come.
struct Served {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Served {
    fn start(config: &Path) -> Self {
        let mut child = Command::new(tollgate_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tollgate serve");
        let mut first = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut first)
            .expect("a listen line");
        let (tx, lines) = mpsc::channel();
        let stderr = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut served = Self {
            child,
            lines,
            seen: Vec::new(),
        };
        // Serving: a SIGHUP from now on is the reload's, not the default's.
        served.next_with("tollgate serving");
        served
    }

    /// The next log line whose message starts with `text`, as JSON.
    fn next_with(&mut self, text: &str) -> Value {
        loop {
            let line = self
                .lines
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|_| panic!("no log line with {text:?}; saw {:#?}", self.seen));
            self.seen.push(line.clone());
            let v: Value = serde_json::from_str(&line).expect("a JSON log line");
            if v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(text))
            {
                return v;
            }
        }
    }

    fn hang_up(&self) {
        let status = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config of `server` settings and one policy a line.
fn config(server: &str, policies: &[&str]) -> String {
    let mut yaml = format!("server: {{{server}}}\npolicies:\n");
    for policy in policies {
        yaml.push_str(&format!("  - {{{policy}}}\n"));
    }
    yaml
}

fn policy(name: &str, capacity: u32) -> String {
    format!(
        "name: {name}, algorithm: token_bucket, capacity: {capacity}, refill: {{tokens: 1, per: 1h}}"
    )
}

/// The reload line's level, message and its added, removed and changed
/// fields.
fn said(v: &Value) -> (String, String, String, String, String) {
    let field = |name: &str| v["fields"][name].as_str().unwrap_or("<none>").to_owned();
    (
        v["level"].as_str().expect("level").to_owned(),
        field("message"),
        field("added"),
        field("removed"),
        field("changed"),
    )
}

fn line(
    level: &str,
    message: &str,
    added: &str,
    removed: &str,
    changed: &str,
) -> (String, String, String, String, String) {
    (
        level.to_owned(),
        message.to_owned(),
        added.to_owned(),
        removed.to_owned(),
        changed.to_owned(),
    )
}

#[test]
fn a_sighup_logs_the_policies_added_removed_and_changed_or_that_nothing_changed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tollgate.yaml");
    let server = "watch_interval_ms: 0";
    let (a, b, c) = (policy("a", 10), policy("b", 10), policy("c", 10));
    std::fs::write(&path, config(server, &[&a, &b, &c])).expect("write");
    let mut served = Served::start(&path);

    let (b2, d, e) = (policy("b", 20), policy("d", 5), policy("e", 5));
    std::fs::write(&path, config(server, &[&b2, &c, &d, &e])).expect("write");
    served.hang_up();
    assert_eq!(
        said(&served.next_with("config reloaded")),
        line(
            "INFO",
            "config reloaded; policies added: d, e; removed: a; changed: b",
            "d,e",
            "a",
            "b"
        )
    );

    served.hang_up();
    assert_eq!(
        said(&served.next_with("config reloaded")),
        line(
            "INFO",
            "config reloaded: nothing changed",
            "<none>",
            "<none>",
            "<none>"
        )
    );

    // Another setting, and the same policies: a reload, no policy changed.
    let server = "watch_interval_ms: 0, max_checks: 50";
    std::fs::write(&path, config(server, &[&b2, &c, &d, &e])).expect("write");
    served.hang_up();
    assert_eq!(
        said(&served.next_with("config reloaded")),
        line("INFO", "config reloaded; no policy changed", "", "", "")
    );
}

#[test]
fn the_file_watcher_logs_what_an_edit_changed_and_its_first_look_says_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tollgate.yaml");
    let server = "watch_interval_ms: 20";
    std::fs::write(&path, config(server, &[&policy("api", 10)])).expect("write");
    let mut served = Served::start(&path);
    std::fs::write(
        &path,
        config(
            server,
            &[
                &policy("api", 10),
                &policy("trial", 3).replace("per: 1h}", "per: 1h}, mode: shadow"),
            ],
        ),
    )
    .expect("write");
    assert_eq!(
        said(&served.next_with("config reloaded")),
        line(
            "INFO",
            "config reloaded; policies added: trial",
            "trial",
            "",
            ""
        )
    );
    std::fs::write(
        &path,
        config(server, &[&policy("api", 10), &policy("trial", 3)]),
    )
    .expect("write");
    assert_eq!(
        said(&served.next_with("config reloaded")),
        line(
            "INFO",
            "config reloaded; policies changed: trial",
            "",
            "",
            "trial"
        )
    );
    // The watcher's first look at the file loaded at start changed nothing
    // and said nothing.
    assert!(
        !served.seen.iter().any(|l| l.contains("nothing changed")),
        "{:#?}",
        served.seen
    );
}
