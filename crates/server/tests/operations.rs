//! What an operator meets running the real binary: configuration from
//! flags, the environment and the file (in that order), the logs (text or
//! JSON, no colour into a pipe, the start line, reloads), and a store that
//! is down at start.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use support::{free_port, tollgate_bin};

const POLICIES: &str = "policies:\n  - {name: api, algorithm: token_bucket, capacity: 10, refill: {tokens: 1, per: 1h}}\n";
/// Only a guard against a hang: no assertion depends on it.
const PATIENCE: Duration = Duration::from_secs(30);

/// A `tollgate serve` process whose stderr lines are read as they come;
/// killed on drop.
struct Served {
    child: Child,
    base: String,
    stderr: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Served {
    fn start(config: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut child = command(config, args, env).spawn().expect("spawn");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the listen line");
        // Text (`listening on URL`), or JSON under --log-format json.
        let base = match serde_json::from_str::<serde_json::Value>(&line) {
            Ok(v) => v["listening"].as_str().map(str::to_owned),
            Err(_) => line.trim().strip_prefix("listening on ").map(str::to_owned),
        }
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"));
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

    /// The first stderr line (seen or to come) containing `text`.
    fn line_with(&mut self, text: &str) -> String {
        if let Some(line) = self.seen.iter().find(|l| l.contains(text)) {
            return line.clone();
        }
        loop {
            let line = self
                .stderr
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|_| panic!("no log line with {text:?}; saw {:#?}", self.seen));
            self.seen.push(line.clone());
            if line.contains(text) {
                return line;
            }
        }
    }

    /// The start line's fields (the process logs JSON).
    fn start_fields(&mut self) -> serde_json::Value {
        let line = self.line_with("tollgate serving");
        let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
        v["fields"].clone()
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    fn get(&self, path: &str) -> String {
        http_get::get(&format!("{}{path}", self.base))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking GET over a fresh connection: plain tests need no runtime.
mod http_get {
    use std::io::{Read, Write};

    pub fn get(url: &str) -> String {
        let rest = url.strip_prefix("http://").expect("http URL");
        let (host, path) = rest
            .split_once('/')
            .map_or((rest, "/"), |(h, _)| (h, &url[7 + h.len()..]));
        let mut stream = std::net::TcpStream::connect(host).expect("connect");
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )
        .expect("write");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("read");
        answer
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_owned())
            .unwrap_or(answer)
    }
}

fn command(config: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(tollgate_bin());
    cmd.arg("serve")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if !config.as_os_str().is_empty() {
        cmd.arg("--config").arg(config);
    }
    for var in [
        "TOLLGATE_CONFIG",
        "TOLLGATE_LISTEN",
        "TOLLGATE_GRPC_LISTEN",
        "TOLLGATE_STORE",
        "TOLLGATE_REGION",
        "TOLLGATE_LOG_FORMAT",
        "RUST_LOG",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn config_file(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, text).expect("write config");
    path
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    free_port()
}

#[test]
fn listen_comes_from_the_flag_then_the_environment_then_the_file() {
    let dir = tempfile::tempdir().expect("dir");
    let (file, env, flag) = (free_port(), free_port(), free_port());
    let path = config_file(
        &dir,
        &format!("server: {{listen: \"127.0.0.1:{file}\"}}\n{POLICIES}"),
    );
    let env_listen = format!("127.0.0.1:{env}");
    let flag_listen = format!("127.0.0.1:{flag}");
    let vars = [("TOLLGATE_LISTEN", env_listen.as_str())];
    let served = Served::start(&path, &["--listen", &flag_listen], &vars);
    assert_eq!(served.base, format!("http://127.0.0.1:{flag}"));
    drop(served);
    let served = Served::start(&path, &[], &vars);
    assert_eq!(served.base, format!("http://127.0.0.1:{env}"));
    drop(served);
    let served = Served::start(&path, &[], &[]);
    assert_eq!(served.base, format!("http://127.0.0.1:{file}"));
}

#[test]
fn the_config_path_may_come_from_the_environment() {
    let dir = tempfile::tempdir().expect("dir");
    let path = config_file(&dir, POLICIES);
    let shown = path.to_str().expect("utf-8 path");
    let served = Served::start(
        Path::new(""),
        &["--listen", "127.0.0.1:0"],
        &[("TOLLGATE_CONFIG", shown)],
    );
    assert_eq!(served.get("/healthz"), "ok\n");
}

#[test]
fn store_region_and_log_format_come_from_the_flag_then_the_environment_then_the_file() {
    let dir = tempfile::tempdir().expect("dir");
    let down = closed_port();
    let path = config_file(
        &dir,
        &format!(
            "region: eu\nregions: {{eu: {{}}, us: {{}}, ap: {{}}}}\nstore: {{memory: {{max_keys: 500}}}}\n{POLICIES}"
        ),
    );
    let redis = format!("redis://127.0.0.1:{down}");
    let listen = ["--listen", "127.0.0.1:0"];
    let env = [
        ("TOLLGATE_STORE", redis.as_str()),
        ("TOLLGATE_REGION", "us"),
        ("TOLLGATE_LOG_FORMAT", "json"),
    ];

    let flags = [&listen[..], &["--store", "memory", "--region", "ap"]].concat();
    let mut served = Served::start(&path, &flags, &env);
    let fields = served.start_fields();
    assert_eq!(fields["stores"], "local: memory (max_keys 500)");
    assert_eq!(fields["region"], "ap");
    drop(served);

    let mut served = Served::start(&path, &listen, &env);
    let fields = served.start_fields();
    assert_eq!(fields["stores"], format!("global: redis {redis}"));
    assert_eq!(fields["region"], "us");
    drop(served);

    let mut served = Served::start(&path, &listen, &[("TOLLGATE_LOG_FORMAT", "json")]);
    let fields = served.start_fields();
    assert_eq!(fields["stores"], "local: memory (max_keys 500)");
    assert_eq!(fields["region"], "eu");
    drop(served);

    // The flag's text beats the variable's JSON.
    let flags = [&listen[..], &["--log-format", "text"]].concat();
    let mut served = Served::start(&path, &flags, &[("TOLLGATE_LOG_FORMAT", "json")]);
    let line = served.line_with("tollgate serving");
    assert!(
        serde_json::from_str::<serde_json::Value>(&line).is_err(),
        "{line}"
    );
    assert!(line.contains(" INFO "), "{line}");
}

#[test]
fn a_host_name_is_a_listen_address() {
    let dir = tempfile::tempdir().expect("dir");
    let path = config_file(&dir, POLICIES);
    let port = free_port();
    let served = Served::start(&path, &["--listen", &format!("localhost:{port}")], &[]);
    assert!(
        served.base.ends_with(&format!(":{port}")),
        "{}",
        served.base
    );
    assert_eq!(served.get("/healthz"), "ok\n");
}

#[test]
fn a_bad_server_listen_is_refused_naming_the_value() {
    let dir = tempfile::tempdir().expect("dir");
    let path = config_file(
        &dir,
        &format!("server: {{listen: \"localhost\"}}\n{POLICIES}"),
    );
    let out = command(&path, &[], &[]).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    let message = "server: listen: \"localhost\" is not an address to listen on: expected HOST:PORT (e.g. 127.0.0.1:8080, localhost:8080, [::1]:8080)";
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "tollgate: {path}: config: {message}\n --> {path}:1:10\n  |\n1 | server: {{listen: \"localhost\"}}\n  |          ^ {message}\n2 | policies:\n3 |   - {{name: api, algorithm: token_bucket, capacity: 10, refill: {{tokens: 1, per: 1h}}}}\n  |\n",
            path = path.display()
        )
    );
}

#[test]
fn json_logs_are_one_object_a_line_with_level_target_and_fields() {
    let dir = tempfile::tempdir().expect("dir");
    let path = config_file(&dir, POLICIES);
    let mut served = Served::start(
        &path,
        &["--listen", "127.0.0.1:0", "--log-format", "json"],
        &[],
    );
    let line = served.line_with("tollgate serving");
    let v: serde_json::Value = serde_json::from_str(&line).expect("JSON");
    assert_eq!(v["level"], "INFO");
    assert_eq!(v["target"], "tollgate::serve");
    assert!(v["timestamp"].is_string(), "{line}");
    let fields = &v["fields"];
    assert_eq!(fields["message"], "tollgate serving");
    assert_eq!(fields["http"], served.base);
    assert_eq!(fields["grpc"], "off");
    assert_eq!(fields["stores"], "local: memory (max_keys 1000000)");
    assert_eq!(fields["region"], "none");
    assert_eq!(fields["policies"], 1);
}

#[test]
fn under_json_logs_stdout_and_stderr_merged_parse_one_object_a_line() {
    let dir = tempfile::tempdir().expect("dir");
    let path = config_file(&dir, POLICIES);
    // Upper case, as an operator may spell it in an environment file.
    let mut child = command(
        &path,
        &["--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"],
        &[("TOLLGATE_LOG_FORMAT", "JSON")],
    )
    .spawn()
    .expect("spawn");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut lines = Vec::new();
    for _ in 0..2 {
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read");
        lines.push(line);
    }
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).expect("read") > 0, "{lines:#?}");
        let done = line.contains("tollgate serving");
        lines.push(line);
        if done {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let objects: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?} is not JSON: {e}")))
        .collect();
    let http = objects[0]["listening"].as_str().expect("the HTTP URL");
    assert!(http.starts_with("http://127.0.0.1:"), "{http}");
    let grpc = objects[1]["grpc_listening"]
        .as_str()
        .expect("the gRPC address");
    assert!(grpc.starts_with("127.0.0.1:"), "{grpc}");
    let start = objects.last().expect("the start line");
    assert_eq!(start["fields"]["http"], http);
    assert_eq!(start["fields"]["grpc"], format!("http://{grpc}"));
}

