//! The real binary: `tollgate validate` refuses bad TLS files naming the
//! file, and `tollgate serve` keeps every token out of its debug logs and
//! its metrics.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use rcgen::KeyPair;

use crate::harness::*;
use crate::pki::*;
use crate::support::{TollgateProcess, metric, tollgate_bin};

#[test]
fn validate_refuses_bad_tls_files_naming_the_file() {
    let pki = Pki::new();
    let config = pki.config("");
    let (code, stdout, _) = validate(&config, &[]);
    assert_eq!(code, 0, "a good certificate and key validate: {stdout}");

    let refused = |cert: &str, key: &str| {
        let path = pki.path("bad.yaml");
        std::fs::write(
            &path,
            format!("server:\n  tls: {{cert: {cert}, key: {key}}}\n{POLICIES}"),
        )
        .expect("write");
        let (code, stdout, stderr) = validate(&path, &[]);
        assert_eq!((code, stdout.as_str()), (1, ""));
        let prefix = format!("tollgate: {}: ", path.display());
        stderr
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("{stderr:?} does not start with {prefix:?}"))
            .to_owned()
    };
    let dir = pki.dir.path().display().to_string();
    assert_eq!(
        refused("missing.pem", "key.pem"),
        format!(
            "server.tls.cert: cannot read {dir}/missing.pem: No such file or directory (os error 2)\n"
        )
    );
    assert_eq!(
        refused("cert.pem", "missing-key.pem"),
        format!(
            "server.tls.key: cannot read {dir}/missing-key.pem: No such file or directory (os error 2)\n"
        )
    );
    std::fs::write(pki.path("garbage.pem"), "this is not PEM\n").expect("write");
    assert_eq!(
        refused("garbage.pem", "key.pem"),
        format!("server.tls.cert: {dir}/garbage.pem holds no PEM certificate\n")
    );
    assert_eq!(
        refused("cert.pem", "garbage.pem"),
        format!(
            "server.tls.key: {dir}/garbage.pem holds no PEM private key (PKCS#8, PKCS#1 or SEC1)\n"
        )
    );
    // A key, but not the certificate's.
    std::fs::write(
        pki.path("other-key.pem"),
        KeyPair::generate().expect("key").serialize_pem(),
    )
    .expect("write");
    let mismatch = refused("cert.pem", "other-key.pem");
    assert_eq!(
        mismatch,
        format!(
            "server.tls: the key {dir}/other-key.pem does not serve the certificate {dir}/cert.pem: keys may not be consistent: KeyMismatch\n"
        )
    );
    // The key's content is never quoted.
    let key = std::fs::read_to_string(pki.path("other-key.pem")).expect("read");
    let body = key.lines().nth(1).expect("a base64 line");
    assert!(!mismatch.contains(body));
}

#[test]
fn tokens_never_appear_in_debug_logs_or_metrics() {
    let pki = Pki::new();
    let config = pki.config("  grpc_listen: 127.0.0.1:0\n");
    let log_path = pki.path("stderr.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut cmd = Command::new(tollgate_bin());
    cmd.args(["serve", "--config"])
        .arg(&config)
        .args(["--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "debug")
        .env("TOLLGATE_CHECK_TOKEN", CHECK_TOKEN)
        .env("TOLLGATE_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("TOLLGATE_METRICS_TOKEN", METRICS_TOKEN)
        .env("TOLLGATE_AUTHORIZE_TOKEN", AUTHORIZE_TOKEN)
        .env("TOLLGATE_IDENTITY_KEY", "k".repeat(32))
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log));
    let mut child = cmd.spawn().expect("spawn tollgate serve");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    let mut second = String::new();
    stdout.read_line(&mut first).expect("listen line");
    stdout.read_line(&mut second).expect("grpc line");
    let base = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {first:?}"))
        .to_owned();
    assert!(base.starts_with("https://127.0.0.1:"), "{base}");
    let grpc = second
        .trim()
        .strip_prefix("grpc listening on ")
        .unwrap_or_else(|| panic!("unexpected second line: {second:?}"))
        .to_owned();
    let process = TollgateProcess { child, base };

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let metrics = runtime.block_on(async {
        let client = pki.client();
        let base = &process.base;
        for token in [WRONG_TOKEN, CHECK_TOKEN] {
            let _ = answer(check_call(&client, base, Some(token))).await;
        }
        for (path, right) in [("/v1/policies", ADMIN_TOKEN), ("/metrics", METRICS_TOKEN)] {
            for token in [WRONG_TOKEN, right] {
                let _ = answer(client.get(format!("{base}{path}")).bearer_auth(token)).await;
            }
        }
        // The client being limited sends its own bearer token to forward
        // auth; the proxy its own in Tollgate-Authorization, wrong then right.
        for token in [WRONG_TOKEN, AUTHORIZE_TOKEN] {
            let _ = answer(
                client
                    .get(format!("{base}/v1/authorize"))
                    .bearer_auth("client-token-of-the-proxied-api")
                    .header("Tollgate-Authorization", format!("Bearer {token}")),
            )
            .await;
        }
        let mut rls = pki.grpc(&grpc).await;
        for token in [WRONG_TOKEN, CHECK_TOKEN] {
            let _ = rls.should_rate_limit(rls_request(Some(token))).await;
        }
        let (status, _, metrics) = answer(
            client
                .get(format!("{base}/metrics"))
                .bearer_auth(METRICS_TOKEN),
        )
        .await;
        assert_eq!(status, 200);
        metrics
    });
    process.signal("TERM");
    drop(process);
    let logs = std::fs::read_to_string(&log_path).expect("read logs");
    assert!(
        logs.contains("tollgate serving"),
        "stderr was not captured: {logs}"
    );
    assert!(logs.contains("DEBUG"), "debug logging was not on: {logs}");
    for endpoint in ["check", "rls", "policies", "metrics", "authorize"] {
        assert_eq!(
            metric(
                &metrics,
                &format!("tollgate_unauthorized_requests_total{{endpoint=\"{endpoint}\"}}")
            ),
            Some(1.0),
            "{endpoint}"
        );
    }
    for secret in [
        CHECK_TOKEN,
        ADMIN_TOKEN,
        METRICS_TOKEN,
        AUTHORIZE_TOKEN,
        WRONG_TOKEN,
        "client-token-of-the-proxied-api",
    ] {
        assert!(!logs.contains(secret), "{secret} is in the logs");
        assert!(!metrics.contains(secret), "{secret} is in the metrics");
    }
}
