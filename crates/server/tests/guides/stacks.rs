//! What a guide's run block runs against: the guide's own files, as
//! written but for their ports (each a free one), served by the real
//! programs — tollgate, nginx, Caddy, Envoy, redis-server.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use tollgate_testkit::RedisServer;

use crate::blocks::{Guide, blocks, root};
use crate::proxy_stack::Upstream;
use crate::support::{envoy_binary, free_port, tollgate_bin};

/// `TOLLGATE_IDENTITY_KEY` of a tollgate whose config's header exports one
/// (with `openssl rand`, for a reader).
pub const IDENTITY_KEY: &str = "guides-test-identity-key-of-32-bytes!";

/// A process, stopped (SIGTERM, then reaped) on drop.
struct Process {
    child: Child,
    /// Held so that its listen lines never meet a closed pipe.
    _stdout: Option<BufReader<ChildStdout>>,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// One guide's programs running, and the ports they took.
pub struct Stack {
    /// Each port the guide writes, and the free port in its place.
    ports: Vec<(u16, u16)>,
    dir: tempfile::TempDir,
    tollgates: Vec<Process>,
    others: Vec<Process>,
    _redis: Vec<RedisServer>,
    pub upstream: Option<Upstream>,
}

impl Stack {
    fn new(ports: &[u16]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        // nginx's workers run unprivileged when the tests run as root.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod the temp dir");
        Self {
            ports: ports.iter().map(|&p| (p, free_port())).collect(),
            dir,
            tollgates: Vec::new(),
            others: Vec::new(),
            _redis: Vec::new(),
            upstream: None,
        }
    }

    /// The free port in place of `written`.
    pub fn port(&self, written: u16) -> u16 {
        self.ports
            .iter()
            .find(|(from, _)| *from == written)
            .unwrap_or_else(|| panic!("the stack maps no port {written}"))
            .1
    }

    /// `text` with each written port replaced by its free port: as
    /// `host:PORT` (`:PORT` not followed by a digit) and as Envoy's
    /// `port_value: PORT`.
    pub fn subst(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (from, to) in &self.ports {
            out = out.replace(&format!("port_value: {from}"), &format!("port_value: {to}"));
            let needle = format!(":{from}");
            let mut replaced = String::with_capacity(out.len());
            let mut rest = out.as_str();
            while let Some(at) = rest.find(&needle) {
                let after = &rest[at + needle.len()..];
                replaced.push_str(&rest[..at]);
                if after.starts_with(|c: char| c.is_ascii_digit()) {
                    replaced.push_str(&needle);
                } else {
                    replaced.push_str(&format!(":{to}"));
                }
                rest = after;
            }
            replaced.push_str(rest);
            out = replaced;
        }
        out
    }

    /// The repository's file `relative`, ports replaced, written into the
    /// stack's directory under its own name; its path there.
    fn place(&self, relative: &str) -> PathBuf {
        let text = std::fs::read_to_string(root().join(relative))
            .unwrap_or_else(|e| panic!("read {relative}: {e}"));
        let name = Path::new(relative).file_name().expect("a file name");
        let path = self.dir.path().join(name);
        std::fs::write(&path, self.subst(&text)).expect("write a placed file");
        path
    }

    /// `tollgate serve --config CONFIG ARGS...` of a placed config (and of
    /// the files it names, placed beside it); returns once it listens.
    fn tollgate(&mut self, config: &str, args: &[&str], companions: &[&str]) {
        for companion in companions {
            self.place(companion);
        }
        let path = self.place(config);
        let args: Vec<String> = args.iter().map(|a| self.subst(a)).collect();
        let mut command = Command::new(tollgate_bin());
        // The identity key only where the config's header has it exported,
        // as a reader following the guide would.
        let text = std::fs::read_to_string(&path).expect("read the placed config");
        if text.contains("export TOLLGATE_IDENTITY_KEY=") {
            command.env("TOLLGATE_IDENTITY_KEY", IDENTITY_KEY);
        } else {
            command.env_remove("TOLLGATE_IDENTITY_KEY");
        }
        let mut child = command
            .args(["serve", "--config"])
            .arg(&path)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn tollgate serve");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("a listen line");
        assert!(
            line.starts_with("listening on "),
            "tollgate printed {line:?}"
        );
        self.tollgates.push(Process {
            child,
            _stdout: Some(stdout),
        });
    }

    /// Stops every tollgate of the stack (SIGTERM, waited for).
    pub fn stop_tollgate(&mut self) {
        self.tollgates.clear();
    }

    fn other(&mut self, command: &mut Command) {
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
        self.others.push(Process {
            child,
            _stdout: None,
        });
    }

    /// nginx (or Caddy) in `dir` with its tollgate; the stub upstream is
    /// the proxy's own second server.
    fn proxy(kind: &str, dir: &str) -> Self {
        let mut stack = Self::new(&[8000, 8080, 3000]);
        stack.tollgate(&format!("{dir}/tollgate.yaml"), &[], &[]);
        if kind == "nginx" {
            let conf = stack.place(&format!("{dir}/nginx.conf"));
            let binary = which("nginx", &["/usr/sbin", "/usr/local/sbin"]);
            let prefix = stack.dir.path().to_owned();
            stack.other(
                Command::new(binary)
                    .arg("-p")
                    .arg(&prefix)
                    .arg("-c")
                    .arg(&conf)
                    .args(["-g", "daemon off;"]),
            );
        } else {
            let conf = stack.place(&format!("{dir}/Caddyfile"));
            let home = stack.dir.path().to_owned();
            stack.other(
                Command::new(which("caddy", &["/usr/bin", "/usr/local/bin"]))
                    .args(["run", "--adapter", "caddyfile", "--config"])
                    .arg(&conf)
                    .env("HOME", &home)
                    .env("XDG_DATA_HOME", &home)
                    .env("XDG_CONFIG_HOME", &home),
            );
        }
        stack.wait_http(stack.port(3000), "/", "200");
        stack.wait_http(stack.port(8000), "/", "");
        stack
    }

