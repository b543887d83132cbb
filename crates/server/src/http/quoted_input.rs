//! Every fault that quotes what a client sent quotes a short, escaped
//! prefix of it (`tollgate_core::quote`): a problem's detail is copied into
//! the `Tollgate-Problem` header, and a long value there overflows a
//! proxy's buffer (nginx answers 502 and fails open), while a newline or a
//! terminal escape would forge the log line that records the refusal.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue};
use tollgate_core::{Identity, ManualClock};

use super::operations::state_target;
use super::unknown_policy;
use crate::config::ServeConfig;
use crate::live::LiveConfig;
use crate::metrics::Metrics;
use tollgate_http::{
    Forwarded, PROBLEM_HEADER_MAX_BYTES, Problem, client_ip, cost_of, diagnose_check_body,
    identity_of, parts_identity, problem_header,
};

/// What an attacker sends: a forged log line, a terminal escape, and far
/// more bytes than any header buffer holds.
fn evil() -> String {
    format!(
        "x\n2026-01-01T00:00:00Z INFO forged\x1b[31m{}",
        "A".repeat(5_000)
    )
}

const CONFIG: &str = "server:\n  trusted_proxies: [127.0.0.1/32]\npolicies:\n  - name: exports\n    algorithm: gcra\n    capacity: 30\n    refill: { tokens: 1, per: 1s }\n    match: { path: /export }\n    identity: [client_ip]\n    cost: { header: X-Rows, max: 10 }\n";

fn headers(name: &'static str, value: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    // Header values cannot hold a newline: the evil text, less them.
    let value = value.replace(['\n', '\x1b'], " ");
    h.insert(name, HeaderValue::from_str(&value).expect("a header value"));
    h
}

/// Each fault's words for the evil input, by the door that says them.
fn every_fault(config: &ServeConfig) -> Vec<(&'static str, String)> {
    let evil = evil();
    let json = |body: String| diagnose_check_body(body.as_bytes(), &typed_error()).detail;
    let serve = &config.policies[0];
    let proxy: IpAddr = "127.0.0.1".parse().expect("ip");
    let trusted = &config.server.trusted_proxies;
    let text = serde_json::Value::from(evil.as_str()).to_string();
    let live = LiveConfig::new(
        config.clone(),
        &Metrics::new(Arc::new(ManualClock::new(0))),
        None,
    );
    let state_query = format!("policy=exports&{}=1", urlencoding(&evil));
    let mut xff = headers("x-forwarded-for", &evil);
    xff.insert("x-original-uri", HeaderValue::from_static("/export"));
    let forwarded = Forwarded::read(
        &xff,
        "GET",
        "/export",
        SocketAddr::new(proxy, 1).into(),
        &config.server.forward_auth,
        &config.server.trusted_proxies,
    )
    .expect("a request");
    vec![
        (
            "check: unknown field",
            json(format!(r#"{{"policy":"p","key":"k",{text}:1}}"#)),
        ),
        (
            "check: a string where a number goes",
            json(format!(r#"{{"policy":"p","key":"k","cost":{text}}}"#)),
        ),
        (
            "check: a key part's name",
            json(format!(r#"{{"policy":"p","key":{{{text}:1}}}}"#)),
        ),
        (
            "check: a batch item",
            json(format!(r#"{{"checks":[{text}]}}"#)),
        ),
        ("unknown policy", unknown_policy(&evil).detail),
        (
            "key part twice",
            parts_identity([(evil.as_str(), "a"), (evil.as_str(), "b")], 4096)
                .expect_err("refused")
                .detail,
        ),
        (
            "cost header",
            cost_of(serve, &headers("x-rows", &evil))
                .expect_err("refused")
                .0,
        ),
        (
            "x-forwarded-for",
            client_ip(&xff, proxy, trusted).expect_err("refused").0,
        ),
        (
            "x-real-ip",
            client_ip(&headers("x-real-ip", &evil), proxy, trusted)
                .expect_err("refused")
                .0,
        ),
        (
            "identity from x-forwarded-for",
            identity_of(serve, &forwarded, None, 4096)
                .expect_err("refused")
                .0,
        ),
        (
            "state: unknown parameter",
            state_target(&live, Some(&state_query))
                .err()
                .expect("refused")
                .detail,
        ),
        (
            "identity error",
            Identity::composite([(evil.as_str(), "a"), (evil.as_str(), "b")])
                .expect_err("refused")
                .to_string(),
        ),
    ]
}

fn typed_error() -> serde_json::Error {
    serde_json::from_str::<u8>("x").expect_err("not a number")
}

fn urlencoding(text: &str) -> String {
    text.bytes().map(|b| format!("%{b:02X}")).collect()
}

#[test]
fn every_fault_quotes_a_short_escaped_prefix_of_client_input() {
    let config = ServeConfig::parse(CONFIG, |_| None).expect("config");
    for (fault, detail) in every_fault(&config) {
        assert!(
            detail.len() <= 300,
            "{fault}: {} bytes: {detail}",
            detail.len()
        );
        assert!(
            detail.bytes().all(|b| b >= 0x20 && b != 0x7f),
            "{fault}: a control byte in {detail:?}"
        );
        assert!(!detail.contains(&"A".repeat(33)), "{fault}: {detail}");
        assert!(detail.contains("..."), "{fault}: marked as cut: {detail}");
        let header = problem_header(&Problem::bad_request(detail).body()).expect("a header");
        assert!(header.len() <= PROBLEM_HEADER_MAX_BYTES, "{fault}");
    }
}

#[test]
fn a_problem_header_is_bounded_whatever_its_detail() {
    let problem = Problem::bad_request(format!("operator text {}", "é".repeat(4_000)));
    let header = problem_header(&problem.body()).expect("a header");
    assert!(header.len() <= PROBLEM_HEADER_MAX_BYTES, "{}", header.len());
    let kept: serde_json::Value = serde_json::from_slice(header.as_bytes()).expect("JSON");
    assert_eq!(kept["status"], 400);
    assert!(
        kept["detail"]
            .as_str()
            .expect("detail")
            .ends_with("... (cut)")
    );
    let short = Problem::bad_request("short");
    assert_eq!(
        problem_header(&short.body()).expect("a header").as_bytes(),
        short.body().as_bytes()
    );
}
