//! A real Prometheus (Debian's `prometheus` package) on a free port with
//! its own storage, scraping one target every second and evaluating rule
//! files every second; and `promtool`, which comes with it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::free_port;

/// `name` (`prometheus` or `promtool`) on PATH or where Debian puts it.
/// Missing, it fails the test with what to install: never a skip.
pub fn binary(name: &str) -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    on_path
        .or_else(|| Some(Path::new("/usr/bin").join(name)).filter(|p| p.is_file()))
        .unwrap_or_else(|| {
            panic!(
                "{name} is missing: install it with `apt-get install -y prometheus` (scripts/test does)"
            )
        })
}

/// `promtool ARGS...` run in `dir`: whether it succeeded, and what it printed.
pub fn promtool(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(binary("promtool"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A running Prometheus; killed on drop.
pub struct Prometheus {
    child: Child,
    pub base: String,
    dir: tempfile::TempDir,
    client: reqwest::Client,
}

impl Prometheus {
    /// Starts Prometheus scraping `target` (`HOST:PORT`, job `tollgate`)
    /// every second with `rules` loaded, and waits until it is ready. A
    /// port taken between choosing and binding it is chosen again.
    pub async fn start(target: &str, rules: &Path) -> Self {
        let mut last = String::new();
        for _ in 0..3 {
            let dir = tempfile::tempdir().expect("temp dir");
            let config = dir.path().join("prometheus.yml");
            std::fs::write(
                &config,
                format!(
                    "global: {{scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}}\n\
                     rule_files: [\"{}\"]\n\
                     scrape_configs:\n  - job_name: tollgate\n    static_configs: [{{targets: [\"{target}\"]}}]\n",
                    rules.display()
                ),
            )
            .expect("write prometheus.yml");
            let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log file");
            let base = format!("http://127.0.0.1:{}", free_port());
            let child = Command::new(binary("prometheus"))
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!(
                    "--web.listen-address={}",
                    base.trim_start_matches("http://")
                ))
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("spawn prometheus");
            let mut prometheus = Self {
                child,
                base,
                dir,
                client: reqwest::Client::new(),
            };
            match prometheus.wait_ready().await {
                Ok(()) => return prometheus,
                Err(why) => last = why,
            }
        }
        panic!("prometheus did not start: {last}")
    }

    /// Until Prometheus answers ready; its log if it exits first.
    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("it exited ({status}):\n{}", self.log()));
            }
            let ready = self
                .client
                .get(format!("{}/-/ready", self.base))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return Ok(());
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "prometheus not ready in 120 s:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// What Prometheus logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET {base}{path}` with `query`: the answer's `data`, which must
    /// come with `status: success`.
    pub async fn api(&self, path: &str, query: &[(&str, &str)]) -> Value {
        let answer: Value = self
            .client
            .get(format!("{}{path}", self.base))
            .query(query)
            .send()
            .await
            .expect("prometheus answers")
            .json()
            .await
            .expect("prometheus answers JSON");
        assert_eq!(answer["status"], "success", "{path} {query:?}: {answer}");
        answer["data"].clone()
    }

    /// An instant query's series (a vector's elements; a scalar is one).
    pub async fn query(&self, promql: &str) -> Vec<Value> {
        let data = self.api("/api/v1/query", &[("query", promql)]).await;
        match data["resultType"].as_str() {
            Some("vector") | Some("matrix") => {
                data["result"].as_array().cloned().unwrap_or_default()
            }
            _ => vec![data["result"].clone()],
        }
    }

    /// The alerts in `state` (`pending` or `firing`), by name.
    pub async fn alerts(&self, state: &str) -> Vec<String> {
        let data = self.api("/api/v1/alerts", &[]).await;
        let mut names: Vec<String> = data["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["state"] == state)
            .filter_map(|a| a["labels"]["alertname"].as_str().map(str::to_owned))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Each loaded alerting rule's name and evaluation health.
    pub async fn rules(&self) -> Vec<(String, String)> {
        let data = self.api("/api/v1/rules", &[("type", "alert")]).await;
        data["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .map(|r| {
                (
                    r["name"].as_str().unwrap_or_default().to_owned(),
                    r["health"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` every 250 ms until it gives `Some`, or fails with `what`
/// and the last state `check` described after `secs`: a loaded machine
/// gets a generous deadline, and nothing is timed.
pub async fn until<T, F, Fut>(what: &str, secs: u64, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        match check().await {
            Ok(found) => return found,
            Err(last) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: not within {secs} s; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}
