//! Stores you can page about: with a regional and a global store, the one
//! that is down is named — by role (and region) — in the start warning,
//! `/readyz`, the store series and the error kinds, and its coming back is
//! logged once. Real redis-server and tollgate processes.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use support::{metric, tollgate_bin};
use tollgate_testkit::RedisServer;

/// Only a guard against a hang: no assertion depends on it.
const PATIENCE: Duration = Duration::from_secs(30);

/// Region `a`'s instance with a regional and a global store; one policy
/// on each, both failing open.
fn config(regional: &str, global: &str) -> String {
    format!(
        r#"server: {{watch_interval_ms: 0}}
regions: {{a: {{}}}}
region: a
stores:
  regional: {{redis: {{url: "{regional}", timeout: 2s}}}}
  global: {{redis: {{url: "{global}", timeout: 2s}}}}
policies:
  - {{name: r, algorithm: token_bucket, capacity: 10, refill: {{tokens: 1, per: 1h}}, scope: region, on_store_failure: fail_open}}
  - {{name: g, algorithm: token_bucket, capacity: 10, refill: {{tokens: 1, per: 1h}}, scope: global, on_store_failure: fail_open}}
"#
    )
}

/// A `tollgate serve --log-format json` whose stderr lines are read as
/// they come; killed on drop.
struct Served {
    child: Child,
    base: String,
    stderr: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Served {
    fn start(config: &Path) -> Self {
        let mut child = Command::new(tollgate_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
            .arg("--config")
            .arg(config)
            .env_remove("RUST_LOG")
            .env_remove("TOLLGATE_STORE")
            .env_remove("TOLLGATE_REGION")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tollgate serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the listen line");
        let first: serde_json::Value = serde_json::from_str(&line).expect("a JSON listen line");
        let base = first["listening"].as_str().expect("listening").to_owned();
        let (tx, stderr) = mpsc::channel();
        let err = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            base,
            stderr,
            seen: Vec::new(),
        }
    }

    /// The next stderr line (after those already taken) whose message
    /// contains `text`, parsed.
    fn next_with(&mut self, text: &str) -> serde_json::Value {
        loop {
            let line = self
                .stderr
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|_| panic!("no log line with {text:?}; saw {:#?}", self.seen));
            self.seen.push(line.clone());
            let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
            if v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(text))
            {
                return v;
            }
        }
    }

    /// Stops the process (SIGTERM) and returns every line it logged.
    fn stop(mut self) -> Vec<String> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        self.next_with("tollgate stopped");
        std::mem::take(&mut self.seen)
    }

    fn get(&self, path: &str) -> String {
        http(&self.base, "GET", path, "")
    }

    fn check(&self, policy: &str) -> serde_json::Value {
        let body = format!(r#"{{"policy":"{policy}","key":"k"}}"#);
        let answer = http(&self.base, "POST", "/v1/check", &body);
        serde_json::from_str(&answer).unwrap_or_else(|_| panic!("not JSON: {answer}"))
    }
}

/// One HTTP/1.1 request over a fresh connection: the answer's body.
fn http(base: &str, method: &str, path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let host = base.strip_prefix("http://").expect("an http base");
    let mut stream = std::net::TcpStream::connect(host).expect("connect");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or(answer)
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write_config(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, text).expect("write config");
    path
}

