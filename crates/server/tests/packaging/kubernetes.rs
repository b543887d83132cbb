//! The Kubernetes manifests validate against the schemas, and what refers
//! to what agrees: selectors, ports, probes, the ConfigMap's config, the
//! Secret, the store, the disruption budget and the grace period.

use std::process::Command;

use serde_json::{Value, json};
use tollgate::ServeConfig;

use crate::files::root;
use crate::manifests::*;

#[test]
fn the_manifests_validate_against_the_kubernetes_schemas_with_unknown_fields_refused() {
    let files = [
        "deploy/kubernetes/tollgate.yaml",
        "deploy/kubernetes/redis.yaml",
    ];
    let out = Command::new("python3")
        .args([
            "-m",
            "kubernetes_validate",
            "--kubernetes-version",
            "1.32.0",
            "--strict",
        ])
        .args(files.map(|f| root().join(f)))
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "python3 did not run ({e}): the manifests are validated by \
                 `python3 -m kubernetes_validate` (scripts/test installs it)"
            )
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains("No module named kubernetes_validate"),
        "install the schema checker: `python3 -m pip install kubernetes-validate` (scripts/test does)"
    );
    assert!(
        out.status.success(),
        "the manifests do not validate:\n{text}"
    );
    assert!(!text.contains("ERROR"), "{text}");
    // Every document was checked, not skipped: 5 in tollgate.yaml, 3 in redis.yaml.
    assert_eq!(text.matches(" passed for resource ").count(), 8, "{text}");
}

