//! The shipped Grafana dashboard, read as Grafana reads it: its panels'
//! queries and its template variables, with Grafana's variables replaced
//! by what a query to Prometheus needs.

use std::path::PathBuf;

use serde_json::Value;

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where the dashboard and the rules ship.
pub fn deploy_dir() -> PathBuf {
    root().join("deploy/observability")
}

/// `deploy/observability/grafana-dashboard.json`, parsed.
pub fn load() -> Value {
    let path = deploy_dir().join("grafana-dashboard.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// One query of one panel.
#[derive(Debug, Clone)]
pub struct PanelQuery {
    /// The panel's title.
    pub panel: String,
    /// The query's `refId` (A, B, …).
    pub ref_id: String,
    /// Its PromQL as the dashboard holds it.
    pub expr: String,
}

/// Every panel, those inside collapsed rows too.
pub fn panels(dashboard: &Value) -> Vec<Value> {
    let mut all = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        all.push(panel.clone());
        if let Some(inner) = panel["panels"].as_array() {
            all.extend(inner.iter().cloned());
        }
    }
    all
}

/// Every query of every panel.
pub fn queries(dashboard: &Value) -> Vec<PanelQuery> {
    panels(dashboard)
        .iter()
        .flat_map(|panel| {
            let title = panel["title"].as_str().unwrap_or_default().to_owned();
            panel["targets"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |t| PanelQuery {
                    panel: title.clone(),
                    ref_id: t["refId"].as_str().unwrap_or_default().to_owned(),
                    expr: t["expr"].as_str().unwrap_or_default().to_owned(),
                })
        })
        .collect()
}

/// The template variables: name, type, and a query variable's query.
pub fn variables(dashboard: &Value) -> Vec<(String, String, String)> {
    dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .map(|v| {
            let query = v["query"]["query"]
                .as_str()
                .or_else(|| v["query"].as_str())
                .unwrap_or_default();
            (
                v["name"].as_str().unwrap_or_default().to_owned(),
                v["type"].as_str().unwrap_or_default().to_owned(),
                query.to_owned(),
            )
        })
        .collect()
}

/// `expr` as Prometheus is sent it: Grafana's interval variables as a
/// fixed window (30 s: 30 scrapes a second apart) and every template
/// variable as "All" (`.*`).
pub fn substitute(expr: &str, variables: &[(String, String, String)]) -> String {
    let mut out = expr
        .replace("$__rate_interval", "30s")
        .replace("$__interval", "5s")
        .replace("$__range", "5m");
    for (name, _, _) in variables {
        out = out
            .replace(&format!("${{{name}}}"), ".*")
            .replace(&format!("${name}"), ".*");
    }
    assert!(
        !out.contains('$'),
        "{expr:?} uses a variable the dashboard does not define"
    );
    out
}

/// A `label_values(SELECTOR, LABEL)` variable query: the selector and the label.
pub fn label_values(query: &str) -> (String, String) {
    let inner = query
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{query:?} is not label_values(SELECTOR, LABEL)"));
    let (selector, label) = inner
        .rsplit_once(',')
        .unwrap_or_else(|| panic!("{query:?} names no selector"));
    (selector.trim().to_owned(), label.trim().to_owned())
}