#[test]
fn serve_help_names_every_endpoint_and_the_grpc_service() {
    let out = Command::new(tollgate_bin())
        .args(["serve", "--help"])
        .output()
        .expect("run");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for endpoint in [
        "/v1/check",
        "/v1/authorize",
        "/v1/policies",
        "/v1/state",
        "/v1/hot",
        "/healthz",
        "/readyz",
        "/metrics",
        "gRPC",
        "--grpc-listen",
    ] {
        assert!(
            help.contains(endpoint),
            "serve --help names {endpoint}:\n{help}"
        );
    }
}

#[test]
fn logs_into_a_pipe_have_no_colour() {
    let dir = tempfile::tempdir().expect("dir");
    let path = config_file(&dir, POLICIES);
    let mut served = Served::start(&path, &["--listen", "127.0.0.1:0"], &[]);
    served.line_with("tollgate serving");
    for line in &served.seen {
        assert!(!line.contains("\x1b["), "{line:?}");
    }
}

#[test]
fn the_start_line_names_every_listener_and_store_and_never_a_password() {
    let dir = tempfile::tempdir().expect("dir");
    let down = closed_port();
    let path = config_file(
        &dir,
        &format!("store: {{redis: {{url: \"redis://:hunter2@127.0.0.1:{down}\"}}}}\n{POLICIES}"),
    );
    let mut served = Served::start(
        &path,
        &[
            "--listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ],
        &[],
    );
    let fields = served.start_fields();
    assert_eq!(fields["http"], served.base);
    assert!(
        fields["grpc"]
            .as_str()
            .is_some_and(|g| g.starts_with("http://127.0.0.1:")),
        "{fields}"
    );
    assert_eq!(
        fields["stores"],
        format!("global: redis redis://<redacted>@127.0.0.1:{down}")
    );
    served.line_with("unreachable at start");
    assert!(
        served.seen.iter().all(|l| !l.contains("hunter2")),
        "{:#?}",
        served.seen
    );
}

#[test]
fn a_redis_down_at_start_is_logged_and_the_server_serves() {
    let dir = tempfile::tempdir().expect("dir");
    let down = closed_port();
    let path = config_file(
        &dir,
        &format!("store: {{redis: {{url: \"redis://127.0.0.1:{down}\"}}}}\n{POLICIES}"),
    );
    let mut served = Served::start(
        &path,
        &["--listen", "127.0.0.1:0", "--log-format", "json"],
        &[],
    );
    let line = served.line_with("unreachable at start");
    let v: serde_json::Value = serde_json::from_str(&line).expect("JSON");
    assert_eq!(v["level"], "WARN");
    assert_eq!(
        v["fields"]["message"],
        format!(
            "store global (redis redis://127.0.0.1:{down}) unreachable at start; its policies answer per their failure mode"
        )
    );
    assert_eq!(v["fields"]["kind"], "refused");
    assert_eq!(
        served.get("/readyz"),
        r#"{"ready":true,"store":"down","stores":{"global":"down"}}"#
    );
}

#[test]
fn store_memory_replaces_a_redis_store() {
    let dir = tempfile::tempdir().expect("dir");
    let down = closed_port();
    let path = config_file(
        &dir,
        &format!("store: {{redis: {{url: \"redis://127.0.0.1:{down}\"}}}}\n{POLICIES}"),
    );
    let mut served = Served::start(
        &path,
        &[
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory",
            "--log-format",
            "json",
        ],
        &[],
    );
    assert_eq!(
        served.start_fields()["stores"],
        "local: memory (max_keys 1000000)"
    );
    assert_eq!(
        served.get("/readyz"),
        r#"{"ready":true,"store":"up","stores":{"local":"up"}}"#
    );
}

#[test]
fn store_over_a_config_with_stores_by_role_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let path = config_file(
        &dir,
        &format!(
            "stores: {{local: memory, global: {{redis: {{url: \"redis://127.0.0.1:1\"}}}}}}\n{}",
            POLICIES.replace("per: 1h}}", "per: 1h}, scope: global}")
        ),
    );
    let out = command(&path, &["--store", "memory"], &[])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    // The fault is pointed at where the stores are named.
    let message = "--store (TOLLGATE_STORE) replaces a config's one `store:`, but this config names its stores by role (stores: local, global): change them in the file";
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "tollgate: {path}: config: {message}\n --> {path}:1:1\n  |\n1 | stores: {{local: memory, global: {{redis: {{url: \"redis://127.0.0.1:1\"}}}}}}\n  | ^ {message}\n2 | policies:\n3 |   - {{name: api, algorithm: token_bucket, capacity: 10, refill: {{tokens: 1, per: 1h}}, scope: global}}\n  |\n",
            path = path.display()
        )
    );
}

