//! tollgate's test harness: real `redis-server` processes, never mocks.
//!
//! Each server runs on a free loopback port (never 6379) in its own temporary
//! directory, without persistence, and dies with its handle. A test can kill
//! it (SIGKILL), pause it (SIGSTOP), resume it (SIGCONT) and restart it on
//! the same port, and can build a Redis Cluster of several masters with
//! `redis-cli --cluster create`. When `redis-server` is not installed the
//! harness fails with the command that installs it: a test that needs Redis
//! never skips silently.
//!
//! A [`DelayProxy`] stands between a client and such a server to make the
//! link slow, reset or partitioned, as between regions.

#![deny(missing_docs)]

mod delay_proxy;

pub use delay_proxy::{Delay, DelayProxy, Link, MAX_CONNECTIONS, MAX_QUEUED_BYTES};

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use thiserror::Error;

const INSTALL_HINT: &str = "apt-get install -y redis-server";
/// How long a started server may take to answer PING.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// Why the harness could not give a test its servers.
#[derive(Debug, Error)]
pub enum HarnessError {
    /// A program the harness runs is not installed.
    #[error("{program} is not installed (run `{INSTALL_HINT}`): {source}")]
    Missing {
        /// The program, e.g. `redis-server`.
        program: &'static str,
        /// Why it could not be run.
        source: std::io::Error,
    },
    /// A file, directory or socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What the harness was doing.
        what: String,
        /// The error it met.
        source: std::io::Error,
    },
    /// A server is not running, or did not become ready in time.
    #[error("{0}")]
    NotReady(String),
    /// Another process bound the port between [`free_port`] and the server's
    /// own bind; starting again on a fresh port is the cure.
    #[error("port {0} was taken before the server could bind it")]
    PortTaken(u16),
    /// A `redis-cli` command failed.
    #[error("{command} failed: {output}")]
    Command {
        /// The command, as run.
        command: String,
        /// What it printed.
        output: String,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> HarnessError {
    let what = what.into();
    move |source| HarnessError::Io { what, source }
}

/// Fails with the install command when `redis-server` or `redis-cli` is absent.
pub fn require_redis() -> Result<(), HarnessError> {
    for program in ["redis-server", "redis-cli"] {
        Command::new(program)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|source| HarnessError::Missing { program, source })?;
    }
    Ok(())
}

/// A port nothing listens on right now (the kernel's choice, so never 6379
/// unless the kernel picks it, which we refuse).
pub fn free_port() -> Result<u16, HarnessError> {
    loop {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io("binding a free port"))?;
        let port = listener.local_addr().map_err(io("reading a port"))?.port();
        if port != 6379 && port < 55_000 {
            return Ok(port);
        }
    }
}

/// One `redis-server` process on a loopback port.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    extra: Vec<String>,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl RedisServer {
    /// A standalone server, ready to answer.
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(&[])
    }

    /// A server with extra `redis-server` arguments (e.g. `["--cluster-enabled", "yes"]`).
    pub fn start_with(extra: &[&str]) -> Result<Self, HarnessError> {
        require_redis()?;
        let mut attempts = 0;
        loop {
            let dir = tempfile::Builder::new()
                .prefix("tollgate-redis-")
                .tempdir()
                .map_err(io("creating a temporary directory"))?;
            let mut server = Self {
                port: free_port()?,
                extra: extra.iter().map(|s| (*s).to_owned()).collect(),
                dir,
                child: None,
            };
            match server.spawn() {
                Err(HarnessError::PortTaken(_)) if attempts < 5 => attempts += 1,
                spawned => return spawned.map(|()| server),
            }
        }
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`
    /// Its `redis://127.0.0.1:PORT` URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its temporary directory: config, logs and any files it writes.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL: the server dies at once, losing everything in memory.
    pub fn kill(&mut self) -> Result<(), HarnessError> {
        if let Some(mut child) = self.child.take() {
            // A stopped process still dies of SIGKILL.
            child.kill().map_err(io("killing redis-server"))?;
            child.wait().map_err(io("reaping redis-server"))?;
        }
        Ok(())
    }

    /// SIGSTOP: the server keeps its connections but answers nothing.
    pub fn pause(&self) -> Result<(), HarnessError> {
        self.signal("STOP")
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) -> Result<(), HarnessError> {
        self.signal("CONT")
    }

    /// Kills the server if it runs and starts it again on the same port
    /// (empty: no persistence, so its script cache is gone too).
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.kill()?;
        self.spawn()
    }

    /// Runs `redis-cli -p PORT ARGS...` and returns its standard output.
    pub fn cli(&self, args: &[&str]) -> Result<String, HarnessError> {
        cli(self.port, args)
    }

    /// The script calls (`EVALSHA` and `EVAL`) this server has served since
    /// it started, from `INFO commandstats`.
    pub fn script_calls(&self) -> Result<u64, HarnessError> {
        let info = self.cli(&["INFO", "commandstats"])?;
        Ok(info
            .lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum())
    }

    fn signal(&self, name: &str) -> Result<(), HarnessError> {
        let pid = self
            .pid()
            .ok_or_else(|| HarnessError::NotReady("redis-server is not running".into()))?;
        let status = Command::new("kill")
            .args([&format!("-{name}"), &pid.to_string()])
            .status()
            .map_err(io("running kill"))?;
        if status.success() {
            Ok(())
        } else {
            Err(HarnessError::Command {
                command: format!("kill -{name} {pid}"),
                output: status.to_string(),
            })
        }
    }

    fn spawn(&mut self) -> Result<(), HarnessError> {
        let log = self.dir.path().join("redis.log");
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .args(["--dir", &path_text(self.dir.path())])
            .args(["--logfile", &path_text(&log)])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let before = log_len(&log);
        let child = command.spawn().map_err(|source| HarnessError::Missing {
            program: "redis-server",
            source,
        })?;
        let child = self.child.insert(child);
        wait_until_ready(child, self.port, &log, before)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // Nothing to report from a destructor; the process is gone either way.
        let _ = self.kill();
    }
}

