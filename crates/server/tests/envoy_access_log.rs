//! Envoy's own JSON access log, written by the real Envoy serving
//! examples/envoy.yaml in front of a real `tollgate serve` of
//! examples/envoy-tollgate.yaml, made a trace by `tollgate trace --from
//! envoy-json` and replayed through that config: replay decides as
//! `serve` did, per client address or per tenant header.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::{EnvoyProcess, TollgateProcess, free_port, tollgate_fed};

const IDENTITY_KEY: &str = "an identity key of thirty-two bytes or more";

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
}

/// The access log the test adds to examples/envoy.yaml's connection
/// manager: the fields docs/traces.md recommends.
fn access_log(path: &Path) -> String {
    format!(
        r#"stat_prefix: edge
          access_log:
          - name: envoy.access_loggers.file
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
              path: {}
              log_format:
                json_format:
                  start_time: "%START_TIME%"
                  method: "%REQ(:METHOD)%"
                  path: "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"
                  authority: "%REQ(:AUTHORITY)%"
                  client: "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%"
                  x-tenant: "%REQ(X-TENANT)%"
                  response_code: "%RESPONSE_CODE%""#,
        path.display()
    )
}

/// examples/envoy.yaml with free ports for its four and the access log.
fn render(ports: [(u16, u16); 4], log: &Path) -> String {
    let mut text = std::fs::read_to_string(example("envoy.yaml")).expect("examples/envoy.yaml");
    for (written, port) in ports {
        let directive = format!("port_value: {written}}}");
        assert_eq!(text.matches(&directive).count(), 1, "{directive}");
        text = text.replace(&directive, &format!("port_value: {port}}}"));
    }
    assert_eq!(text.matches("stat_prefix: edge").count(), 1);
    text.replace("stat_prefix: edge", &access_log(log))
}

/// `tollgate ARGS...` fed `stdin`: its exit code, stdout and stderr.
fn tollgate(args: &[&str], stdin: &[u8]) -> (Option<i32>, String, String) {
    tollgate_fed(args, [("TOLLGATE_IDENTITY_KEY", IDENTITY_KEY)], stdin)
}

/// Envoy writes its access log every second or so: polls (bounded) until
/// it holds `lines` lines.
async fn logged(path: &Path, lines: usize) -> Vec<u8> {
    for _ in 0..300 {
        let text = std::fs::read(path).unwrap_or_default();
        if text.iter().filter(|b| **b == b'\n').count() >= lines {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("envoy's access log never held {lines} lines");
}

/// The log made a trace (`--identity` as given, policies by the config's
/// match) and replayed through examples/envoy-tollgate.yaml: each
/// decision's `allowed`, the summary, and the trace.
fn trace_and_replay(log: &[u8], identity: &str) -> (Vec<bool>, String, String) {
    let config = example("envoy-tollgate.yaml");
    let config = config.to_str().expect("a UTF-8 path");
    let args = [
        "trace",
        "--from",
        "envoy-json",
        "--identity",
        identity,
        "--config",
        config,
    ];
    let (code, trace, stderr) = tollgate(&args, log);
    assert_eq!(code, Some(0), "{stderr}");
    let replay = ["replay", "--config", config, "--summary"];
    let (code, decisions, summary) = tollgate(&replay, trace.as_bytes());
    assert_eq!(code, Some(0), "{summary}");
    let allowed = decisions
        .lines()
        .map(|line| {
            let decision: serde_json::Value = serde_json::from_str(line).expect("a decision");
            decision["allowed"].as_bool().expect("allowed")
        })
        .collect();
    (allowed, summary, trace)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_access_logs_replay_as_tollgate_decided() {
    let dir = tempfile::tempdir().expect("dir");
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let upstream_port = upstream.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let app = axum::Router::new().fallback(|| async { "upstream says hi" });
        let _ = axum::serve(upstream, app).await;
    });
    let (_tollgate, grpc) = TollgateProcess::spawn_with_grpc(&example("envoy-tollgate.yaml"), &[]);
    let grpc_port: u16 = grpc
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a gRPC port");
    let (listen, admin) = (free_port(), free_port());
    let log = dir.path().join("access.jsonl");
    let yaml = dir.path().join("envoy.yaml");
    let ports = [
        (10000, listen),
        (9901, admin),
        (3000, upstream_port),
        (8081, grpc_port),
    ];
    std::fs::write(&yaml, render(ports, &log)).expect("write envoy.yaml");
    let _envoy = EnvoyProcess::start(&yaml, admin).await;

    // per-client: 5, then one every 12 minutes, per client address.
    let mut statuses = Vec::new();
    let sends = [([127, 0, 0, 50], "acme"); 7]
        .into_iter()
        .chain([([127, 0, 0, 51], "acme"); 2]);
    for (ip, tenant) in sends {
        let client = reqwest::Client::builder()
            .local_address(std::net::IpAddr::from(ip))
            .build()
            .expect("a client");
        let status = client
            .get(format!("http://127.0.0.1:{listen}/orders?page=2"))
            .header("x-tenant", tenant)
            .send()
            .await
            .expect("a request through envoy")
            .status()
            .as_u16();
        statuses.push(status);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 200, 200]);

    let log = logged(&log, 9).await;
    let text = String::from_utf8(log.clone()).expect("UTF-8");
    let codes: Vec<&str> = text
        .lines()
        .map(|l| {
            let line: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            assert_eq!(line["path"], "/orders?page=2", "{l}");
            // A number, or its text in an older Envoy.
            match line["response_code"].to_string().trim_matches('"') {
                "429" => "429",
                "200" => "200",
                other => panic!("response code {other}"),
            }
        })
        .collect();
    assert_eq!(
        codes,
        [
            "200", "200", "200", "200", "200", "429", "429", "200", "200"
        ]
    );

    // By the client's address, as per-client keys: serve's decisions.
    let (allowed, summary, trace) = trace_and_replay(&log, "field:client");
    assert_eq!(
        allowed,
        [true, true, true, true, true, false, false, true, true]
    );
    assert_eq!(
        summary,
        "per-client: offered 9 (cost 9), admitted 7 (cost 7), rejected 2 (cost 2)\n"
    );
    assert!(!trace.contains("127.0.0.5"), "{trace}");
    // By the tenant header instead: one tenant, one budget of 5.
    let (allowed, summary, _) = trace_and_replay(&log, "header:X-Tenant");
    assert_eq!(allowed.iter().filter(|a| **a).count(), 5);
    assert_eq!(
        summary,
        "per-client: offered 9 (cost 9), admitted 5 (cost 5), rejected 4 (cost 4)\n"
    );
}