#[test]
fn envoys_grpc_port_is_served_by_the_pods_and_exposed_by_the_service() {
    let Manifests {
        deployment,
        service,
        ..
    } = manifests();
    let container = container(&deployment);
    assert_eq!(arg_after(container, "--grpc-listen"), "0.0.0.0:8081");
    assert_eq!(port_named(container, "grpc")["containerPort"], 8081);
    let port = service["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| p["name"] == "grpc")
        .expect("the Service exposes grpc");
    assert_eq!(port["targetPort"], "grpc");
    // Envoy's rate limit service cluster speaks HTTP/2 in the clear.
    assert_eq!(port["appProtocol"], "kubernetes.io/h2c");
}

#[test]
fn scrape_annotations_name_the_metrics_endpoint_on_the_http_port() {
    let deployment = manifests().deployment;
    let annotations = &deployment["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    let http = port_named(container(&deployment), "http")["containerPort"]
        .as_u64()
        .expect("a number");
    assert_eq!(annotations["prometheus.io/port"], http.to_string());
}

#[test]
fn the_disruption_budget_and_the_spread_keep_replicas_apart_and_take_one_at_a_time() {
    let Manifests {
        deployment,
        disruption_budget,
        ..
    } = manifests();
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    assert_selects(
        &disruption_budget["spec"]["selector"]["matchLabels"],
        labels,
        "the PodDisruptionBudget",
    );
    assert_eq!(disruption_budget["spec"]["maxUnavailable"], 1);
    let replicas = deployment["spec"]["replicas"].as_u64().expect("replicas");
    assert!(replicas >= 2, "one pod at a time leaves another deciding");
    let spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
        .as_array()
        .expect("topologySpreadConstraints");
    let keys: Vec<&str> = spread
        .iter()
        .map(|c| c["topologyKey"].as_str().expect("topologyKey"))
        .collect();
    assert_eq!(
        keys,
        ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    );
    for constraint in spread {
        assert_selects(
            &constraint["labelSelector"]["matchLabels"],
            labels,
            "a topology spread constraint",
        );
        // Schedules anyway: a one-node cluster still runs every replica.
        assert_eq!(constraint["whenUnsatisfiable"], "ScheduleAnyway");
    }
}

#[test]
fn the_shipped_redis_is_the_config_maps_store_never_evicts_and_admits_only_tollgate() {
    let (service, stateful_set, network_policy) = redis_manifests();
    let config = config_map_config(&manifests().config_map);
    let name = str_at(&service, "/metadata/name");
    let port = service["spec"]["ports"][0]["port"].as_u64().expect("port");
    assert!(
        config.contains(&format!("url: redis://{name}:{port}/0")),
        "the ConfigMap's store is the Service {name}:{port}:\n{config}"
    );
    let pod_labels = &stateful_set["spec"]["template"]["metadata"]["labels"];
    assert_selects(
        &service["spec"]["selector"],
        pod_labels,
        "the Redis Service",
    );
    assert_selects(
        &network_policy["spec"]["podSelector"]["matchLabels"],
        pod_labels,
        "the NetworkPolicy",
    );
    let tollgate_labels = &manifests().deployment["spec"]["template"]["metadata"]["labels"];
    let from = &network_policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"];
    assert_selects(from, tollgate_labels, "the NetworkPolicy's allowed peers");
    let redis = &stateful_set["spec"]["template"]["spec"]["containers"][0];
    // Evicting would quietly reset the limits that are holding.
    assert_eq!(arg_after(redis, "--maxmemory-policy"), "noeviction");
    assert_eq!(arg_after(redis, "--save"), "");
    assert_eq!(arg_after(redis, "--appendonly"), "no");
}

#[test]
fn the_config_map_holds_a_config_tollgate_loads_with_the_secret_key() {
    let config = config_map_config(&manifests().config_map);
    let loaded = ServeConfig::parse(&config, |_| Some(TEST_KEY.to_owned()))
        .unwrap_or_else(|e| panic!("the ConfigMap's tollgate.yaml: {e}"));
    assert!(!loaded.policies.is_empty());
    // The Secret the Deployment references is needed: without its identity
    // key, or any of its tokens, refused.
    for missing in [
        "TOLLGATE_IDENTITY_KEY",
        "TOLLGATE_CHECK_TOKEN",
        "TOLLGATE_ADMIN_TOKEN",
        "TOLLGATE_METRICS_TOKEN",
        "TOLLGATE_AUTHORIZE_TOKEN",
    ] {
        let env = |name: &str| (name != missing).then(|| TEST_KEY.to_owned());
        assert!(
            ServeConfig::parse(&config, env).is_err(),
            "the config serves without {missing}"
        );
    }
}

#[test]
fn the_probes_hit_readyz_and_healthz_on_the_port_tollgate_listens_on() {
    let deployment = manifests().deployment;
    let container = container(&deployment);
    assert_eq!(container["args"][0], "serve");
    let flag = |name: &str| arg_after(container, name);
    // Probes come from the kubelet, not the pod's loopback.
    let listen = flag("--listen");
    assert_eq!(listen, "0.0.0.0:8080");
    let port = port_named(container, "http");
    assert_eq!(port["containerPort"], 8080);
    let port_name = str_at(port, "/name");
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert!(
            get["port"] == port_name.as_str() || get["port"] == 8080,
            "{probe} targets the container's port, not {}",
            get["port"]
        );
    }

    // --config names the file the ConfigMap's volume puts there, mounted
    // whole (a subPath mount never sees an update).
    let config = flag("--config");
    let (dir, file) = config.rsplit_once('/').expect("an absolute path");
    let mount = container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|m| m["mountPath"] == dir)
        .unwrap_or_else(|| panic!("a volume is mounted at {dir}"));
    assert!(mount.get("subPath").is_none(), "mounted without subPath");
    let volume = deployment
        .pointer("/spec/template/spec/volumes")
        .and_then(Value::as_array)
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mount's volume");
    let config_map = manifests().config_map;
    assert_eq!(volume["configMap"]["name"], config_map["metadata"]["name"]);
    assert!(
        config_map["data"].get(file).is_some(),
        "the ConfigMap holds {file}"
    );
}

#[test]
fn the_identity_key_comes_from_a_secret_never_from_the_manifest() {
    let deployment = manifests().deployment;
    let env = container(&deployment)["env"].as_array().expect("env");
    let key = env
        .iter()
        .find(|e| e["name"] == "TOLLGATE_IDENTITY_KEY")
        .expect("TOLLGATE_IDENTITY_KEY is set");
    assert!(key.pointer("/valueFrom/secretKeyRef/name").is_some());
    for var in env {
        assert!(
            var.get("value").is_none(),
            "{} has a literal value: secrets go in a Secret",
            var["name"]
        );
    }
}

#[test]
fn the_grace_period_covers_the_pre_stop_wait_and_the_slowest_request() {
    let deployment = manifests().deployment;
    let grace = deployment
        .pointer("/spec/template/spec/terminationGracePeriodSeconds")
        .and_then(Value::as_u64)
        .expect("terminationGracePeriodSeconds");
    let pre_stop = container(&deployment)
        .pointer("/lifecycle/preStop/sleep/seconds")
        .and_then(Value::as_u64)
        .expect("a preStop sleep: the image has no shell");
    let env = |_: &str| Some(TEST_KEY.to_owned());
    let config = ServeConfig::parse(&config_map_config(&manifests().config_map), env)
        .expect("checked in another test");
    let request_s = config.server.request_timeout_ms.div_ceil(1000);
    assert!(
        grace > pre_stop + request_s,
        "{grace} s must cover the {pre_stop} s preStop and a {request_s} s request"
    );
}