/// A Redis Sentinel watching one master.
#[derive(Debug)]
pub struct RedisSentinel {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl RedisSentinel {
    /// A sentinel (quorum 1) that monitors `master` at `127.0.0.1:master_port`.
    pub fn start(master: &str, master_port: u16) -> Result<Self, HarnessError> {
        let mut attempts = 0;
        loop {
            match Self::start_on(free_port()?, master, master_port) {
                Err(HarnessError::PortTaken(_)) if attempts < 5 => attempts += 1,
                started => return started,
            }
        }
    }

    fn start_on(port: u16, master: &str, master_port: u16) -> Result<Self, HarnessError> {
        require_redis()?;
        let dir = tempfile::Builder::new()
            .prefix("tollgate-sentinel-")
            .tempdir()
            .map_err(io("creating a temporary directory"))?;
        let conf = dir.path().join("sentinel.conf");
        let log = dir.path().join("sentinel.log");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nlogfile {}\n\
                 sentinel monitor {master} 127.0.0.1 {master_port} 1\n\
                 sentinel down-after-milliseconds {master} 1000\n",
                path_text(dir.path()),
                path_text(&log),
            ),
        )
        .map_err(io("writing sentinel.conf"))?;
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| HarnessError::Missing {
                program: "redis-server",
                source,
            })?;
        let mut sentinel = Self {
            port,
            dir,
            child: Some(child),
        };
        if let Some(child) = sentinel.child.as_mut() {
            wait_until_ready(child, port, &log, 0)?;
        }
        Ok(sentinel)
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`
    /// Its `redis://127.0.0.1:PORT` URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its temporary directory: config, logs and any files it writes.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Nothing to report from a destructor.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A Redis Cluster of masters without replicas, made by `redis-cli --cluster create`.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `masters` (at least 3) cluster-enabled servers, joins them and
    /// waits until every node reports `cluster_state:ok`.
    pub fn start(masters: usize) -> Result<Self, HarnessError> {
        let mut nodes = Vec::with_capacity(masters);
        for _ in 0..masters {
            nodes.push(Self::start_node()?);
        }
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())));
        args.extend([
            "--cluster-replicas".into(),
            "0".into(),
            "--cluster-yes".into(),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        nodes[0].cli(&args)?;
        let cluster = Self { nodes };
        cluster.wait_until_ok()?;
        Ok(cluster)
    }

    /// One cluster-enabled server. Its bus port is picked as its client
    /// port is, so it may be taken before the server binds it too: then
    /// both are picked again.
    fn start_node() -> Result<RedisServer, HarnessError> {
        let mut attempts = 0;
        loop {
            let bus = free_port()?.to_string();
            match RedisServer::start_with(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                "--cluster-port",
                &bus,
            ]) {
                Err(HarnessError::PortTaken(_)) if attempts < 5 => attempts += 1,
                started => return started,
            }
        }
    }

    /// Its masters, in the order they were started.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The master at `index`, to kill, pause or restart; `None` past the end.
    pub fn node_mut(&mut self, index: usize) -> Option<&mut RedisServer> {
        self.nodes.get_mut(index)
    }

    /// `redis://127.0.0.1:PORT` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Waits until every running node says `cluster_state:ok`.
    #[allow(
        clippy::disallowed_methods,
        reason = "a real process starts in wall time; the deadline must be wall time too"
    )]
    pub fn wait_until_ok(&self) -> Result<(), HarnessError> {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            let ok = self.nodes.iter().filter(|n| n.pid().is_some()).all(|n| {
                n.cli(&["cluster", "info"])
                    .is_ok_and(|info| info.contains("cluster_state:ok"))
            });
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(HarnessError::NotReady(
                    "the cluster did not reach cluster_state:ok".into(),
                ));
            }
            sleep(Duration::from_millis(50));
        }
    }
}

