//! Following a span from Envoy through tollgate to Redis. A real Envoy,
//! examples/envoy.yaml with docs/envoy.md's tracing blocks added as
//! written, exports its spans over OTLP to a collector inside the test, as
//! a real `tollgate serve` on a real redis-server does. One request, under
//! the client's own W3C `traceparent`, is admitted; the next, with none,
//! is Envoy's 429. Each is one trace: Envoy's ingress span, its rate limit
//! call to tollgate, tollgate's request, its decision and its Redis call,
//! each the child of the one before.

mod support;

#[path = "support/otlp_receiver.rs"]
mod receiver;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use receiver::{CLIENT, Collector, INTERNAL, SERVER, Span, attributes};
use support::{EnvoyProcess, TollgateProcess, free_port};
use tollgate_testkit::RedisServer;

/// The client's trace, and its span the request is sent under.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// The span of Envoy's rate limit filter calling tollgate.
const RLS_CALL: &str = "async envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit egress";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative))
        .unwrap_or_else(|e| panic!("read {relative}: {e}"))
}

/// The one ``` block of `doc` whose info words hold `splice=PLACE`.
fn doc_block(doc: &str, place: &str) -> String {
    let marker = format!("splice={place}");
    let mut found = Vec::new();
    let mut open: Option<String> = None;
    for line in doc.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) if info.split_whitespace().any(|w| w == marker) => {
                open = Some(String::new());
            }
            (Some(_), Some("")) => found.extend(open.take()),
            (Some(text), _) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, _) => {}
        }
    }
    assert_eq!(found.len(), 1, "docs/envoy.md: one block `{marker}`");
    found.remove(0)
}

fn indented(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.lines().map(|l| format!("{pad}{l}\n")).collect()
}

/// examples/envoy.yaml with docs/envoy.md's tracing blocks where the doc
/// says they go, each written port (`port_value: N}`) replaced as `ports`
/// say.
fn traced_envoy_config(ports: &[(u16, u16)]) -> String {
    let doc = read("docs/envoy.md");
    let example = read("examples/envoy.yaml");
    let beside = "          stat_prefix: edge\n";
    assert_eq!(example.matches(beside).count(), 1, "examples/envoy.yaml");
    // The file ends in static_resources' clusters: the doc's cluster is
    // added to them, the runtime (top level) after them.
    let clusters = example.rfind("\n  clusters:\n").expect("clusters");
    assert!(
        example[clusters..]
            .lines()
            .skip(2)
            .all(|l| l.starts_with("  ")),
        "examples/envoy.yaml no longer ends in its clusters"
    );
    let tracing = indented(&doc_block(&doc, "http_connection_manager"), 10);
    let mut config = example.replacen(beside, &format!("{beside}{tracing}"), 1);
    config.push_str(&indented(&doc_block(&doc, "clusters"), 2));
    config.push_str(&doc_block(&doc, "bootstrap"));
    for (written, free) in ports {
        let from = format!("port_value: {written}}}");
        assert!(config.contains(&from), "no {from} to replace");
        config = config.replace(&from, &format!("port_value: {free}}}"));
    }
    config
}

/// The application behind Envoy, on a free port: the `traceparent` each
/// request reached it with.
async fn application() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
        let kept = kept.clone();
        async move {
            let traceparent = headers
                .get("traceparent")
                .map(|v| v.to_str().unwrap_or("not text").to_owned());
            kept.lock()
                .expect("seen")
                .push(traceparent.unwrap_or_else(|| "none".to_owned()));
            "hello from the application"
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, seen)
}

