//! deploy/kubernetes/ parsed into its documents, and the readers of the
//! parts the Kubernetes tests compare.

use serde_json::Value;

use crate::files::read;

/// The documents of deploy/kubernetes/tollgate.yaml, by kind.
pub struct Manifests {
    pub config_map: Value,
    pub deployment: Value,
    pub service: Value,
    pub disruption_budget: Value,
    pub network_policy: Value,
}

/// The documents of one manifest file, checked to be exactly `expected`
/// (apiVersion, kind), with a way to take one by kind.
fn documents(path: &str, expected: &[(&str, &str)]) -> impl Fn(&str) -> Value {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut kinds: Vec<(String, String)> = docs
        .iter()
        .map(|d| (str_at(d, "/apiVersion"), str_at(d, "/kind")))
        .collect();
    kinds.sort();
    let mut expected: Vec<(String, String)> = expected
        .iter()
        .map(|(a, k)| ((*a).to_owned(), (*k).to_owned()))
        .collect();
    expected.sort();
    assert_eq!(
        kinds, expected,
        "{path}: its documents, each with its apiVersion"
    );
    move |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .cloned()
            .expect("checked above")
    }
}

pub fn manifests() -> Manifests {
    let take = documents(
        "deploy/kubernetes/tollgate.yaml",
        &[
            ("apps/v1", "Deployment"),
            ("v1", "ConfigMap"),
            ("v1", "Service"),
            ("policy/v1", "PodDisruptionBudget"),
            ("networking.k8s.io/v1", "NetworkPolicy"),
        ],
    );
    Manifests {
        config_map: take("ConfigMap"),
        deployment: take("Deployment"),
        service: take("Service"),
        disruption_budget: take("PodDisruptionBudget"),
        network_policy: take("NetworkPolicy"),
    }
}

/// deploy/kubernetes/redis.yaml: (Service, StatefulSet, NetworkPolicy).
pub fn redis_manifests() -> (Value, Value, Value) {
    let take = documents(
        "deploy/kubernetes/redis.yaml",
        &[
            ("apps/v1", "StatefulSet"),
            ("networking.k8s.io/v1", "NetworkPolicy"),
            ("v1", "Service"),
        ],
    );
    (take("Service"), take("StatefulSet"), take("NetworkPolicy"))
}

/// Every `key: value` of `selector` is among `labels`.
pub fn assert_selects(selector: &Value, labels: &Value, what: &str) {
    let selector = selector
        .as_object()
        .unwrap_or_else(|| panic!("{what}: a selector"));
    assert!(
        !selector.is_empty(),
        "{what}: an empty selector selects everything"
    );
    for (k, v) in selector {
        assert_eq!(labels.get(k), Some(v), "{what}: the pods carry {k}: {v}");
    }
}

/// The container's `args` value after `flag`.
pub fn arg_after<'a>(container: &'a Value, flag: &str) -> &'a str {
    let args = container["args"].as_array().expect("args");
    let at = args
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("serve is given {flag}"));
    args.get(at + 1)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{flag} has a value"))
}

/// The container port named `name`.
pub fn port_named<'a>(container: &'a Value, name: &str) -> &'a Value {
    container["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("a container port named {name}"))
}

pub fn str_at(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{pointer} is not a string in {value}"))
        .to_owned()
}

pub fn container(deployment: &Value) -> &Value {
    let containers = deployment
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .expect("the Deployment has containers");
    assert_eq!(containers.len(), 1, "one container: tollgate");
    &containers[0]
}

/// The identity key a test environment provides: 32 bytes, hex.
pub const TEST_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

pub fn config_map_config(config_map: &Value) -> String {
    str_at(config_map, "/data/tollgate.yaml")
}
