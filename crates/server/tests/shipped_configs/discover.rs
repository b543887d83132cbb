//! Every tollgate config the repository ships, found in the repository
//! itself: each YAML under examples/ and deploy/ that is a tollgate config,
//! each ConfigMap's embedded config, and where each is served (the image's
//! CMD, the Deployment's args, the systemd unit). A YAML file that is
//! neither a tollgate config nor a Kubernetes manifest fails the suite:
//! nothing ships untested.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// One shipped config and the addresses it is served on.
#[derive(Debug, Clone)]
pub struct Shipped {
    /// Where it comes from: a path, or `path#ConfigMap/name/key`.
    pub source: String,
    /// The config's text.
    pub text: String,
    /// HTTP listen addresses a shipped deployment gives it besides its
    /// own `server.listen`.
    pub deployed_http: Vec<String>,
    /// gRPC listen addresses a shipped deployment gives it.
    pub deployed_grpc: Vec<String>,
}

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative))
        .unwrap_or_else(|e| panic!("read {relative}: {e}"))
}

/// Every tollgate config the repository ships as a file of its own, as
/// a path relative to the root: under examples/ and deploy/, and each
/// crate's examples (`crates/*/examples/`), found by looking so a new file
/// is covered without being listed.
pub fn config_files() -> Vec<String> {
    let crates = std::fs::read_dir(root().join("crates")).expect("crates/");
    let mut dirs = vec!["examples".to_owned(), "deploy".to_owned()];
    let mut crate_examples: Vec<String> = crates
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.join("examples").is_dir())
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?.to_owned();
            Some(format!("crates/{name}/examples"))
        })
        .collect();
    crate_examples.sort();
    dirs.extend(crate_examples);
    dirs.iter()
        .flat_map(|dir| yaml_files(dir))
        .filter(|file| {
            let docs: Vec<Value> = serde_saphyr::from_multiple(&read(file)).unwrap_or_default();
            docs.len() == 1 && is_tollgate_config(&docs[0])
        })
        .collect()
}

/// Every `*.yaml` below `dir` (relative to the root), sorted.
fn yaml_files(dir: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![root().join(dir)];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).unwrap_or_else(|e| panic!("{}: {e}", at.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                let relative = path.strip_prefix(root()).expect("below the root");
                found.push(relative.display().to_string());
            }
        }
    }
    found.sort();
    found
}

/// Whether a parsed YAML document is a tollgate config: a mapping with
/// `policies` (the one section every config has).
fn is_tollgate_config(doc: &Value) -> bool {
    doc.get("policies").is_some()
}

/// Whether a parsed YAML document is Prometheus's: alert rules (`groups`)
/// or promtool's tests of them (`rule_files`, `tests`).
/// tests/observability runs those with a real Prometheus.
fn is_prometheus_rules(doc: &Value) -> bool {
    doc.get("groups").is_some() || (doc.get("rule_files").is_some() && doc.get("tests").is_some())
}

/// Whether a parsed YAML document is another program's that a tollgate
/// config refers to: Envoy's bootstrap (`static_resources`, run by
/// tests/guides with the tollgate config beside it) or envoyproxy/
/// ratelimit's rules (`domain`, read through `envoy_ratelimit_configs`).
fn is_companion(doc: &Value) -> bool {
    doc.get("static_resources").is_some()
        || (doc.get("domain").is_some() && doc.get("descriptors").is_some())
}

/// Every shipped config, with its deployments' listen addresses.
pub fn shipped_configs() -> Vec<Shipped> {
    let mut found = Vec::new();
    for file in yaml_files("examples")
        .into_iter()
        .chain(yaml_files("deploy"))
    {
        let text = read(&file);
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{file} is not YAML: {e}"));
        if file.starts_with("deploy/observability/")
            && docs.len() == 1
            && is_prometheus_rules(&docs[0])
        {
            continue;
        }
        if docs.len() == 1 && is_companion(&docs[0]) {
            continue;
        }
        if docs.len() == 1 && is_tollgate_config(&docs[0]) {
            found.push(Shipped {
                source: file,
                text,
                deployed_http: Vec::new(),
                deployed_grpc: Vec::new(),
            });
            continue;
        }
        assert!(
            docs.iter()
                .all(|d| d.get("apiVersion").is_some() && d.get("kind").is_some()),
            "{file} is neither a tollgate config nor a Kubernetes manifest: the shipped-config suite does not know how to run it"
        );
        found.extend(config_maps(&file, &docs));
    }
    image_deployment(&mut found);
    systemd_deployment(&mut found);
    found
}