#[test]
fn the_service_selects_the_deployments_pods_on_its_port() {
    let Manifests {
        deployment,
        service,
        ..
    } = manifests();
    let labels = deployment
        .pointer("/spec/template/metadata/labels")
        .and_then(Value::as_object)
        .expect("pod labels");
    for selector in [
        &service["spec"]["selector"],
        &deployment["spec"]["selector"]["matchLabels"],
    ] {
        assert_selects(selector, &Value::Object(labels.clone()), "the Service");
    }
    let target = &service["spec"]["ports"][0]["targetPort"];
    let port = &container(&deployment)["ports"][0];
    assert!(*target == port["name"] || *target == port["containerPort"]);
}

#[test]
fn every_token_comes_from_the_secret_and_none_is_optional() {
    let deployment = manifests().deployment;
    let env = container(&deployment)["env"].as_array().expect("env");
    for (var, key) in [
        ("TOLLGATE_IDENTITY_KEY", "identity-key"),
        ("TOLLGATE_CHECK_TOKEN", "check-token"),
        ("TOLLGATE_ADMIN_TOKEN", "admin-token"),
        ("TOLLGATE_METRICS_TOKEN", "metrics-token"),
        ("TOLLGATE_AUTHORIZE_TOKEN", "authorize-token"),
    ] {
        let entry = env
            .iter()
            .find(|e| e["name"] == var)
            .unwrap_or_else(|| panic!("{var} is set"));
        let reference = &entry["valueFrom"]["secretKeyRef"];
        assert_eq!(reference["name"], "tollgate", "{var}");
        assert_eq!(reference["key"], key, "{var}");
        assert!(
            reference.get("optional").is_none(),
            "{var} is optional: a Secret without it would start the pod open"
        );
    }
}

#[test]
fn the_network_policy_admits_only_the_ingress_and_prometheus_to_tollgates_ports() {
    let Manifests {
        deployment,
        network_policy,
        ..
    } = manifests();
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    assert_selects(
        &network_policy["spec"]["podSelector"]["matchLabels"],
        labels,
        "tollgate's NetworkPolicy",
    );
    assert_eq!(network_policy["spec"]["policyTypes"], json!(["Ingress"]));
    let rules = network_policy["spec"]["ingress"]
        .as_array()
        .expect("ingress rules");
    let ports_of = |rule: &Value| -> Vec<String> {
        rule["ports"]
            .as_array()
            .expect("every rule names its ports")
            .iter()
            .map(|p| {
                assert_eq!(p["protocol"], "TCP");
                str_at(p, "/port")
            })
            .collect()
    };
    let peers_of = |rule: &Value| -> Vec<String> {
        let from = rule["from"].as_array().expect("every rule names its peers");
        from.iter()
            .map(|peer| {
                // Both selectors, each non-empty: one namespace's pods of one
                // kind, never a whole namespace or every namespace's pods.
                let pods = &peer["podSelector"]["matchLabels"];
                let namespace = &peer["namespaceSelector"]["matchLabels"];
                assert!(pods.as_object().is_some_and(|m| !m.is_empty()), "{peer}");
                assert!(
                    namespace.as_object().is_some_and(|m| !m.is_empty()),
                    "{peer}"
                );
                assert!(peer.get("ipBlock").is_none(), "{peer}");
                format!(
                    "{}/{}",
                    str_at(namespace, "/kubernetes.io~1metadata.name"),
                    str_at(pods, "/app.kubernetes.io~1name")
                )
            })
            .collect()
    };
    let rules: Vec<(Vec<String>, Vec<String>)> =
        rules.iter().map(|r| (peers_of(r), ports_of(r))).collect();
    assert_eq!(
        rules,
        [
            (
                vec!["ingress-nginx/ingress-nginx".to_owned()],
                vec!["http".to_owned(), "grpc".to_owned()]
            ),
            (
                vec!["monitoring/prometheus".to_owned()],
                vec!["http".to_owned()]
            ),
        ]
    );
    // The ports it names are the container's.
    let container = container(&deployment);
    for name in ["http", "grpc"] {
        assert_eq!(str_at(port_named(container, name), "/name"), name);
    }
}