/// Runs `redis-cli -p PORT ARGS...` and returns its standard output.
pub fn cli(port: u16, args: &[&str]) -> Result<String, HarnessError> {
    let output = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| HarnessError::Missing {
            program: "redis-cli",
            source,
        })?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(HarnessError::Command {
            command: format!("redis-cli -p {port} {}", args.join(" ")),
            output: format!("{stdout}{}", String::from_utf8_lossy(&output.stderr)),
        })
    }
}

#[allow(
    clippy::disallowed_methods,
    reason = "a real process starts in wall time; the deadline must be wall time too"
)]
/// Waits until the server `child` just started says in its own log that it
/// listens, and answers PING. Its log, not the port, tells whether it is
/// ours: another process may hold the port, and would answer PING all the
/// same. Only what this start appended after `before` bytes counts (a
/// restart reuses the log).
fn wait_until_ready(
    child: &mut Child,
    port: u16,
    log: &Path,
    before: usize,
) -> Result<(), HarnessError> {
    let deadline = Instant::now() + READY_WITHIN;
    loop {
        let text = std::fs::read(log)
            .map(|text| {
                String::from_utf8_lossy(text.get(before..).unwrap_or_default()).into_owned()
            })
            .unwrap_or_default();
        if let Ok(Some(status)) = child.try_wait() {
            if text.contains("Address already in use") {
                return Err(HarnessError::PortTaken(port));
            }
            return Err(HarnessError::NotReady(format!(
                "redis-server on port {port} exited with {status}; its log:\n{text}"
            )));
        }
        // Redis writes this once it has bound its port, sentinels too.
        if text.contains("Running mode=") && ping(port) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(HarnessError::NotReady(format!(
                "redis-server on port {port} did not answer PING; its log:\n{text}"
            )));
        }
        sleep(Duration::from_millis(20));
    }
}

/// How much a log holds so far (nothing when it does not exist yet).
fn log_len(log: &Path) -> usize {
    std::fs::metadata(log).map_or(0, |meta| usize::try_from(meta.len()).unwrap_or(usize::MAX))
}

fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    // A server that wants a password answers -NOAUTH: it is up all the same.
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply).is_ok()
        && (&reply == b"+PONG\r\n" || reply.starts_with(b"-NOAUTH"))
}

fn path_text(path: &Path) -> String {
    PathBuf::from(path).to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_answers_survives_a_pause_and_comes_back_after_a_kill() {
        let mut server = RedisServer::start().expect("redis-server starts");
        assert_ne!(server.port(), 6379);
        assert_eq!(server.cli(&["set", "k", "1"]).expect("set").trim(), "OK");
        server.pause().expect("pause");
        server.resume().expect("resume");
        assert_eq!(server.cli(&["get", "k"]).expect("get").trim(), "1");
        server.kill().expect("kill");
        assert!(!ping(server.port()));
        server.restart().expect("restart");
        assert_eq!(server.cli(&["get", "k"]).expect("get").trim(), "");
    }

    #[test]
    fn a_port_another_process_holds_is_reported_taken_not_ready() {
        // Something that accepts connections (and would answer a PING with
        // silence or garbage) holds the port before redis-server binds it.
        let thief = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let port = thief.local_addr().expect("addr").port();
        let mut server = RedisServer {
            port,
            extra: Vec::new(),
            dir: tempfile::tempdir().expect("dir"),
            child: None,
        };
        match server.spawn() {
            Err(HarnessError::PortTaken(taken)) => assert_eq!(taken, port),
            other => panic!("expected PortTaken({port}), got {other:?}"),
        }
    }
}
