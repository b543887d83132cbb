//! What ships beside the binary (LICENSE, deploy/, the Dockerfile) says what
//! the binary does: the Kubernetes probes hit the endpoints tollgate serves,
//! the ConfigMap holds a config tollgate loads, the systemd unit starts and
//! reloads it as it expects, and the image holds a static binary run as a
//! non-root user. The Kubernetes manifests validate against the schemas
//! (`kubernetes-validate`, from PyPI, ships them) and are parsed to check
//! that what refers to what (selectors, ports, the store URL) agrees.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tollgate::{ServeConfig, ServerSettings};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The documents of deploy/kubernetes/tollgate.yaml, by kind.
struct Manifests {
    config_map: Value,
    deployment: Value,
    service: Value,
    disruption_budget: Value,
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

fn manifests() -> Manifests {
    let take = documents(
        "deploy/kubernetes/tollgate.yaml",
        &[
            ("apps/v1", "Deployment"),
            ("v1", "ConfigMap"),
            ("v1", "Service"),
            ("policy/v1", "PodDisruptionBudget"),
        ],
    );
    Manifests {
        config_map: take("ConfigMap"),
        deployment: take("Deployment"),
        service: take("Service"),
        disruption_budget: take("PodDisruptionBudget"),
    }
}

/// deploy/kubernetes/redis.yaml: (Service, StatefulSet, NetworkPolicy).
fn redis_manifests() -> (Value, Value, Value) {
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
fn assert_selects(selector: &Value, labels: &Value, what: &str) {
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
fn arg_after<'a>(container: &'a Value, flag: &str) -> &'a str {
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
fn port_named<'a>(container: &'a Value, name: &str) -> &'a Value {
    container["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("a container port named {name}"))
}

fn str_at(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{pointer} is not a string in {value}"))
        .to_owned()
}

fn container(deployment: &Value) -> &Value {
    let containers = deployment
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .expect("the Deployment has containers");
    assert_eq!(containers.len(), 1, "one container: tollgate");
    &containers[0]
}

/// The identity key a test environment provides: 32 bytes, hex.
const TEST_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn config_map_config(config_map: &Value) -> String {
    str_at(config_map, "/data/tollgate.yaml")
}

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
    // Every document was checked, not skipped: 4 in tollgate.yaml, 3 in redis.yaml.
    assert_eq!(text.matches(" passed for resource ").count(), 7, "{text}");
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

/// The config the image copies to /etc/tollgate (the Dockerfile's COPY).
fn image_config() -> String {
    let dockerfile = read("Dockerfile");
    let source = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("COPY "))
        .find_map(|a| a.strip_suffix(" /etc/tollgate/tollgate.yaml"))
        .expect("the image copies a config to /etc/tollgate/tollgate.yaml");
    read(source.trim())
}

/// A `docker run -p` publishes the port through the default bridge, whose
/// gateway is where the host's curl arrives from: the image's config must
/// believe a request description from there, or the quickstart's
/// `/v1/authorize` is a 400.
#[test]
fn the_images_config_believes_the_quickstarts_curl_through_dockers_bridge() {
    let config = ServeConfig::parse(&image_config(), |_| None).expect("the image's config loads");
    let gateway: std::net::IpAddr = "172.17.0.1".parse().expect("an address");
    let loopback: std::net::IpAddr = "127.0.0.1".parse().expect("an address");
    for peer in [gateway, loopback] {
        assert!(
            config
                .server
                .trusted_proxies
                .iter()
                .any(|net| net.contains(&peer)),
            "{peer} is not among {:?}",
            config.server.trusted_proxies
        );
    }
    // And no wider: another container on the bridge is not a proxy.
    let neighbour: std::net::IpAddr = "172.17.0.2".parse().expect("an address");
    assert!(
        !config
            .server
            .trusted_proxies
            .iter()
            .any(|n| n.contains(&neighbour))
    );
    let deploy = read("docs/deploy.md");
    assert!(
        deploy.contains("curl -si localhost:8080/v1/authorize -H 'X-Original-URI: /api/orders'"),
        "docs/deploy.md shows the quickstart's /v1/authorize curl"
    );
}

