//! The stack every nginx test runs: a small upstream that records what
//! reaches it, the real nginx serving examples/nginx.conf, and a real
//! `tollgate serve` of examples/nginx-tollgate.yaml; and their clients.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use crate::proxy_stack::*;
use crate::support::{TollgateProcess, free_port};

// ---------- nginx: the real binary, everything under a temp prefix ----------

fn nginx_binary() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/usr/local/nginx/sbin"].map(PathBuf::from))
        .map(|dir| dir.join("nginx"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "the nginx binary is missing (looked in PATH and /usr/sbin): \
                 install it with `apt-get install -y nginx` (scripts/test does this)"
            )
        })
}

/// examples/nginx.conf with free ports in place of its three addresses, and
/// one location more: [`READY_PATH`], outside the limiter, answering `marker`.
fn render_example(listen: u16, tollgate: &str, upstream: SocketAddr, marker: &str) -> String {
    let mut text =
        std::fs::read_to_string(example("nginx.conf")).expect("read examples/nginx.conf");
    for (directive, replacement) in [
        (
            "listen 127.0.0.1:8000;",
            format!(
                "listen 127.0.0.1:{listen};\n        \
                 location = {READY_PATH} {{ auth_request off; return 200 \"{marker}\"; }}"
            ),
        ),
        (
            "access_log access.log;",
            format!(
                "access_log access.log;\n    log_format traced '{TRACED_FORMAT}';\n    access_log traced.log traced;"
            ),
        ),
        ("server 127.0.0.1:8080;", format!("server {tollgate};")),
        ("server 127.0.0.1:3000;", format!("server {upstream};")),
    ] {
        assert_eq!(
            text.matches(directive).count(),
            1,
            "examples/nginx.conf must contain `{directive}` exactly once"
        );
        text = text.replace(directive, &replacement);
    }
    text
}

/// A second access log the tests add (`traced.log`): nginx's `combined`,
/// then the export cost header and the host, quoted.
const TRACED_FORMAT: &str = "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\" \"$http_x_export_rows_thousands\" \"$host\"";

/// `nginx -p DIR -c DIR/nginx.conf -g 'daemon off;'`; stopped on drop.
pub struct Nginx {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Nginx {
    /// Starts nginx on a free port. Another process may take that port
    /// between `free_port` and nginx's bind (nginx then exits with "Address
    /// already in use"), so a taken port is retried on a fresh one; any other
    /// failure to start is the test's failure.
    pub fn start(tollgate_base: &str, upstream: SocketAddr) -> Self {
        let tollgate = tollgate_base
            .strip_prefix("http://")
            .expect("tollgate's base is http://host:port");
        Self::start_to(tollgate, upstream)
    }

    /// [`Self::start`] with `tollgate` as the example's `upstream tollgate`
    /// server: `host:port`, or `unix:PATH` for `server.proxy_socket`.
    pub fn start_to(tollgate: &str, upstream: SocketAddr) -> Self {
        for _ in 0..5 {
            match Self::start_on(free_port(), tollgate, upstream) {
                Ok(nginx) => return nginx,
                Err(PortTaken) => continue,
            }
        }
        panic!("nginx found every one of 5 free ports taken before it could bind");
    }

    fn start_on(port: u16, tollgate: &str, upstream: SocketAddr) -> Result<Self, PortTaken> {
        let binary = nginx_binary();
        let dir = tempfile::tempdir().expect("nginx prefix");
        // Workers run as an unprivileged user when the test runs as root;
        // they must be able to reach their temp directories.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod the nginx prefix");
        let conf = dir.path().join("nginx.conf");
        let marker = path_marker(dir.path());
        std::fs::write(&conf, render_example(port, tollgate, upstream, &marker))
            .expect("write nginx.conf");
        // The include the example's header comment has a user write.
        std::fs::write(
            dir.path().join("tollgate-authorize.conf"),
            format!("proxy_set_header Tollgate-Authorization \"Bearer {AUTHORIZE_TOKEN}\";\n"),
        )
        .expect("write tollgate-authorize.conf");
        let stderr = std::fs::File::create(dir.path().join("stderr.log")).expect("stderr log");
        let child = Command::new(&binary)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf)
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let mut nginx = Self { child, port, dir };
        nginx.wait_until_serving(&marker)?;
        Ok(nginx)
    }

    /// Polls until this nginx answers its readiness location with its own
    /// marker (readiness, not a timing check). A bare TCP connect is not
    /// enough: when another process holds the port, the connect succeeds
    /// while this nginx is failing to bind.
    #[allow(clippy::disallowed_methods)] // a deadline on a real process's start
    fn wait_until_serving(&mut self, marker: &str) -> Result<(), PortTaken> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let logs = self.logs();
                if logs.contains("Address already in use") {
                    return Err(PortTaken);
                }
                panic!("nginx exited with {status}:\n{logs}");
            }
            if readiness_answer(addr).is_some_and(|body| body == marker) {
                return Ok(());
            }
            assert!(
                Instant::now() < deadline,
                "nginx did not serve on {addr}:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn logs(&self) -> String {
        ["stderr.log", "error.log"]
            .iter()
            .map(|name| {
                let text = std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
                format!("--- {name}\n{text}")
            })
            .collect()
    }

    /// A log file under nginx's prefix: `access.log` (the example's,
    /// `combined`) or `traced.log` ([`TRACED_FORMAT`]).
    pub fn log_path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: the master stops its workers too (SIGKILL would orphan them).
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// nginx could not bind its port: another process holds it.
struct PortTaken;

/// The readiness location's path, which only examples/nginx.conf as the
/// tests render it serves.
const READY_PATH: &str = "/.tollgate-test-ready";

/// What this nginx alone answers at [`READY_PATH`]: its prefix directory.
fn path_marker(prefix: &Path) -> String {
    prefix.display().to_string()
}

/// The body of `GET READY_PATH` on `addr`, if something answered it.
fn readiness_answer(addr: SocketAddr) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {READY_PATH} HTTP/1.0\r\nHost: ready\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

// ---------- the stack and its clients ----------

pub struct Stack {
    pub nginx: Nginx,
    pub tollgate: Option<TollgateProcess>,
    pub upstream: Upstream,
}

impl Stack {
    pub async fn start() -> Self {
        Self::start_with(&example("nginx-tollgate.yaml")).await
    }

    /// The stack with another tollgate config in place of the example's.
    pub async fn start_with(config: &Path) -> Self {
        let upstream = Upstream::start().await;
        let tollgate = TollgateProcess::spawn(config, &example_env("nginx-tollgate.yaml"));
        let nginx = Nginx::start(&tollgate.base, upstream.addr);
        Self {
            nginx,
            tollgate: Some(tollgate),
            upstream,
        }
    }

    pub fn stop_tollgate(&mut self) {
        // Dropping the process kills it and waits for it.
        drop(self.tollgate.take());
    }
}

/// The fields of an admitted answer that nginx passed from the upstream.
pub const ADMITTED_FIELDS: [&str; 7] = [
    "connection",
    "content-length",
    "content-type",
    "date",
    "ratelimit",
    "ratelimit-policy",
    "server",
];