#[test]
fn a_reload_changing_a_start_only_setting_says_it_needs_a_restart() {
    let dir = tempfile::tempdir().expect("dir");
    let config = |port: u16, capacity: u64| {
        format!(
            "server: {{listen: \"127.0.0.1:{port}\", watch_interval_ms: 0}}\n{}",
            POLICIES.replace("capacity: 10", &format!("capacity: {capacity}"))
        )
    };
    let path = config_file(&dir, &config(free_port(), 10));
    let mut served = Served::start(&path, &[], &[]);
    std::fs::write(&path, config(free_port(), 11)).expect("write");
    served.signal("HUP");
    let line = served.line_with("config reloaded");
    assert!(
        line.contains("config reloaded, but server.listen changed and needs a restart (the running value stays until then)"),
        "{line}"
    );
    // The rest applied; the server still listens where it started.
    let policies = served.get("/v1/policies");
    assert!(policies.contains(r#""capacity":11"#), "{policies}");
}

#[test]
fn one_bad_edit_is_one_reload_failure_with_the_watcher_on_and_a_sighup() {
    let dir = tempfile::tempdir().expect("dir");
    let path = config_file(
        &dir,
        &format!("server: {{watch_interval_ms: 20}}\n{POLICIES}"),
    );
    let mut served = Served::start(
        &path,
        &["--listen", "127.0.0.1:0"],
        &[("RUST_LOG", "tollgate=debug")],
    );
    // A good edit first: the watcher is running once it has reloaded it.
    std::fs::write(
        &path,
        format!(
            "server: {{watch_interval_ms: 20}}\n{}",
            POLICIES.replace("capacity: 10", "capacity: 11")
        ),
    )
    .expect("write");
    served.line_with("config reloaded");
    std::fs::write(&path, "policies: [").expect("write");
    served.line_with("config reload refused; the previous config keeps serving");
    served.signal("HUP");
    served.line_with("config reload refused again for the same reason (counted once)");
    let metrics = served.get("/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l == "tollgate_config_reload_failures_total 1"),
        "{metrics}"
    );
}

/// A POST of `body` to /v1/check over a fresh connection; the answer's body.
fn post_check(base: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let host = base.strip_prefix("http://").expect("http URL");
    let mut stream = std::net::TcpStream::connect(host).expect("connect");
    write!(
        stream,
        "POST /v1/check HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    answer
}

#[test]
fn rejections_are_logged_at_debug_once_per_policy_per_interval_with_the_identity() {
    let dir = tempfile::tempdir().expect("dir");
    let path = config_file(
        &dir,
        "policies:\n  - {name: tiny, algorithm: token_bucket, capacity: 1, refill: {tokens: 1, per: 1h}}\n",
    );
    let key = "operations-test-identity-key-of-32-bytes";
    let mut served = Served::start(
        &path,
        &["--listen", "127.0.0.1:0", "--log-format", "json"],
        &[
            ("RUST_LOG", "tollgate=debug"),
            ("TOLLGATE_IDENTITY_KEY", key),
        ],
    );
    for _ in 0..4 {
        post_check(&served.base, r#"{"policy":"tiny","key":"acme"}"#);
    }
    let line = served.line_with("\"rejected (one line per policy");
    let v: serde_json::Value = serde_json::from_str(&line).expect("JSON");
    assert_eq!(v["level"], "DEBUG");
    assert_eq!(v["fields"]["policy"], "tiny");
    // Named as the hot identity series name it: the keyed hash of its
    // encoding, never the raw identity.
    let material = format!("tollgate hot identity series\0{key}");
    let hash = tollgate_core::SecretHasher::new(material.as_bytes())
        .hash(tollgate_core::Identity::value("acme").as_bytes());
    assert_eq!(v["fields"]["identity"], format!("hash:{hash}"));
    assert_eq!(v["fields"]["held_back"], 0);
    // The other two rejections of the same second were held back, not logged.
    served.signal("TERM");
    served.line_with("tollgate stopped");
    let rejected = served
        .seen
        .iter()
        .filter(|l| l.contains("\"rejected (one line per policy"))
        .count();
    assert_eq!(rejected, 1);
}
