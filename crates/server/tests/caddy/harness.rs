//! The stack every Caddy test runs: a small upstream that records what
//! reaches it, the real Caddy serving examples/Caddyfile, and a real
//! `tollgate serve` of examples/caddy-tollgate.yaml.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use crate::proxy_stack::*;
use crate::support::{TollgateProcess, free_port};

/// The failed-closed answer of examples/Caddyfile.
pub const FAILED_CLOSED: &str = r#"{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the rate limiter cannot be reached, and this endpoint does not admit requests without it"}"#;

/// The fields of an admitted answer that Caddy passed from the upstream.
pub const ADMITTED_FIELDS: [&str; 6] = [
    "content-length",
    "content-type",
    "date",
    "ratelimit",
    "ratelimit-policy",
    "server",
];

fn caddy_binary() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/usr/local/bin"].map(PathBuf::from))
        .map(|dir| dir.join("caddy"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "the caddy binary is missing (looked in PATH and /usr/bin): \
                 install Caddy with `apt-get install -y caddy` (scripts/test does this)"
            )
        })
}

/// `caddy run` of examples/Caddyfile, its home and data under a temp
/// directory; killed on drop.
pub struct Caddy {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Caddy {
    /// Starts Caddy on a free port. Another process may take that port
    /// between `free_port` and Caddy's bind (Caddy then exits with "address
    /// already in use"), so a taken port is retried on a fresh one; any
    /// other failure to start is the test's failure.
    pub fn start(tollgate_base: &str, upstream: SocketAddr) -> Self {
        for _ in 0..5 {
            match Self::start_on(free_port(), tollgate_base, upstream) {
                Ok(caddy) => return caddy,
                Err(PortTaken) => continue,
            }
        }
        panic!("Caddy found every one of 5 free ports taken before it could bind");
    }

    fn start_on(port: u16, tollgate_base: &str, upstream: SocketAddr) -> Result<Self, PortTaken> {
        let binary = caddy_binary();
        let dir = tempfile::tempdir().expect("Caddy's home");
        let tollgate = tollgate_base
            .strip_prefix("http://")
            .expect("tollgate's base is http://host:port");
        let stderr = std::fs::File::create(dir.path().join("stderr.log")).expect("stderr log");
        // Only what the example reads, and a home of its own: Caddy writes
        // its data (locks, autosave) there, not in the user's home.
        let child = Command::new(&binary)
            .args(["run", "--adapter", "caddyfile", "--config"])
            .arg(example("Caddyfile"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir.path())
            .env("XDG_DATA_HOME", dir.path().join("data"))
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .env("CADDY_PORT", port.to_string())
            .env("TOLLGATE_ADDRESS", tollgate)
            .env("APP_ADDRESS", upstream.to_string())
            .env("TOLLGATE_AUTHORIZE_TOKEN", AUTHORIZE_TOKEN)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let mut caddy = Self { child, port, dir };
        caddy.wait_until_serving()?;
        Ok(caddy)
    }

    /// Polls until this Caddy says it serves its configuration, which it
    /// does once its listener is bound (readiness, not a timing check). A
    /// TCP connect would not do: another process may hold the port.
    #[allow(clippy::disallowed_methods)] // a deadline on a real process's start
    fn wait_until_serving(&mut self) -> Result<(), PortTaken> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let logs = self.logs();
            if let Ok(Some(status)) = self.child.try_wait() {
                if logs.contains("address already in use") {
                    return Err(PortTaken);
                }
                panic!("Caddy exited with {status}:\n{logs}");
            }
            if logs.contains("\"serving initial configuration\"") {
                return Ok(());
            }
            assert!(
                Instant::now() < deadline,
                "Caddy did not serve on port {}:\n{logs}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }
}

impl Drop for Caddy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Caddy could not bind its port: another process holds it.
struct PortTaken;

pub struct Stack {
    pub caddy: Caddy,
    pub tollgate: Option<TollgateProcess>,
    pub upstream: Upstream,
}

impl Stack {
    pub async fn start() -> Self {
        Self::start_with(&example("caddy-tollgate.yaml")).await
    }

    /// The stack with another tollgate config in place of the example's.
    pub async fn start_with(config: &Path) -> Self {
        let upstream = Upstream::start().await;
        let tollgate = TollgateProcess::spawn(config, &example_env("caddy-tollgate.yaml"));
        let caddy = Caddy::start(&tollgate.base, upstream.addr);
        Self {
            caddy,
            tollgate: Some(tollgate),
            upstream,
        }
    }

    pub fn stop_tollgate(&mut self) {
        // Dropping the process kills it and waits for it.
        drop(self.tollgate.take());
    }

    /// tollgate's own address, to call it without Caddy.
    pub fn tollgate_addr(&self) -> SocketAddr {
        self.tollgate
            .as_ref()
            .expect("tollgate runs")
            .base
            .trim_start_matches("http://")
            .parse()
            .expect("tollgate's address")
    }
}
