//! Concurrency permits through the example app (examples/axum_app.rs)
//! behind the layer, over real loopback HTTP, its store on a manual clock
//! so no lease ends unless a test moves time: at most `limit` reports of a
//! tenant at once, and every way a request can end — answered, its client
//! gone, its handler panicked, its call cancelled — gives its permit back.

mod support;

#[allow(dead_code)]
#[path = "../examples/axum_app.rs"]
mod axum_app;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum_app::{InFlight, api};
use support::{T0, Tollgate, header, temp_dir, write_config};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tollgate_core::{Clock, Identity, ManualClock};
use tollgate_limiter::{Check, Decider, LimiterMetrics, Plan};
use tollgate_tower::{Configured, RateLimitLayer, Rule, rules_of};
use tower::ServiceExt;

/// Reports: 3 at once per tenant, a permit's lease a minute.
fn limit_3(matched: bool) -> String {
    let matching = if matched {
        "match: { methods: [POST], path: /reports }"
    } else {
        ""
    };
    format!(
        r#"
store:
  memory: {{ max_keys: 1000 }}
policies:
  - name: reports
    algorithm: concurrency
    limit: 3
    lease: 1m
    {matching}
    identity: [{{ header: X-Tenant }}]
    on_store_failure: fail_closed
"#
    )
}

/// The example's routes behind a layer, served on loopback.
struct App {
    addr: SocketAddr,
    in_flight: Arc<InFlight>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for App {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve<D: Decider>(layer: RateLimitLayer<D>) -> App {
    let in_flight = Arc::new(InFlight::default());
    let app = api(Arc::clone(&in_flight)).layer(layer);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let service = app.into_make_service_with_connect_info::<SocketAddr>();
        let _ = axum::serve(listener, service).await;
    });
    App {
        addr,
        in_flight,
        task,
    }
}

impl App {
    /// `POST /reports?{query}` as `tenant`.
    fn report(
        &self,
        tenant: &str,
        query: &str,
    ) -> impl Future<Output = reqwest::Result<reqwest::Response>> + use<> {
        reqwest::Client::new()
            .post(format!("http://{}/reports?{query}", self.addr))
            .header("X-Tenant", tenant)
            .send()
    }

    /// Waits until `now` reports are being made.
    async fn until_making(&self, now: u64) {
        until(|| self.in_flight.now() == now).await;
    }
}

