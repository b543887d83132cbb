//! What ships for operators (deploy/observability) proven against a real
//! Prometheus: a real `tollgate serve` on a real redis-server answers
//! `/v1/check` traffic (rejections included) while a real Prometheus
//! scrapes it every second with the shipped alert rules loaded; Redis is
//! stopped part of the way. Every query of the shipped Grafana dashboard
//! then returns series, the rules are loaded and healthy, and the store
//! alerts go pending or firing. `promtool` checks the rules and holds each
//! alert to the series that should fire it and to series that should not.
//! And every metric's HELP says the unit its name gives.

#[path = "../support/mod.rs"]
mod support;

mod dashboard;
mod prometheus;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus::{Prometheus, promtool, until};
use serde_json::Value;
use support::{TollgateProcess, metrics_text};
use tollgate_testkit::RedisServer;

const IDENTITY_KEY: &str = "observability-hashing-key-of-32-bytes";

/// Three policies, one per failure mode, over a regional and a global
/// store on one redis-server: `api` global and failing open, `login` per
/// region and failing to a local share, `search` leased and failing
/// closed. Small limits, so the traffic below is rejected too.
fn config(redis: &str) -> String {
    format!(
        r#"server: {{watch_interval_ms: 0}}
region: a
regions: {{a: {{instances: 1}}, b: {{instances: 1}}}}
stores:
  regional: {{redis: {{url: "{redis}", timeout: 200ms}}}}
  global: {{redis: {{url: "{redis}", timeout: 200ms}}}}
policies:
  - {{name: api, algorithm: fixed_window, limit: 5, window: 1h, on_store_failure: fail_open, scope: global}}
  - {{name: login, algorithm: fixed_window, limit: 3, window: 1h, on_store_failure: local, scope: region}}
  - {{name: search, algorithm: fixed_window, limit: 10, window: 1s, on_store_failure: fail_closed,
      scope: {{leased: {{term: 1s, renew: 250ms, floor: 50%}}}}}}
"#
    )
}