/// The tollgate configs in a manifest's ConfigMaps, served as the
/// manifest's Deployment's args say.
fn config_maps(file: &str, docs: &[Value]) -> Vec<Shipped> {
    let args: Vec<String> = docs
        .iter()
        .filter(|d| d["kind"] == "Deployment")
        .flat_map(|d| {
            d.pointer("/spec/template/spec/containers")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .flat_map(|c| c["args"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    let flag = |name: &str| -> Vec<String> {
        args.windows(2)
            .filter(|w| w[0] == name)
            .map(|w| w[1].clone())
            .collect()
    };
    let mut found = Vec::new();
    for doc in docs.iter().filter(|d| d["kind"] == "ConfigMap") {
        let name = doc["metadata"]["name"].as_str().unwrap_or("?");
        let Some(data) = doc["data"].as_object() else {
            continue;
        };
        for (key, value) in data {
            let text = value.as_str().unwrap_or_default();
            let parsed: Value = serde_saphyr::from_str(text).unwrap_or(Value::Null);
            if !is_tollgate_config(&parsed) {
                assert!(
                    !key.ends_with(".yaml") && !key.ends_with(".yml"),
                    "{file}: ConfigMap {name} holds {key}, YAML that is not a tollgate config: the suite does not know how to run it"
                );
                continue;
            }
            found.push(Shipped {
                source: format!("{file}#ConfigMap/{name}/{key}"),
                text: text.to_owned(),
                deployed_http: flag("--listen"),
                deployed_grpc: flag("--grpc-listen"),
            });
        }
    }
    found
}

/// The Dockerfile copies a config to /etc/tollgate/tollgate.yaml and serves
/// it as its CMD says.
fn image_deployment(found: &mut [Shipped]) {
    let dockerfile = read("Dockerfile");
    let source = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("COPY "))
        .find_map(|a| a.strip_suffix(" /etc/tollgate/tollgate.yaml"))
        .expect("the image copies a config to /etc/tollgate/tollgate.yaml")
        .trim()
        .to_owned();
    let cmd = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("CMD "))
        .expect("the image has a CMD");
    let cmd: Vec<String> = serde_json::from_str(cmd).expect("CMD in exec form");
    let shipped = found
        .iter_mut()
        .find(|s| s.source == source)
        .unwrap_or_else(|| panic!("the image's config {source} is not among the shipped configs"));
    for w in cmd.windows(2) {
        match w[0].as_str() {
            "--listen" => shipped.deployed_http.push(w[1].clone()),
            "--grpc-listen" => shipped.deployed_grpc.push(w[1].clone()),
            _ => {}
        }
    }
}

/// The systemd unit installs a config (its header comment) and serves it
/// as its ExecStart says.
fn systemd_deployment(found: &mut [Shipped]) {
    let unit = read("deploy/systemd/tollgate.service");
    let source = unit
        .lines()
        .filter_map(|l| l.strip_prefix("#   install -D -m 0644 "))
        .find_map(|a| a.strip_suffix(" /etc/tollgate/tollgate.yaml"))
        .expect("the unit says which config it installs")
        .trim()
        .to_owned();
    let exec: Vec<&str> = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart")
        .split_whitespace()
        .collect();
    let shipped = found
        .iter_mut()
        .find(|s| s.source == source)
        .unwrap_or_else(|| panic!("the unit's config {source} is not among the shipped configs"));
    for w in exec.windows(2) {
        match w[0] {
            "--listen" => shipped.deployed_http.push(w[1].to_owned()),
            "--grpc-listen" => shipped.deployed_grpc.push(w[1].to_owned()),
            _ => {}
        }
    }
}