/// Waits, a generous while at most, until `done` says so; the caller's
/// assertions then say what is true.
async fn until(done: impl Fn() -> bool) {
    for _ in 0..2_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The config `yaml` behind the layer on a manual clock, the example's
/// routes served behind it.
async fn configured(
    yaml: &str,
    clock: Arc<ManualClock>,
) -> (Configured, App, support::tempdir::Dir) {
    let dir = temp_dir();
    let path = write_config(&dir.0, yaml);
    let configured = Configured::load(&path, clock).await.expect("config loads");
    let app = serve(configured.layer()).await;
    (configured, app, dir)
}

/// `tenant` as `identity: [{header: X-Tenant}]` names it.
fn tenant(name: &str) -> Identity {
    Identity::composite([("x-tenant", name)]).expect("identity")
}

/// How many permits `identity` could take now: taken one by one until one
/// is refused, then all given back.
async fn free_permits<D: Decider>(decider: &D, plan: &Plan, identity: &Identity) -> u64 {
    let mut taken = Vec::new();
    while taken.len() < 100 {
        let decided = decider.decide(&[Check::new(plan, identity, 1)]).await;
        match decided.decisions.first().and_then(|d| d.permit) {
            Some(permit) => taken.push(permit),
            None => break,
        }
    }
    for permit in &taken {
        let released = decider.release(plan, identity, *permit).await;
        assert!(matches!(released, Ok(true)), "{released:?}");
    }
    taken.len() as u64
}

/// [`free_permits`] once the releases under way have landed: asked until
/// it says `want`, a generous while at most, then said.
async fn settled_free<D: Decider>(decider: &D, plan: &Plan, identity: &Identity, want: u64) -> u64 {
    for _ in 0..1_000 {
        if free_permits(decider, plan, identity).await == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    free_permits(decider, plan, identity).await
}

fn reports_plan(rules: &[Rule]) -> &Plan {
    rules.first().expect("the reports rule").plan()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_slow_reports_of_one_tenant_at_once_admit_exactly_three_and_no_more_run() {
    let clock = Arc::new(ManualClock::new(T0));
    let (configured, app, _dir) = configured(&limit_3(true), clock).await;
    let rules = configured.rules();
    let (plan, acme) = (reports_plan(&rules), tenant("acme"));

    let mut reports = JoinSet::new();
    for _ in 0..50 {
        reports.spawn(app.report("acme", "ms=60000"));
    }
    for _ in 0..47 {
        let refused = reports
            .join_next()
            .await
            .expect("a report")
            .expect("joined")
            .expect("answered");
        assert_eq!(refused.status(), 429);
        // The earliest lease ends a minute after the store's now.
        assert_eq!(header(&refused, "retry-after"), "60");
        assert_eq!(header(&refused, "ratelimit"), "\"reports\";r=0;t=60");
        assert_eq!(header(&refused, "ratelimit-policy"), "\"reports\";q=3;w=60");
    }
    app.until_making(3).await;
    assert_eq!(reports.len(), 3);
    assert_eq!(app.in_flight.now(), 3);
    assert_eq!(app.in_flight.most(), 3);
    assert_eq!(free_permits(configured.limiter(), plan, &acme).await, 0);

    // Another tenant's reports are not acme's.
    let other = app.report("globex", "ms=0").await.expect("answered");
    assert_eq!(other.status(), 200);
    assert_eq!(header(&other, "ratelimit"), "\"reports\";r=2;t=60");
    assert_eq!(
        settled_free(configured.limiter(), plan, &tenant("globex"), 3).await,
        3
    );

    // acme's three clients leave mid-report: their permits come back.
    reports.abort_all();
    assert_eq!(settled_free(configured.limiter(), plan, &acme, 3).await, 3);
    app.until_making(0).await;
    assert_eq!(app.in_flight.now(), 0);
    // acme's three and globex's one.
    assert_eq!(app.in_flight.most(), 4);
}

/// A raw `POST /reports?ms=60000` as acme on its own connection, kept open
/// until dropped.
async fn open_report(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(
            b"POST /reports?ms=60000 HTTP/1.1\r\nhost: localhost\r\nx-tenant: acme\r\ncontent-length: 0\r\n\r\n",
        )
        .await
        .expect("request sent");
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_leave_and_handlers_that_panic_give_their_permits_back() {
    let clock = Arc::new(ManualClock::new(T0));
    let (configured, app, _dir) = configured(&limit_3(true), clock).await;
    let rules = configured.rules();
    let (plan, acme) = (reports_plan(&rules), tenant("acme"));
    let limiter = configured.limiter();

    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(open_report(app.addr).await);
    }
    app.until_making(3).await;
    assert_eq!(app.in_flight.now(), 3);
    assert_eq!(free_permits(limiter, plan, &acme).await, 0);
    // The clients close their connections before any answer.
    drop(open);
    assert_eq!(settled_free(limiter, plan, &acme, 3).await, 3);
    app.until_making(0).await;
    assert_eq!(app.in_flight.now(), 0);

    // More panics than permits: each reaches its handler (its connection
    // closes unanswered, never a 429), and each gives its permit back.
    for _ in 0..4 {
        let panicked = app.report("acme", "ms=0&panic=true").await;
        assert!(panicked.is_err(), "{panicked:?}");
        assert_eq!(settled_free(limiter, plan, &acme, 3).await, 3);
    }
    assert_eq!(app.in_flight.most(), 3);
}

fn report_request(tenant: &str) -> http::Request<Body> {
    http::Request::post("/reports?ms=60000")
        .header("x-tenant", tenant)
        .body(Body::empty())
        .expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_cancelled_before_their_answer_give_their_permits_back() {
    let clock = Arc::new(ManualClock::new(T0));
    let (configured, _app, _dir) = configured(&limit_3(true), clock).await;
    let rules = configured.rules();
    let (plan, acme) = (reports_plan(&rules), tenant("acme"));
    let in_flight = Arc::new(InFlight::default());
    let service = api(Arc::clone(&in_flight)).layer(configured.layer());

    let mut calls = JoinSet::new();
    for _ in 0..3 {
        calls.spawn(service.clone().oneshot(report_request("acme")));
    }
    until(|| in_flight.now() == 3).await;
    assert_eq!(in_flight.now(), 3);
    let refused = service
        .clone()
        .oneshot(report_request("acme"))
        .await
        .expect("answered");
    assert_eq!(refused.status(), 429);
    assert_eq!(free_permits(configured.limiter(), plan, &acme).await, 0);

    calls.abort_all();
    assert_eq!(settled_free(configured.limiter(), plan, &acme, 3).await, 3);
    until(|| in_flight.now() == 0).await;
    assert_eq!(in_flight.now(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_never_releases_keeps_its_permits_until_their_leases_end() {
    let clock = Arc::new(ManualClock::new(T0));
    let (configured, app, _dir) = configured(&limit_3(true), clock.clone()).await;
    let rules = configured.rules();
    let (plan, acme) = (reports_plan(&rules), tenant("acme"));
    // A holder that dies: three permits taken, never released.
    for _ in 0..3 {
        let decided = configured
            .limiter()
            .decide(&[Check::new(plan, &acme, 1)])
            .await;
        assert!(decided.decisions[0].permit.is_some());
    }
    let refused = app.report("acme", "ms=0").await.expect("answered");
    assert_eq!(refused.status(), 429);
    assert_eq!(header(&refused, "retry-after"), "60");

    clock.advance(59_999);
    let refused = app.report("acme", "ms=0").await.expect("answered");
    assert_eq!(refused.status(), 429);
    assert_eq!(header(&refused, "retry-after"), "1");
    assert_eq!(free_permits(configured.limiter(), plan, &acme).await, 0);

    clock.advance(1);
    assert_eq!(free_permits(configured.limiter(), plan, &acme).await, 3);
    let admitted = app.report("acme", "ms=0").await.expect("answered");
    assert_eq!(admitted.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_remote_tollgate_the_layer_releases_with_v1_release() {
    let clock = Arc::new(ManualClock::new(T0));
    let as_clock: Arc<dyn Clock> = clock.clone();
    // The server is asked by name: its policy has no `match` (forward auth
    // could not release), the layer's rule has.
    let server = Tollgate::start(&limit_3(false), as_clock.clone(), "127.0.0.1:0").await;
    let dir = temp_dir();
    let path = write_config(&dir.0, &limit_3(true));
    let config = tollgate_config::Config::load(&path, |_| None).expect("config loads");
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = LimiterMetrics::register(&mut registry, as_clock.clone());
    let rules = rules_of(&config, &metrics);
    let remote = support::remote(&server.base, as_clock.clone());
    let app = serve(RateLimitLayer::new(
        support::remote(&server.base, as_clock),
        rules.clone(),
    ))
    .await;
    let (plan, acme) = (reports_plan(&rules), tenant("acme"));

    let mut reports = JoinSet::new();
    for _ in 0..3 {
        reports.spawn(app.report("acme", "ms=60000"));
    }
    app.until_making(3).await;
    assert_eq!(app.in_flight.now(), 3);
    let refused = app.report("acme", "ms=0").await.expect("answered");
    assert_eq!(refused.status(), 429);
    assert_eq!(header(&refused, "retry-after"), "60");
    assert_eq!(free_permits(&remote, plan, &acme).await, 0);

    reports.abort_all();
    assert_eq!(settled_free(&remote, plan, &acme, 3).await, 3);
    let admitted = app.report("acme", "ms=0").await.expect("answered");
    assert_eq!(admitted.status(), 200);
    assert_eq!(settled_free(&remote, plan, &acme, 3).await, 3);
    server.stop().await;
}