/// tollgate's config: examples/envoy-ratelimit.yaml's `remote_address`
/// bound to `per-client`, one request an hour per client, on Redis.
fn tollgate_files(dir: &Path, redis: &RedisServer) -> PathBuf {
    std::fs::write(
        dir.join("envoy-ratelimit.yaml"),
        read("examples/envoy-ratelimit.yaml"),
    )
    .expect("write the rules");
    let config = dir.join("tollgate.yaml");
    std::fs::write(
        &config,
        format!(
            "server: {{watch_interval_ms: 0}}
region: eu
stores:
  local: memory
  regional: {{redis: {{url: \"{}\"}}}}
envoy_ratelimit_configs: [envoy-ratelimit.yaml]
policies:
  - name: per-client
    algorithm: fixed_window
    limit: 1
    window: 1h
    scope: region
    identity: [client_ip]
",
            redis.url()
        ),
    )
    .expect("write the config");
    config
}

/// The port of `address` (`http://HOST:PORT` or `HOST:PORT`).
fn port_of(address: &str) -> u16 {
    address
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {address}"))
}

/// The one span of `trace` named `name`.
fn named<'a>(trace: &[&'a Span], name: &str) -> &'a Span {
    let found: Vec<&&Span> = trace.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one {name} in {trace:#?}");
    found[0]
}

/// The attributes of `span` named in `keys`, to compare with
/// [`attributes`] (Envoy's others hold ids, addresses and sizes).
fn picked(span: &Span, keys: &[&str]) -> std::collections::BTreeMap<String, String> {
    span.attributes
        .iter()
        .filter(|(k, _)| keys.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// What a request's spans say of its answer, hop by hop.
struct Answer {
    /// Envoy's ingress span: the status, and Envoy's response flags.
    status: &'static str,
    flags: &'static str,
    /// Envoy's call to tollgate: the code it read.
    ratelimit: &'static str,
    /// tollgate's decision.
    outcome: &'static str,
}

const ADMITTED: Answer = Answer {
    status: "200",
    flags: "-",
    ratelimit: "ok",
    outcome: "allowed",
};

const REJECTED: Answer = Answer {
    status: "429",
    flags: "RL",
    ratelimit: "over_limit",
    outcome: "rejected",
};

/// Trace `trace_id` of `spans` is one request, followed from Envoy to
/// Redis: Envoy's ingress span under `caller` (empty: a root); its call to
/// tollgate; tollgate's request, decision and store call, each the child
/// of the one before, each saying `answer`. The ingress span's id.
fn follow(spans: &[Span], trace_id: &str, caller: &str, answer: &Answer) -> String {
    let trace: Vec<&Span> = spans.iter().filter(|s| s.trace_id == trace_id).collect();
    let mut names: Vec<(&str, &str)> = trace
        .iter()
        .map(|s| (s.service.as_str(), s.name.as_str()))
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            ("envoy", RLS_CALL),
            ("envoy", "ingress"),
            ("tollgate", "tollgate.decide"),
            ("tollgate", "tollgate.request"),
            ("tollgate", "tollgate.store"),
        ],
        "trace {trace_id}: {trace:#?}"
    );
    let ingress = named(&trace, "ingress");
    assert_eq!((ingress.parent.as_str(), ingress.kind), (caller, SERVER));
    assert_eq!(
        picked(
            ingress,
            &[
                "http.method",
                "http.status_code",
                "response_flags",
                "upstream_cluster"
            ]
        ),
        attributes(&[
            ("http.method", "GET"),
            ("http.status_code", answer.status),
            ("response_flags", answer.flags),
            ("upstream_cluster", "app"),
        ]),
    );
    let call = named(&trace, RLS_CALL);
    assert_eq!(
        (call.parent.as_str(), call.kind),
        (ingress.span_id.as_str(), CLIENT)
    );
    assert_eq!(
        picked(
            call,
            &["grpc.status_code", "ratelimit_status", "upstream_cluster"]
        ),
        attributes(&[
            ("grpc.status_code", "0"),
            ("ratelimit_status", answer.ratelimit),
            ("upstream_cluster", "tollgate"),
        ]),
    );
    // tollgate's request is the child of Envoy's call: the traceparent
    // Envoy put in the call's metadata.
    let request = named(&trace, "tollgate.request");
    assert_eq!(
        (request.parent.as_str(), request.kind),
        (call.span_id.as_str(), SERVER)
    );
    assert_eq!(request.attributes, attributes(&[("door", "rls")]));
    let decide = named(&trace, "tollgate.decide");
    assert_eq!(
        (decide.parent.as_str(), decide.kind),
        (request.span_id.as_str(), INTERNAL)
    );
    assert_eq!(
        decide.attributes,
        attributes(&[
            ("checks", "1"),
            ("outcome", answer.outcome),
            ("path", "shared"),
            ("policies", "per-client"),
        ])
    );
    let store = named(&trace, "tollgate.store");
    assert_eq!(
        (store.parent.as_str(), store.kind),
        (decide.span_id.as_str(), INTERNAL)
    );
    assert_eq!(
        store.attributes,
        attributes(&[("region", "eu"), ("store", "regional")])
    );
    ingress.span_id.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_followed_from_envoy_through_tollgate_to_redis() {
    let collector = Collector::grpc().await;
    let redis = RedisServer::start().expect("redis-server");
    let dir = tempfile::tempdir().expect("temp dir");
    let endpoint = collector.endpoint();
    let (tollgate, grpc) = TollgateProcess::spawn_with_grpc(
        &tollgate_files(dir.path(), &redis),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
    );
    let (app, seen) = application().await;
    let (listen, admin) = (free_port(), free_port());
    let envoy_yaml = dir.path().join("envoy.yaml");
    std::fs::write(
        &envoy_yaml,
        traced_envoy_config(&[
            (9901, admin),
            (10000, listen),
            (3000, app),
            (8081, port_of(&grpc)),
            (4317, port_of(&endpoint)),
        ]),
    )
    .expect("write envoy.yaml");
    let _envoy = EnvoyProcess::start(&envoy_yaml, admin).await;

    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{listen}/orders");
    let admitted = client
        .get(&url)
        .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN}-01"))
        .send()
        .await
        .expect("a request through Envoy");
    assert_eq!(admitted.status(), 200);
    let rejected = client.get(&url).send().await.expect("a request");
    assert_eq!(rejected.status(), 429);
    assert_eq!(rejected.headers()["x-envoy-ratelimited"], "true");
    // A clean stop sends tollgate's spans; Envoy sends each as it ends.
    tollgate.stop();
    let received = collector
        .wait_for("both requests' spans, Envoy's and tollgate's", |spans| {
            spans.len() >= 10
        })
        .await;
    let spans = received.spans();
    assert_eq!(spans.len(), 10, "{spans:#?}");
    let mut services = received.service_names();
    services.sort_unstable();
    assert_eq!(services, ["envoy", "tollgate"]);

    // The admitted request joined the client's trace, end to end; the
    // application was called under Envoy's ingress span.
    let ingress = follow(&spans, TRACE_ID, CALLER_SPAN, &ADMITTED);
    assert_eq!(
        *seen.lock().expect("seen"),
        [format!("00-{TRACE_ID}-{ingress}-01")]
    );
    // The rejected one, sent with no traceparent, is a trace of Envoy's.
    let roots: Vec<&Span> = spans.iter().filter(|s| s.parent.is_empty()).collect();
    assert_eq!(roots.len(), 1, "one root span: {spans:#?}");
    assert_ne!(roots[0].trace_id, TRACE_ID);
    follow(&spans, &roots[0].trace_id, "", &REJECTED);
}
