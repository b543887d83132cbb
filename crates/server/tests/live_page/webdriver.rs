//! A real headless Chromium driven by a real chromedriver over the W3C
//! WebDriver protocol (plain HTTP and JSON): the few commands the page's
//! test needs — open a page, run a script, take a screenshot.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use crate::support::free_port;

/// What to install when a browser part is missing.
const INSTALL: &str = "install Debian's chromium and chromium-driver: `apt-get install -y chromium chromium-driver` (scripts/test does this)";

/// The first of `names` found on the PATH or as a path, else a failure
/// saying what to install.
fn find(names: &[&str]) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in names {
        let as_path = Path::new(name);
        if as_path.is_absolute() && as_path.is_file() {
            return as_path.to_path_buf();
        }
        if let Some(found) = std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
        {
            return found;
        }
    }
    panic!("{} is missing: {INSTALL}", names[0]);
}

/// A chromedriver process on a free loopback port, with one session of
/// headless Chromium; both end on drop.
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    client: reqwest::Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium of `width`×`height`.
    pub async fn start(width: u32, height: u32) -> Self {
        let chromium = find(&["chromium", "/usr/lib/chromium/chromium", "chromium-browser"]);
        let chromedriver = find(&["chromedriver", "/usr/lib/chromium/chromedriver"]);
        let port = free_port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("{} does not start ({e}): {INSTALL}", chromedriver.display())
            });
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("HTTP client");
        let mut ready = false;
        for _ in 0..100 {
            let status = client.get(format!("{base}/status")).send().await;
            if let Ok(status) = status
                && let Ok(body) = status.json::<Value>().await
                && body["value"]["ready"] == true
            {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(ready, "chromedriver did not become ready on port {port}");
        let profile = tempfile::tempdir().expect("profile dir");
        let args = [
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--no-first-run".to_owned(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
        }}});
        let answer: Value = client
            .post(format!("{base}/session"))
            .json(&capabilities)
            .send()
            .await
            .expect("POST /session")
            .json()
            .await
            .expect("a session's JSON");
        let session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("chromedriver opened no session ({answer}): {INSTALL}"))
            .to_owned();
        Self {
            driver,
            base,
            session,
            client,
            _profile: profile,
        }
    }

    /// One WebDriver command of this session: its `value`, or a failure
    /// naming the command and the error.
    async fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut request = self.client.request(method, &url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer: Value = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("WebDriver {path}: {e}"))
            .json()
            .await
            .unwrap_or_else(|e| panic!("WebDriver {path}: not JSON: {e}"));
        if answer["value"]["error"].is_string() {
            panic!("WebDriver {path}: {}", answer["value"]);
        }
        answer["value"].clone()
    }

    /// Opens `url`.
    pub async fn go(&self, url: &str) {
        self.command(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    /// Runs `script` (a function body; `return` gives its value) in the page.
    pub async fn run(&self, script: &str) -> Value {
        let body = json!({"script": script, "args": []});
        self.command(reqwest::Method::POST, "/execute/sync", Some(body))
            .await
    }

    /// The text of the first element `selector` finds, if any.
    pub async fn text(&self, selector: &str) -> Option<String> {
        let script = format!(
            "const e = document.querySelector({}); return e ? e.textContent : null;",
            Value::String(selector.to_owned())
        );
        self.run(&script).await.as_str().map(str::to_owned)
    }

    /// The page as a PNG, written to `path`.
    pub async fn screenshot(&self, path: &Path) {
        let value = self
            .command(reqwest::Method::GET, "/screenshot", None)
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(value.as_str().expect("a screenshot is base64 text"))
            .expect("a screenshot decodes");
        assert_eq!(&png[1..4], b"PNG", "the screenshot is a PNG");
        std::fs::write(path, png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ending the session ends Chromium (also when a test failed and
        // unwinds, so nothing async is at hand: one plain HTTP request).
        if let Some(address) = self.base.strip_prefix("http://")
            && let Ok(mut stream) = std::net::TcpStream::connect(address)
        {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = write!(
                stream,
                "DELETE /session/{} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
                self.session
            );
            let _ = stream.read_to_end(&mut Vec::new());
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

#[test]
#[should_panic(
    expected = "no-such-chromium is missing: install Debian's chromium and chromium-driver: `apt-get install -y chromium chromium-driver`"
)]
fn a_missing_browser_fails_saying_what_to_install() {
    find(&["no-such-chromium", "/no/such/dir/chromium"]);
}
