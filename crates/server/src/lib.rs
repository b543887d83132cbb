//! The tollgate server as a library. The `tollgate` binary is a thin CLI
//! over it; tests drive it in-process with a manual clock over real
//! loopback HTTP and gRPC. Its modules are private: the list below is all
//! the binary and the tests reach.
//!
//! Layers, each importing only those above it in this list (no cycles; see
//! docs/design.md §2):
//!
//! 1. **`config/`** — what a file says, loaded and validated once for
//!    `validate` and `serve` alike: the part every door shares (policies,
//!    stores, scopes, the identity, match and cost rules) is the
//!    `tollgate-config` crate, the `server` section is read here, beside
//!    `envoy_rules/` (Envoy's descriptor rules) and the small parsers it
//!    uses (`listen`, `tls`, `tokens`).
//! 2. **`live`** — the loaded config with each policy's limiter `Plan`
//!    built once per load (by `tollgate-config`), replaced whole on
//!    reload; `app` is the state every adapter shares (with `connections`,
//!    who may hold a connection, `deadline`, a request's, and `trace`, the
//!    capture file's writer), `metrics` and `process_metrics` the server's
//!    Prometheus series, `ui/` the live page's files and the state it
//!    reads from those series. The decision itself is the `tollgate-limiter`
//!    crate (stores, failure modes, clock, decision metrics).
//! 3. **protocol adapters** — input → checks → `Limiter::decide` → answer:
//!    HTTP (`http/`: the router, a file for each API endpoint and one for
//!    the operations endpoints), Envoy RLS (`rls/`), `replay` and
//!    `explain`, and `access_log` (`tollgate trace --from`: an access log
//!    as a trace); both doors write RateLimit fields by `tollgate-http`, the
//!    HTTP contract every door shares.
//! 4. **`workers`, `serve`, then `main`** — listen, reload, shut down
//!    (`descriptors`: the file descriptors those connections need;
//!    `proxy_socket`: the proxy's own way in; `error`: what stops serving);
//!    the binary parses the command line and calls in here.
//!
//! A `/v1/check` walks: `workers` accepts → `http::route` → the body parsed
//! into checks → `Limiter::decide` → the store → the decision written back
//! by `http`.

#![deny(missing_docs)]
// 1. config; what every door shares of it is the `tollgate-config` crate.
mod config;
mod envoy_rules;
mod listen;
mod tls;
mod tokens;

// 2. live config and shared state; the limiter is its own crate, so a Rust
// service can depend on it alone.
mod app;
mod connections;
mod deadline;
mod live;
mod metrics;
mod otlp;
mod process_metrics;
mod trace;
mod ui;
use tollgate_limiter as limiter;

// 3. protocol adapters
mod access_log;
mod explain;
mod http;
mod replay;
mod rls;

// 3b. what reads replays: pictures, and configs compared
mod compare;
mod plot;

// 4. serve
mod descriptors;
mod error;
mod proxy_socket;
mod serve;
mod workers;

// What the binary runs: `serve`, `replay`, `compare`, `trace`, `validate`
// and `explain`.
pub use access_log::{
    IdentitySource, LogFormat, MAX_LINE_BYTES, Policies, TraceArgs, TraceError, TraceOptions,
    Traced, trace_command, trace_from_log,
};
pub use compare::{CompareError, CompareOptions, Compared, compare};
pub use config::{ConfigLoadError, Overrides, ServeConfig};
pub use descriptors::{DescriptorError, Descriptors, raise_descriptor_limit};
pub use error::ServeError;
pub use explain::{
    EXPLAIN_WIDTH, UnknownPolicy, describe_policy, explain, explain_json, explain_one,
};
pub use listen::ListenAddress;
pub use otlp::{
    Exporter, Exporting, install as install_trace_export, resolve as resolve_trace_export,
};
pub use plot::Plot;
pub use replay::{
    DEFAULT_MAX_KEYS, REPLAY_PREFIX, ReplayError, ReplayFormat, ReplayOptions, ReplayPolicy,
    ReplayStore, Replayed, Seen, Summary, Tally, Verdict, replay_policies, replay_trace,
};
pub use serve::{ServeOptions, serve};

// What the tests drive in-process: an `App` over a loaded config, served
// on their own listeners, and the parts of a config they inspect.
pub use app::App;
pub use config::ServerSettings;
pub use envoy_rules::RuleKind;
pub use serve::serve_app;
pub use workers::serve_grpc;

// What the examples' baselines share with the RLS door: its gRPC body.
pub use rls::GrpcBody;