    /// Envoy serving examples/envoy.yaml, tollgate examples/envoy-tollgate.yaml,
    /// and a stub upstream (any method, 200) on the application's port.
    pub async fn envoy() -> Self {
        let upstream = Upstream::start().await;
        let mut stack = Self::new(&[10000, 9901, 8080, 8081]);
        stack.ports.push((3000, upstream.addr.port()));
        stack.upstream = Some(upstream);
        stack.tollgate(
            "examples/envoy-tollgate.yaml",
            &[],
            &["examples/envoy-ratelimit.yaml"],
        );
        let conf = stack.place("examples/envoy.yaml");
        stack.other(Command::new(envoy_binary()).arg("-c").arg(&conf).args([
            "--disable-hot-restart",
            "--concurrency",
            "1",
            "-l",
            "warning",
        ]));
        stack.wait_http(stack.port(9901), "/ready", "200");
        stack
    }

    /// The guide's own commands, run on free ports: a redis-server for each
    /// `redis-server --port N` line of its blocks, then each
    /// `tollgate serve --config FILE FLAGS...` line.
    fn from_commands(guide: &Guide) -> Self {
        let lines: Vec<Vec<String>> = blocks(&guide.text)
            .iter()
            .flat_map(|b| b.text.lines().map(str::to_owned).collect::<Vec<_>>())
            .map(|line| {
                let command = line.split('#').next().unwrap_or_default().to_owned();
                command.split_whitespace().map(str::to_owned).collect()
            })
            .collect();
        let redis_ports: Vec<u16> = lines
            .iter()
            .filter(|words| words.first().is_some_and(|w| w == "redis-server"))
            .map(|words| flag(words, "--port").parse().expect("a port"))
            .collect();
        let serves: Vec<&Vec<String>> = lines
            .iter()
            .filter(|words| words.len() > 3 && words[..3] == ["tollgate", "serve", "--config"])
            .collect();
        let http_ports: Vec<u16> = serves
            .iter()
            .map(|words| {
                let listen = flag(words, "--listen");
                let port = listen.rsplit(':').next().expect("HOST:PORT");
                port.parse().expect("a port")
            })
            .collect();
        let mut stack = Self::new(&http_ports);
        for written in redis_ports {
            let redis = RedisServer::start().expect("a redis-server");
            stack.ports.push((written, redis.port()));
            stack._redis.push(redis);
        }
        for words in serves {
            let args: Vec<&str> = words[4..].iter().map(String::as_str).collect();
            stack.tollgate(&words[3], &args, &[]);
        }
        stack
    }

    /// `tollgate serve --config CONFIG` on a free port in place of 8080,
    /// as the README's quick start runs it.
    pub fn serving(config: &str) -> Self {
        let mut stack = Self::new(&[8080]);
        stack.tollgate(config, &[], &[]);
        stack
    }

    /// The stack a run block of `guide` names (`run=NAME`).
    pub async fn named(name: &str, guide: &Guide) -> Self {
        match name {
            "envoy" => Self::envoy().await,
            "redis" | "regions" => Self::from_commands(guide),
            walkthrough => {
                let kind = walkthrough.split('/').next().expect("a proxy");
                assert!(
                    kind == "nginx" || kind == "caddy",
                    "no stack is named {walkthrough}"
                );
                Self::proxy(kind, &format!("examples/walkthrough/{walkthrough}"))
            }
        }
    }

    /// Polls `GET path` on `port` until it answers with a status starting
    /// `status` (bounded): the program is up.
    fn wait_http(&mut self, port: u16, path: &str, status: &str) {
        for _ in 0..600 {
            for process in &mut self.others {
                if let Ok(Some(exit)) = process.child.try_wait() {
                    panic!("a program of the stack exited: {exit}");
                }
            }
            if let Some(answer) = get(port, path)
                && answer.starts_with(&format!("HTTP/1.1 {status}"))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("nothing answered GET {path} on port {port}");
    }

    /// Runs a guide's shell block, ports replaced, with bash in the
    /// repository's root; its stdout.
    pub fn run(&self, script: &str) -> String {
        let script = self.subst(script);
        let out = Command::new("bash")
            .args(["-e", "-c", &script])
            .current_dir(root())
            .output()
            .expect("run bash");
        assert!(
            out.status.success(),
            "the block failed ({}):\n{script}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8 output")
    }
}

/// The value after `name` among a command's words.
fn flag<'a>(words: &'a [String], name: &str) -> &'a str {
    words
        .windows(2)
        .find(|w| w[0] == name)
        .map(|w| w[1].as_str())
        .unwrap_or_else(|| panic!("{words:?} has no {name}"))
}

fn which(name: &str, also: &[&str]) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(also.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| panic!("{name} is missing: scripts/test installs it"))
}

/// The head of `GET path` on 127.0.0.1:`port`, if anything answered.
fn get(port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    Some(response)
}