#[test]
fn the_license_file_is_the_one_cargo_toml_names() {
    let manifest = read("Cargo.toml");
    assert!(
        manifest.contains("license = \"Apache-2.0\""),
        "the workspace license changed: ship its text as LICENSE"
    );
    let license = read("LICENSE");
    assert!(license.contains("Apache License") && license.contains("Version 2.0, January 2004"));
    assert!(
        license.contains("END OF TERMS AND CONDITIONS"),
        "the whole text"
    );
}

#[test]
fn the_config_map_holds_a_config_tollgate_loads_with_the_secret_key() {
    let config = config_map_config(&manifests().config_map);
    let env = |name: &str| (name == "TOLLGATE_IDENTITY_KEY").then(|| TEST_KEY.to_owned());
    let loaded = ServeConfig::parse(&config, env)
        .unwrap_or_else(|e| panic!("the ConfigMap's tollgate.yaml: {e}"));
    assert!(!loaded.policies.is_empty());
    // The Secret the Deployment references is needed: without it, refused.
    assert!(
        ServeConfig::parse(&config, |_| None).is_err(),
        "the config hashes a secret identity part, so it needs TOLLGATE_IDENTITY_KEY"
    );
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

/// `key=value` lines of the unit's `[Service]` section (repeatable keys
/// keep every value).
fn unit_settings() -> Vec<(String, String)> {
    let unit = read("deploy/systemd/tollgate.service");
    let mut section = "";
    let mut settings = Vec::new();
    for line in unit.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if section == "[Service]"
            && !line.starts_with('#')
            && let Some((k, v)) = line.split_once('=')
        {
            settings.push((k.to_owned(), v.to_owned()));
        }
    }
    settings
}

#[test]
fn the_systemd_unit_serves_the_config_reloads_on_hup_and_is_hardened() {
    let settings = unit_settings();
    let all = |key: &str| -> Vec<&str> {
        settings
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let one = |key: &str| match all(key)[..] {
        [value] => value,
        ref values => panic!("{key}: expected one value, got {values:?}"),
    };
    assert!(
        one("ExecStart").ends_with("tollgate serve --config /etc/tollgate/tollgate.yaml"),
        "{}",
        one("ExecStart")
    );
    assert_eq!(
        all("ExecReload").last(),
        Some(&"/bin/kill -HUP $MAINPID"),
        "tollgate reloads on SIGHUP"
    );
    for (key, value) in [
        ("DynamicUser", "yes"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("Restart", "on-failure"),
        ("EnvironmentFile", "-/etc/tollgate/env"),
    ] {
        assert_eq!(one(key), value, "{key}");
    }
    let files: usize = one("LimitNOFILE").parse().expect("a number");
    let connections = ServerSettings::default().max_connections;
    assert!(
        files > connections,
        "LimitNOFILE {files} must exceed max_connections {connections}"
    );
}

/// The Dockerfile's instructions (continuation lines joined), upper-cased
/// keyword and its arguments.
fn dockerfile() -> Vec<(String, String)> {
    let text = read("Dockerfile").replace("\\\n", " ");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (word, rest) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
            (word.to_ascii_uppercase(), rest.trim().to_owned())
        })
        .collect()
}

#[test]
fn the_image_runs_the_copied_static_binary_from_scratch_as_non_root() {
    let instructions = dockerfile();
    let last_from = instructions
        .iter()
        .rposition(|(w, _)| w == "FROM")
        .expect("a FROM");
    let builder = &instructions[..last_from];
    let image = &instructions[last_from..];
    assert_eq!(image[0].1, "scratch", "the image is FROM scratch");
    assert!(
        builder
            .iter()
            .any(|(w, a)| w == "RUN" && a.contains("cargo build --release --locked")),
        "the builder builds the locked release binary"
    );
    assert!(
        builder
            .iter()
            .any(|(w, a)| w == "ENV" && a.contains("+crt-static")),
        "linked statically"
    );
    let arg = |word: &str| {
        image
            .iter()
            .rev()
            .find(|(w, _)| w == word)
            .map(|(_, a)| a.as_str())
            .unwrap_or_else(|| panic!("the image has {word}"))
    };
    let user = arg("USER");
    let uid = user.split(':').next().expect("split yields one");
    assert!(uid != "0" && uid != "root", "USER {user} is not root");
    let entrypoint: Vec<String> =
        serde_json::from_str(arg("ENTRYPOINT")).expect("ENTRYPOINT in exec form");
    let copied: Vec<&str> = image
        .iter()
        .filter(|(w, _)| w == "COPY")
        .filter_map(|(_, a)| a.split_whitespace().last())
        .collect();
    assert!(
        copied.contains(&entrypoint[0].as_str()),
        "ENTRYPOINT {} is a file the image copies ({copied:?})",
        entrypoint[0]
    );
    let cmd: Vec<String> = serde_json::from_str(arg("CMD")).expect("CMD in exec form");
    assert_eq!(
        cmd,
        [
            "serve",
            "--config",
            "/etc/tollgate/tollgate.yaml",
            "--listen",
            "0.0.0.0:8080"
        ]
    );
    assert_eq!(arg("EXPOSE"), "8080");
}

