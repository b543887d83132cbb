//! `/readyz` with a store down, per store (`readiness_when_down`), against
//! real redis-server processes killed and started again: ready by default
//! (each policy answers per its failure mode), `503` and not ready while a
//! store marked `not_ready` does not answer, ready again once it does.

mod support;

use std::process::Command;

use support::{TollgateProcess, tollgate_bin};
use tollgate_testkit::RedisServer;

/// `GET /readyz`: (status, body).
async fn readyz(base: &str) -> (u16, String) {
    let r = reqwest::get(format!("{base}/readyz"))
        .await
        .expect("readyz");
    let status = r.status().as_u16();
    (status, r.text().await.expect("body"))
}

fn serve(dir: &std::path::Path, name: &str, yaml: &str) -> TollgateProcess {
    let path = dir.join(name);
    std::fs::write(&path, yaml).expect("write config");
    TollgateProcess::spawn(&path, &[])
}

const POLICIES: &str = "policies:\n  - {name: api, algorithm: fixed_window, limit: 5, window: 1s, on_store_failure: fail_closed}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_marked_not_ready_fails_readiness_while_it_is_down_and_the_default_stays_ready() {
    let mut redis = RedisServer::start().expect("redis-server");
    let dir = tempfile::tempdir().expect("temp dir");
    let url = redis.url();
    let strict = serve(
        dir.path(),
        "strict.yaml",
        &format!(
            "store: {{redis: {{url: \"{url}\", timeout: 200ms}}, readiness_when_down: not_ready}}\n{POLICIES}"
        ),
    );
    let default = serve(
        dir.path(),
        "default.yaml",
        &format!("store: {{redis: {{url: \"{url}\", timeout: 200ms}}}}\n{POLICIES}"),
    );
    let up = r#"{"ready":true,"store":"up","stores":{"global":"up"}}"#.to_owned();
    assert_eq!(readyz(&strict.base).await, (200, up.clone()));
    assert_eq!(readyz(&default.base).await, (200, up.clone()));

    redis.kill().expect("kill redis-server");
    assert_eq!(
        readyz(&strict.base).await,
        (
            503,
            r#"{"ready":false,"store":"down","stores":{"global":"down"}}"#.to_owned()
        )
    );
    assert_eq!(
        readyz(&default.base).await,
        (
            200,
            r#"{"ready":true,"store":"down","stores":{"global":"down"}}"#.to_owned()
        )
    );

    redis.restart().expect("restart redis-server");
    assert_eq!(readyz(&strict.base).await, (200, up.clone()));
    assert_eq!(readyz(&default.base).await, (200, up));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_is_each_stores_own_a_regional_one_down_leaves_it_ready() {
    let mut regional = RedisServer::start().expect("regional redis-server");
    let mut global = RedisServer::start().expect("global redis-server");
    let dir = tempfile::tempdir().expect("temp dir");
    let yaml = format!(
        "region: a\nregions: {{a: {{}}, b: {{}}}}\nstores:\n  \
         regional: {{redis: {{url: \"{}\", timeout: 200ms}}}}\n  \
         global: {{redis: {{url: \"{}\", timeout: 200ms}}, readiness_when_down: not_ready}}\n\
         policies:\n  - {{name: api, algorithm: fixed_window, limit: 5, window: 1s, scope: global}}\n  \
         - {{name: reads, algorithm: fixed_window, limit: 5, window: 1s, scope: region}}\n",
        regional.url(),
        global.url()
    );
    let server = serve(dir.path(), "regions.yaml", &yaml);
    regional.kill().expect("kill the regional redis-server");
    assert_eq!(
        readyz(&server.base).await,
        (
            200,
            r#"{"ready":true,"store":"down","stores":{"global":"up","regional":"down"}}"#
                .to_owned()
        )
    );
    global.kill().expect("kill the global redis-server");
    assert_eq!(
        readyz(&server.base).await,
        (
            503,
            r#"{"ready":false,"store":"down","stores":{"global":"down","regional":"down"}}"#
                .to_owned()
        )
    );
}

/// `tollgate validate` on `yaml`: (exit code, stderr's first line).
fn validate(yaml: &str) -> (i32, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, yaml).expect("write config");
    let out = Command::new(tollgate_bin())
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .expect("validate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let first = stderr.lines().next().unwrap_or("").to_owned();
    let shown = format!("tollgate: {}: ", path.display());
    (
        out.status.code().expect("exit code"),
        first.replace(&shown, ""),
    )
}

#[test]
fn a_bad_readiness_is_refused_naming_the_store() {
    assert_eq!(
        validate(&format!(
            "store: {{redis: {{url: \"redis://127.0.0.1:1\"}}, readiness_when_down: maybe}}\n{POLICIES}"
        )),
        (
            1,
            "config: store.readiness_when_down: must be ready or not_ready, got string \"maybe\""
                .to_owned()
        )
    );
    assert_eq!(
        validate(&format!(
            "store: {{memory: {{}}, readiness_when_down: not_ready}}\n{POLICIES}"
        )),
        (
            1,
            "config: store.readiness_when_down: a memory store is never down (it is in the process)"
                .to_owned()
        )
    );
}