/// Every policy, ten rounds a second: two returning identities (soon
/// rejected, and hot) and a new one each round (which a failing store
/// leaves to the policy's failure mode), and a readiness probe as
/// Kubernetes would send, which refreshes `tollgate_store_up`.
struct Traffic {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Traffic {
    fn start(base: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let base = base.to_owned();
        let task = tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut round = 0u64;
            while !stopped.load(Ordering::Relaxed) {
                for policy in ["api", "login", "search"] {
                    for key in [format!("k{}", round % 2), format!("new{round}")] {
                        let body = format!(r#"{{"policy":"{policy}","key":"{key}"}}"#);
                        let _ = client
                            .post(format!("{base}/v1/check"))
                            .body(body)
                            .send()
                            .await;
                    }
                }
                let _ = client.get(format!("{base}/readyz")).send().await;
                round += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Self { stop, task }
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("the traffic task");
    }
}

/// A series' label, or "" when it has none.
fn label(series: &Value, name: &str) -> String {
    series["metric"][name]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The values of `name` over `series`.
fn labels(series: &[Value], name: &str) -> BTreeSet<String> {
    series.iter().map(|s| label(s, name)).collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The shipped rules: each alert's name and its rule.
fn alert_rules() -> Vec<(String, Value)> {
    let path = dashboard::deploy_dir().join("prometheus-rules.yaml");
    let text = std::fs::read_to_string(&path).expect("the rules file");
    let rules: Value = serde_saphyr::from_str(&text).expect("the rules are YAML");
    rules["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .map(|r| (r["alert"].as_str().expect("an alert").to_owned(), r))
        .collect()
}

#[test]
fn promtool_checks_the_rules_and_holds_each_alert_to_its_scenarios() {
    let dir = dashboard::deploy_dir();
    let alerts = alert_rules();
    let (ok, out) = promtool(&dir, &["check", "rules", "prometheus-rules.yaml"]);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", alerts.len())),
        "{out}"
    );
    let (ok, out) = promtool(&dir, &["test", "rules", "prometheus-rules.test.yaml"]);
    assert!(ok, "{out}");
    assert!(out.contains("SUCCESS"), "{out}");

    let names: BTreeSet<String> = alerts.iter().map(|(name, _)| name.clone()).collect();
    assert_eq!(
        names,
        set(&[
            "TollgateConfigReloadFailed",
            "TollgateDegradedDecisions",
            "TollgateLeaseRenewalsFailing",
            "TollgateMemoryStoreEvicting",
            "TollgateMemoryStoreFull",
            "TollgateRejectionsSpiking",
            "TollgateStoreCircuitOpen",
            "TollgateStoreDown",
        ])
    );
    for (name, rule) in &alerts {
        assert!(rule["for"].is_string(), "{name} has no for:");
        let severity = rule["labels"]["severity"].as_str().unwrap_or_default();
        assert!(
            ["critical", "warning"].contains(&severity),
            "{name}: severity {severity:?}"
        );
        assert!(
            rule["annotations"]["summary"].is_string(),
            "{name}: summary"
        );
        let description = rule["annotations"]["description"]
            .as_str()
            .unwrap_or_default();
        assert!(
            description.contains("docs/metrics.md#alerts"),
            "{name}: its description names no runbook"
        );
    }

    // Each alert is held to a scenario that fires it and one that does not.
    let text = std::fs::read_to_string(dir.join("prometheus-rules.test.yaml")).expect("tests");
    let tests: Value = serde_saphyr::from_str(&text).expect("the rule tests are YAML");
    let cases: Vec<(String, bool)> = tests["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().cloned().unwrap_or_default())
        .map(|c| {
            let fires = c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty());
            (
                c["alertname"].as_str().unwrap_or_default().to_owned(),
                fires,
            )
        })
        .collect();
    for name in &names {
        for fires in [true, false] {
            assert!(
                cases.contains(&(name.clone(), fires)),
                "{name} has no case where it {}",
                if fires { "fires" } else { "stays quiet" }
            );
        }
    }
}

#[test]
fn the_dashboard_is_importable_with_a_datasource_variable() {
    let dashboard = dashboard::load();
    assert!(
        dashboard["schemaVersion"].as_u64() >= Some(36),
        "Grafana 10+"
    );
    let variables = dashboard::variables(&dashboard);
    assert_eq!(
        variables
            .iter()
            .map(|(name, kind, _)| (name.as_str(), kind.as_str()))
            .collect::<Vec<_>>(),
        [
            ("datasource", "datasource"),
            ("job", "query"),
            ("instance", "query"),
            ("policy", "query"),
        ]
    );
    let mut ids = BTreeSet::new();
    for panel in dashboard::panels(&dashboard) {
        let title = panel["title"].as_str().unwrap_or_default();
        assert!(
            ids.insert(panel["id"].as_u64().expect("an id")),
            "{title}: id"
        );
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title} has no query");
        for target in targets {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}");
            assert!(target["expr"].as_str().is_some_and(|e| !e.is_empty()));
        }
    }
    assert_eq!(dashboard::queries(&dashboard).len(), 29);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_answers_every_dashboard_query_and_evaluates_the_rules() {
    let mut redis = RedisServer::start().expect("redis-server");
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, config(&redis.url())).expect("write config");
    let tollgate = TollgateProcess::spawn(&path, &[("TOLLGATE_IDENTITY_KEY", IDENTITY_KEY)]);
    let rules = dashboard::deploy_dir().join("prometheus-rules.yaml");
    let prometheus = Prometheus::start(tollgate.base.trim_start_matches("http://"), &rules).await;
    let traffic = Traffic::start(&tollgate.base);

    // Healthy first: Prometheus has scraped store calls, rejections and
    // lease renewals.
    for healthy in [
        r#"up{job="tollgate"} == 1"#,
        "sum(tollgate_store_call_duration_seconds_count) > 0",
        r#"sum(tollgate_decisions_total{outcome="rejected"}) > 0"#,
        "tollgate_lease_renewals_total",
    ] {
        until(healthy, 120, || async {
            let found = prometheus.query(healthy).await;
            if found.is_empty() {
                Err("no series".to_owned())
            } else {
                Ok(())
            }
        })
        .await;
    }

    redis.kill().expect("stop redis-server");
    // Both stores down, as the readiness probe finds them.
    until("both stores down", 120, || async {
        let down = prometheus.query("tollgate_store_up == 0").await;
        if down.len() == 2 {
            Ok(())
        } else {
            Err(format!("{down:?}"))
        }
    })
    .await;
    // Answers from the rejected-until cache, which the returning
    // identities get, neither hold the circuit closed nor close it.
    let raised = [
        "TollgateDegradedDecisions",
        "TollgateLeaseRenewalsFailing",
        "TollgateStoreCircuitOpen",
        "TollgateStoreDown",
    ];
    until("the store alerts raised", 180, || async {
        let mut raised_now = prometheus.alerts("pending").await;
        raised_now.extend(prometheus.alerts("firing").await);
        match raised.iter().all(|a| raised_now.iter().any(|r| r == a)) {
            true => Ok(()),
            false => Err(format!("{raised_now:?}")),
        }
    })
    .await;

    // A config that does not parse is refused; the alert fires at once.
    std::fs::write(&path, "policies: [\n").expect("break the config");
    tollgate.signal("HUP");
    until("the refused reload's alert", 120, || async {
        let firing = prometheus.alerts("firing").await;
        match firing.iter().any(|a| a == "TollgateConfigReloadFailed") {
            true => Ok(()),
            false => Err(format!("{firing:?}")),
        }
    })
    .await;
    assert_eq!(
        prometheus
            .query("tollgate_config_reload_failures_total")
            .await
            .iter()
            .map(|s| s["value"][1].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>(),
        ["1"]
    );

    every_dashboard_query_answers(&prometheus).await;
    the_rules_are_loaded_and_healthy(&prometheus).await;
    // Nothing raised what did not happen: no memory store, no rejections
    // an hour ago to spike from.
    let mut raised_now = prometheus.alerts("pending").await;
    raised_now.extend(prometheus.alerts("firing").await);
    for quiet in [
        "TollgateMemoryStoreEvicting",
        "TollgateMemoryStoreFull",
        "TollgateRejectionsSpiking",
    ] {
        assert!(
            !raised_now.iter().any(|a| a == quiet),
            "{quiet}: {raised_now:?}"
        );
    }
    traffic.stop().await;
}

/// Polls until every query of the dashboard (and of its variables) returns
/// series — the hot identities wait for a whole minute of traffic — then
/// holds the stable ones to exactly what this traffic gives.
async fn every_dashboard_query_answers(prometheus: &Prometheus) {
    let dashboard = dashboard::load();
    let variables = dashboard::variables(&dashboard);
    let queries = dashboard::queries(&dashboard);
    let answers = until("every dashboard query answers series", 240, || async {
        let mut answers = Vec::new();
        for query in &queries {
            let series = prometheus
                .query(&dashboard::substitute(&query.expr, &variables))
                .await;
            if series.is_empty() {
                return Err(format!("{} ({}): no series", query.panel, query.ref_id));
            }
            answers.push((query.clone(), series));
        }
        Ok(answers)
    })
    .await;
    for (query, series) in &answers {
        let seen = |name: &str| labels(series, name);
        let what = format!("{} ({}): {series:?}", query.panel, query.ref_id);
        match query.panel.as_str() {
            "Decisions per policy" => {
                assert_eq!(series.len(), 6, "{what}");
                assert_eq!(seen("policy"), set(&["api", "login", "search"]), "{what}");
                assert_eq!(seen("outcome"), set(&["allowed", "rejected"]), "{what}");
            }
            "Rejections per policy"
            | "Rejected share per policy"
            | "Hottest identities by decisions" => {
                assert_eq!(seen("policy"), set(&["api", "login", "search"]), "{what}");
            }
            "Degraded decisions by path" => {
                assert_eq!(
                    seen("path"),
                    set(&["fail_closed", "fail_open", "local"]),
                    "{what}"
                );
            }
            "Store up" | "Circuit state" | "Store errors per store" => {
                assert_eq!(seen("role"), set(&["global", "regional"]), "{what}");
            }
            "Lease share" => {
                assert_eq!(series.len(), 1, "{what}");
                assert_eq!(
                    (label(&series[0], "policy"), label(&series[0], "region")),
                    ("search".to_owned(), "a".to_owned()),
                    "{what}"
                );
            }
            "Versions serving" => {
                assert_eq!(seen("version"), set(&[env!("CARGO_PKG_VERSION")]), "{what}");
                assert_eq!(series[0]["value"][1], "1", "{what}");
            }
            "Request latency per endpoint" | "Requests per endpoint and status" => {
                assert_eq!(
                    seen("endpoint"),
                    set(&["/metrics", "/readyz", "/v1/check"]),
                    "{what}"
                );
            }
            _ => {}
        }
    }
    // The variables list what the panels are filtered by.
    for (name, kind, query) in &variables {
        if kind != "query" {
            continue;
        }
        let (selector, label_name) = dashboard::label_values(query);
        let series = prometheus
            .query(&dashboard::substitute(&selector, &variables))
            .await;
        let values = labels(&series, &label_name);
        let expected = match name.as_str() {
            "job" => set(&["tollgate"]),
            "policy" => set(&["api", "login", "search"]),
            _ => values.iter().filter(|v| !v.is_empty()).cloned().collect(),
        };
        assert!(
            !values.is_empty() && values == expected,
            "${name}: {values:?}"
        );
    }
}

/// Every alert of the rules file is loaded by the running Prometheus and
/// evaluates without error.
async fn the_rules_are_loaded_and_healthy(prometheus: &Prometheus) {
    let expected: BTreeSet<(String, String)> = alert_rules()
        .into_iter()
        .map(|(name, _)| (name, "ok".to_owned()))
        .collect();
    until("every rule loaded and healthy", 60, || async {
        let loaded: BTreeSet<(String, String)> = prometheus.rules().await.into_iter().collect();
        if loaded == expected {
            Ok(())
        } else {
            Err(format!("{loaded:?}"))
        }
    })
    .await;
}

/// Every `_seconds` family's HELP says seconds (never milli- or
/// microseconds), every `_bytes` family's says bytes, from a real
/// `/metrics` that exports all of them: memory and Redis stores, a leased
/// policy, HTTP traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_texts_give_the_unit_their_names_give() {
    let redis = RedisServer::start().expect("redis-server");
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("tollgate.yaml");
    let mut yaml = config(&redis.url());
    yaml = yaml.replace("stores:\n", "stores:\n  local: memory\n");
    yaml.push_str(
        "  - {name: burst, algorithm: fixed_window, limit: 5, window: 1h, scope: instance}\n",
    );
    std::fs::write(&path, yaml).expect("write config");
    let tollgate = TollgateProcess::spawn(&path, &[]);
    let client = reqwest::Client::new();
    for policy in ["api", "search", "burst"] {
        support::check_json(
            &client,
            &tollgate.base,
            format!(r#"{{"policy":"{policy}","key":"k"}}"#),
        )
        .await;
    }
    let text = metrics_text(&client, &tollgate.base).await;
    let helps: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# HELP "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    let with = |suffix: &str| -> Vec<&str> {
        helps
            .iter()
            .filter(|(name, _)| name.ends_with(suffix))
            .map(|(name, _)| *name)
            .collect()
    };
    assert_eq!(
        with("_seconds"),
        [
            "process_cpu_seconds",
            "process_start_time_seconds",
            "tollgate_http_request_duration_seconds",
            "tollgate_decision_duration_seconds",
            "tollgate_lease_floor_seconds",
            "tollgate_store_call_duration_seconds",
        ],
        "{text}"
    );
    assert_eq!(
        with("_bytes"),
        [
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes"
        ]
    );
    for (name, help) in helps {
        if name.ends_with("_seconds") {
            assert!(help.contains("seconds"), "{name}: {help}");
            for other in ["millisecond", "microsecond", "nanosecond", "µs"] {
                assert!(!help.contains(other), "{name} says {other}: {help}");
            }
        }
        if name.ends_with("_bytes") {
            assert!(help.contains("bytes"), "{name}: {help}");
        }
    }
}