/// The `cargo build …` command in `text`, up to the end of its line or the
/// next `&&`.
fn cargo_build(text: &str) -> String {
    let from = text.find("cargo build").expect("a cargo build command");
    let rest = &text[from..];
    let end = rest.find(['\n', '&']).unwrap_or(rest.len());
    rest[..end].trim().to_owned()
}

#[test]
fn the_image_and_scripts_static_build_build_the_same_static_binary() {
    let builder = read("Dockerfile").replace("\\\n", " ");
    let script = read("scripts/static-build");
    let command = cargo_build(&builder);
    assert_eq!(
        command,
        "cargo build --release --locked --target x86_64-unknown-linux-musl -p tollgate --bin tollgate --features static-openssl"
    );
    assert_eq!(cargo_build(&script), command);
    for setting in [
        "RUSTFLAGS=\"-C target-feature=+crt-static\"",
        "CARGO_PROFILE_RELEASE_DEBUG=0",
        // The final stage's environment and user.
        "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
        "65534:65534",
    ] {
        assert!(builder.contains(setting), "the Dockerfile sets {setting}");
        assert!(
            script.contains(setting),
            "scripts/static-build sets {setting}"
        );
    }
    assert!(
        builder.contains(
            "install -D -m 0755 target/x86_64-unknown-linux-musl/release/tollgate /out/tollgate"
        ),
        "the image takes the binary the command built"
    );
    // The script lays out the root as the image's final stage does.
    for path in [
        "/tollgate",
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/tollgate/tollgate.yaml",
    ] {
        assert!(
            builder.contains(&format!(" {path}\n")),
            "the image copies {path}"
        );
        assert!(
            script.contains(&format!("\"$root{path}\"")),
            "scripts/static-build lays out {path}"
        );
    }
}

/// A container engine that can build and run here: docker or podman, or
/// why neither can.
fn container_engine() -> Result<&'static str, String> {
    let mut why = Vec::new();
    for engine in ["docker", "podman"] {
        match Command::new(engine).arg("info").output() {
            Ok(out) if out.status.success() => return Ok(engine),
            Ok(out) => {
                let stderr = String::from_utf8_lossy(&out.stderr);
                let line = stderr.lines().rfind(|l| !l.trim().is_empty());
                why.push(format!(
                    "{engine} info: {}",
                    line.unwrap_or("failed").trim()
                ));
            }
            Err(e) => why.push(format!("{engine} info: {e}")),
        }
    }
    Err(why.join("; "))
}

#[test]
fn the_image_builds_and_its_binary_runs() {
    let engine = match container_engine() {
        Ok(engine) => engine,
        Err(why) => {
            // The one skip issue 16 asks for: no builder, nothing to build.
            eprintln!("skipped: no container builder on this machine ({why})");
            return;
        }
    };
    let tag = "tollgate-packaging-test:latest";
    let built = Command::new(engine)
        .args(["build", "-t", tag, "."])
        .current_dir(root())
        .status()
        .expect("the engine runs");
    assert!(built.success(), "{engine} build failed");
    let out = Command::new(engine)
        .args(["run", "--rm", tag, "--version"])
        .output()
        .expect("the engine runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("tollgate {}", env!("CARGO_PKG_VERSION"))
    );
}