#[test]
fn the_one_failing_store_of_two_is_named_and_its_return_logged_once() {
    let regional = RedisServer::start().expect("redis-server");
    let mut global = RedisServer::start().expect("redis-server");
    global.kill().expect("kill the global store");
    let dir = tempfile::tempdir().expect("dir");
    let mut served = Served::start(&write_config(&dir, &config(&regional.url(), &global.url())));
    let global_name = format!("global (redis {})", global.url());

    let warning = served.next_with("unreachable at start");
    assert_eq!(warning["level"], "WARN");
    assert_eq!(
        warning["fields"]["message"],
        format!(
            "store {global_name} unreachable at start; its policies answer per their failure mode"
        )
    );
    assert_eq!(
        (&warning["fields"]["store"], &warning["fields"]["kind"]),
        (&serde_json::json!("global"), &serde_json::json!("refused"))
    );
    assert_eq!(
        served.get("/readyz"),
        r#"{"ready":true,"store":"down","stores":{"global":"down","regional":"up"}}"#
    );
    // One decision on each store: the global one fails open, refused.
    assert_eq!(served.check("g")["path"], "fail_open");
    assert_eq!(served.check("r")["remaining"], 9);
    let text = served.get("/metrics");
    for (series, value) in [
        (r#"tollgate_store_up{role="global"}"#, 0.0),
        (r#"tollgate_store_up{role="regional",region="a"}"#, 1.0),
        (
            r#"tollgate_store_errors_total{role="global",kind="refused"}"#,
            1.0,
        ),
        (
            r#"tollgate_store_circuit_state{role="global",state="closed"}"#,
            1.0,
        ),
        (
            r#"tollgate_store_circuit_state{role="global",state="open"}"#,
            0.0,
        ),
        (
            r#"tollgate_store_circuit_state{role="global",state="half_open"}"#,
            0.0,
        ),
        (
            r#"tollgate_store_circuit_state{role="regional",region="a",state="closed"}"#,
            1.0,
        ),
        (
            r#"tollgate_store_call_duration_seconds_count{role="regional",region="a"}"#,
            1.0,
        ),
    ] {
        assert_eq!(metric(&text, series), Some(value), "{series}\n{text}");
    }
    assert!(
        !text.contains(r#"tollgate_store_errors_total{role="regional""#),
        "the regional store never failed:\n{text}"
    );

    global
        .restart()
        .expect("the global store comes back on its port");
    let mut ready = served.get("/readyz");
    for _ in 0..50 {
        if ready.contains(r#""global":"up""#) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        ready = served.get("/readyz");
    }
    assert_eq!(
        ready,
        r#"{"ready":true,"store":"up","stores":{"global":"up","regional":"up"}}"#
    );
    let back = served.next_with("answers again");
    assert_eq!(back["level"], "INFO");
    assert_eq!(back["fields"]["store"], "global");
    let message = back["fields"]["message"].as_str().expect("a message");
    assert!(
        message.starts_with(&format!("store {global_name} answers again after ")),
        "{message}"
    );
    // Answering on: no second line for the same recovery.
    assert_eq!(served.check("g")["remaining"], 9);
    served.get("/readyz");
    let lines = served.stop();
    let again = lines.iter().filter(|l| l.contains("answers again")).count();
    assert_eq!(again, 1, "{lines:#?}");
}

#[test]
fn a_refused_port_and_an_unresolvable_host_are_different_kinds() {
    let refused = support::free_port();
    let dir = tempfile::tempdir().expect("dir");
    let mut served = Served::start(&write_config(
        &dir,
        &config(
            "redis://no-such-host.invalid:6379",
            &format!("redis://127.0.0.1:{refused}"),
        ),
    ));
    // One warning a store, in the config's order (regional, then global).
    let first = served.next_with("unreachable at start");
    let second = served.next_with("unreachable at start");
    let seen = |v: &serde_json::Value| {
        (
            v["fields"]["store"].as_str().map(str::to_owned),
            v["fields"]["region"].as_str().map(str::to_owned),
            v["fields"]["kind"].as_str().map(str::to_owned),
        )
    };
    let owned = |s: &str| Some(s.to_owned());
    assert_eq!(
        [seen(&first), seen(&second)],
        [
            (owned("regional"), owned("a"), owned("dns")),
            (owned("global"), owned("none"), owned("refused")),
        ]
    );
    assert_eq!(
        first["fields"]["message"],
        "store regional of region a (redis redis://no-such-host.invalid:6379) unreachable at start; its policies answer per their failure mode"
    );
    assert_eq!(served.check("r")["path"], "fail_open");
    assert_eq!(served.check("g")["path"], "fail_open");
    let text = served.get("/metrics");
    for (series, value) in [
        (
            r#"tollgate_store_errors_total{role="regional",region="a",kind="dns"}"#,
            1.0,
        ),
        (
            r#"tollgate_store_errors_total{role="global",kind="refused"}"#,
            1.0,
        ),
        (r#"tollgate_store_up{role="regional",region="a"}"#, 0.0),
        (r#"tollgate_store_up{role="global"}"#, 0.0),
    ] {
        assert_eq!(metric(&text, series), Some(value), "{series}\n{text}");
    }
}
