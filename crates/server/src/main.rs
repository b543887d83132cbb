//! `tollgate`: a thin binary over the core and the stores. Each subcommand
//! is an adapter that translates its input into core calls and back.

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tollgate::{
    ConfigLoadError, Exporter, Exporting, ListenAddress, Overrides, ReplayError, ReplayOptions,
    ReplayStore, ServeConfig, ServeOptions,
};
use tollgate_limiter::SPANS;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;

#[derive(Parser)]
#[command(
    name = "tollgate",
    version,
    about = "An exact, explainable rate limiter"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve decisions over HTTP: /v1/check, /v1/authorize (forward auth),
    /// /v1/policies, /v1/state, /v1/hot, /healthz, /readyz, /metrics; and
    /// Envoy's rate limit service over gRPC with --grpc-listen.
    ///
    /// Each option may come from its TOLLGATE_* variable instead; a flag
    /// wins over its variable, which wins over the config file. RUST_LOG
    /// filters the logs (default `info`; e.g. `tollgate=debug`).
    Serve {
        #[command(flatten)]
        load: Load,
        /// Address to listen on, HOST:PORT (a host name is resolved)
        /// [default: server.listen, else 127.0.0.1:8080].
        #[arg(long, env = "TOLLGATE_LISTEN")]
        listen: Option<ListenAddress>,
        /// Serve Envoy's rate limit service (RLS v3 gRPC) on this address
        /// [default: server.grpc_listen, else not served].
        #[arg(long, env = "TOLLGATE_GRPC_LISTEN")]
        grpc_listen: Option<ListenAddress>,
        /// Log lines as text or as JSON objects (one a line, on stderr; the
        /// listen lines on stdout then are JSON too). Any case.
        #[arg(
            long,
            env = "TOLLGATE_LOG_FORMAT",
            value_enum,
            ignore_case = true,
            default_value_t = LogFormat::Text
        )]
        log_format: LogFormat,
    },
    /// Decide a trace of events (JSON lines on stdin) at their own times;
    /// write one decision a line to stdout.
    Replay {
        /// The policy config (YAML).
        #[arg(long)]
        config: PathBuf,
        /// The most keys the memory store keeps before evicting.
        #[arg(long, default_value_t = tollgate::DEFAULT_MAX_KEYS)]
        max_keys: usize,
        /// Where to decide: `memory` (default), or a `redis://HOST:PORT`
        /// whose scripts decide at each event's own time.
        #[arg(long)]
        store: Option<String>,
        /// The Redis key prefix the replay writes under [default:
        /// tollgate-replay]. A prefix holding keys no replay wrote (a
        /// serving tollgate's) is refused, as is `tollgate`.
        #[arg(long)]
        prefix: Option<String>,
        /// Write under --prefix even where a serving tollgate's keys are:
        /// the replay then spends and resets real users' limits.
        #[arg(long)]
        write_live_keys: bool,
        /// `decision`: the decision alone (the vectors' spelling); `full`:
        /// the event's t_ms, policy and key, then the decision.
        #[arg(long, value_enum, default_value_t = ReplayFormat::Decision)]
        format: ReplayFormat,
        /// Report a bad line on stderr (`line N: …`) and go on; the exit
        /// status is then 3 if any line was skipped.
        #[arg(long)]
        skip_bad_lines: bool,
        /// At the end, print per policy (in name order) the events offered,
        /// admitted and rejected, with their summed cost, on stderr.
        #[arg(long)]
        summary: bool,
        /// Flush stdout after every decision, for a reader following along.
        #[arg(long)]
        line_buffered: bool,
        /// Also draw the replay as an SVG picture into this file: per
        /// policy, the units offered and admitted over time, its
        /// rejections with their retry-after, and its bound.
        #[arg(long, value_name = "OUT.svg")]
        plot: Option<PathBuf>,
    },
    /// Decide one trace by several policies side by side (each offered
    /// every check of the trace), or by two configs (`--against OLD`): per
    /// policy, what was offered, admitted and rejected, the most one
    /// identity was admitted in any span of the policy's length against
    /// its bound, and with --against what the new config decides
    /// differently and for which identities (hashed as the metrics hash
    /// them).
    Compare {
        /// The policy config (YAML); with --against, the new one.
        #[arg(long)]
        config: PathBuf,
        /// The trace (JSON lines, as `replay` reads them).
        #[arg(long)]
        trace: PathBuf,
        /// The old config, to compare --config against.
        #[arg(long, value_name = "OLD")]
        against: Option<PathBuf>,
        /// Only these policies, in this order [default: all].
        #[arg(long, value_delimiter = ',', value_name = "A,B,...")]
        policies: Vec<String>,
        /// Also draw the decisions as an SVG picture into this file.
        #[arg(long, value_name = "OUT.svg")]
        plot: Option<PathBuf>,
        /// The summary as JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// The most keys the memory store keeps before evicting.
        #[arg(long, default_value_t = tollgate::DEFAULT_MAX_KEYS)]
        max_keys: usize,
    },
    /// Check a config as `serve` would load it (the same flags and TOLLGATE_*
    /// variables) and print its policies; exit 1 when it is invalid.
    Validate {
        #[command(flatten)]
        load: Load,
        /// Fail (exit 1) when the config has warnings, too.
        #[arg(long)]
        strict: bool,
    },
    /// Print, for each policy, its scope, the bound it gives across tollgate
    /// processes and over any span of time, and its failure mode; exit 1
    /// when the config is invalid.
    Explain {
        #[command(flatten)]
        load: Load,
        /// JSON instead of text, for CI to diff.
        #[arg(long)]
        json: bool,
        /// Only the policy of this name (an unknown name fails, listing the
        /// config's policies).
        #[arg(long, value_name = "NAME")]
        policy: Option<String>,
    },
    /// Turn an access log (a file, or stdin) into a trace for `replay`:
    /// an event a line, its time the log's, its identity one field or
    /// header (hashed with the identity key, as server.trace writes keys).
    /// Exit 2 when it stopped, 3 when it skipped a bad line.
    Trace(tollgate::TraceArgs),
}

/// What decides how a config loads, alike for `serve`, `validate` and
/// `explain`: a flag wins over its variable, which wins over the file.
#[derive(Args)]
struct Load {
    /// The config (YAML): policies, and optional server and store sections.
    #[arg(long, env = "TOLLGATE_CONFIG")]
    config: PathBuf,
    /// The store, replacing the config's one `store:`: `memory`, or a
    /// `redis://HOST:PORT` / `rediss://…` URL (the section's other Redis
    /// settings stay). A config with `stores:` by role is refused.
    #[arg(long, env = "TOLLGATE_STORE", hide_env_values = true)]
    store: Option<String>,
    /// This instance's region [default: the config's `region:`]: picks
    /// its regional store and split shares.
    #[arg(long, env = "TOLLGATE_REGION")]
    region: Option<String>,
    /// Every policy and envoyproxy/ratelimit rule in shadow mode: decided
    /// and counted, never enforced (`--shadow-mode`, or `=false` to turn
    /// the config's `server.shadow_mode` off) [default: server.shadow_mode].
    #[arg(
        long,
        env = "TOLLGATE_SHADOW_MODE",
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    shadow_mode: Option<bool>,
}

impl Load {
    fn overrides(&self) -> Overrides {
        Overrides {
            region: self.region.clone(),
            store: self.store.clone(),
            shadow_mode: self.shadow_mode,
        }
    }

    fn load(&self) -> Result<ServeConfig, ConfigLoadError> {
        ServeConfig::load_overridden(&self.config, &self.overrides())
    }
}

/// How `serve` writes its logs.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`); colour only
/// when stderr is a terminal. With `exporting`, tollgate's spans are
/// exported over OTLP too; otherwise their target is off, so a disabled
/// span is all a decision pays for them. The logs never show those spans.
fn init_logs(format: LogFormat, exporting: Option<&Exporting>) -> Result<Option<Exporter>, String> {
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if let Ok(spans_off) = format!("{SPANS}=off").parse() {
        filter = filter.add_directive(spans_off);
    }
    let logs = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(io::stderr)
            .with_ansi(io::stderr().is_terminal())
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .with_writer(io::stderr)
            .json()
            .with_current_span(false)
            .with_span_list(false)
            .boxed(),
    };
    let registry = tracing_subscriber::registry().with(logs.with_filter(filter));
    let Some(exporting) = exporting else {
        registry.init();
        return Ok(None);
    };
    match tollgate::install_trace_export(exporting) {
        Ok((spans, exporter)) => {
            let only_spans = Targets::new().with_target(SPANS, tracing::Level::INFO);
            registry.with(spans.with_filter(only_spans)).init();
            tracing::info!(
                endpoint = %exporting.endpoint,
                protocol = exporting.protocol.name(),
                service_name = %exporting.service_name,
                "exporting traces over OTLP"
            );
            Ok(Some(exporter))
        }
        Err(message) => {
            registry.init();
            Err(message)
        }
    }
}

/// What `server.otlp` and the OpenTelemetry environment ask to export. The
/// file is read here only for that section: a file that does not load is
/// reported by `serve` itself, as ever.
fn trace_export(load: &Load) -> Result<Option<Exporting>, String> {
    let file = load.load().ok();
    let section = file.as_ref().and_then(|config| config.server.otlp.as_ref());
    tollgate::resolve_trace_export(section, &|name| std::env::var(name).ok())
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Serve {
            load,
            listen,
            grpc_listen,
            log_format,
        } => {
            let exporting = match trace_export(&load) {
                Ok(exporting) => exporting,
                Err(message) => return fail(&format_args!("trace export: {message}"), 1),
            };
            // Kept to the end: dropping it flushes the spans still queued.
            let _exporter = match init_logs(log_format, exporting.as_ref()) {
                Ok(exporter) => exporter,
                Err(message) => return fail(&format_args!("trace export: {message}"), 1),
            };
            serve_command(ServeOptions {
                overrides: load.overrides(),
                config: load.config,
                listen,
                grpc_listen,
                announce_json: log_format == LogFormat::Json,
            })
        }
        Command::Replay {
            config,
            max_keys,
            store,
            prefix,
            write_live_keys,
            format,
            skip_bad_lines,
            summary,
            line_buffered,
            plot,
        } => {
            let options = ReplayOptions {
                format: match format {
                    ReplayFormat::Decision => tollgate::ReplayFormat::Decision,
                    ReplayFormat::Full => tollgate::ReplayFormat::Full,
                },
                skip_bad_lines,
                line_buffered,
            };
            let target = ReplayStore {
                max_keys,
                store,
                prefix,
                write_live_keys,
            };
            replay_command(&config, &target, options, summary, plot.as_deref())
        }
        Command::Compare {
            config,
            trace,
            against,
            policies,
            plot,
            json,
            max_keys,
        } => {
            let options = tollgate::CompareOptions {
                config,
                trace,
                against,
                policies,
                plot: plot.is_some(),
                max_keys,
            };
            compare_command(&options, plot.as_deref(), json)
        }
        Command::Validate { load, strict } => validate_command(&load, strict),
        Command::Explain { load, json, policy } => explain_command(&load, json, policy.as_deref()),
        Command::Trace(args) => ExitCode::from(tollgate::trace_command(&args)),
    }
}

/// `tollgate serve`: a runtime for the server, gone once it has drained.
fn serve_command(options: ServeOptions) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(&format_args!("cannot start the runtime: {e}"), 1),
    };
    let served = runtime.block_on(tollgate::serve(options));
    // Everything has drained ("tollgate stopped"): nothing left on
    // the runtime is worth waiting for.
    runtime.shutdown_background();
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => fail(&message, 1),
    }
}

/// `tollgate replay`: stdin's trace decided onto stdout (and drawn into
/// `plot`); exit 2 when it stopped, 3 when it skipped a bad line.
fn replay_command(
    config: &Path,
    target: &ReplayStore,
    options: ReplayOptions,
    summary: bool,
    plot: Option<&Path>,
) -> ExitCode {
    let policies = match ServeConfig::load_policies(config) {
        Ok(loaded) => tollgate::replay_policies(&loaded),
        Err(message) => return fail(&message, 2),
    };
    let picture_file = match plot.map(PictureFile::create).transpose() {
        Ok(file) => file,
        Err(message) => return fail(&message, 2),
    };
    let mut picture = plot.map(|_| tollgate::Plot::new(&policies));
    let mut watch = |seen: &tollgate::Seen<'_>| {
        if let Some(picture) = picture.as_mut() {
            picture.see(seen);
        }
    };
    let stdin = io::stdin().lock();
    let stdout = io::BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let stderr = io::stderr();
    let replayed = match tollgate::replay_trace(
        &policies, target, options, stdin, stdout, &stderr, &mut watch,
    ) {
        Ok(replayed) => replayed,
        Err(ReplayError::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => {
            PictureFile::abandon(picture_file);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            PictureFile::abandon(picture_file);
            return fail(&e, 2);
        }
    };
    if summary {
        let _ = write!(stderr.lock(), "{}", replayed.summary);
    }
    if let (Some(file), Some(picture)) = (picture_file, picture)
        && let Err(message) = file.write(&picture.svg())
    {
        return fail(&message, 2);
    }
    if replayed.skipped > 0 {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}

/// `tollgate compare`: the table (or JSON) on stdout, the picture into
/// `plot`; exit 2 when the comparison could not be made.
fn compare_command(
    options: &tollgate::CompareOptions,
    plot: Option<&Path>,
    json: bool,
) -> ExitCode {
    let picture_file = match plot.map(PictureFile::create).transpose() {
        Ok(file) => file,
        Err(message) => return fail(&message, 2),
    };
    let compared = match tollgate::compare(options) {
        Ok(compared) => compared,
        Err(e) => {
            PictureFile::abandon(picture_file);
            return fail(&e, 2);
        }
    };
    if let (Some(file), Some(svg)) = (picture_file, &compared.svg)
        && let Err(message) = file.write(svg)
    {
        return fail(&message, 2);
    }
    let text = if json {
        format!("{}\n", compared.json())
    } else {
        compared.table()
    };
    let _ = io::stdout().lock().write_all(text.as_bytes());
    ExitCode::SUCCESS
}

/// Where a picture goes: a file beside `path`, created before anything
/// is decided (so a path that cannot be written stops the run before it
/// starts), renamed over `path` once the picture is whole.
struct PictureFile {
    path: PathBuf,
    partial: PathBuf,
    file: std::fs::File,
}

impl PictureFile {
    fn create(path: &Path) -> Result<Self, String> {
        let mut partial = path.as_os_str().to_owned();
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        let file = std::fs::File::create(&partial)
            .map_err(|e| format!("--plot {}: {e}", path.display()))?;
        Ok(Self {
            path: path.to_owned(),
            partial,
            file,
        })
    }

    /// Writes `text` whole, then puts it in place.
    fn write(mut self, text: &str) -> Result<(), String> {
        let fault = |e: io::Error| format!("--plot {}: {e}", self.path.display());
        self.file.write_all(text.as_bytes()).map_err(fault)?;
        self.file.sync_all().map_err(fault)?;
        std::fs::rename(&self.partial, &self.path).map_err(fault)
    }

    /// Takes the unfinished file away, if any (a run that stopped).
    fn abandon(file: Option<Self>) {
        if let Some(file) = file {
            let _ = std::fs::remove_file(&file.partial);
        }
    }
}

/// `tollgate validate`: the config's hash and policies, then its warnings;
/// under `--strict` a warning fails it, and it is not said to be valid. It refuses what `serve` refuses at
/// start, the file descriptor limit included.
fn validate_command(load: &Load, strict: bool) -> ExitCode {
    let loaded = match load.load() {
        Ok(loaded) => loaded,
        Err(message) => return fail(&message, 1),
    };
    // What `serve` would refuse here, as it would say it, is a warning: the
    // file descriptors are this machine's, and a CI runner's limit is not
    // the server's (`--strict` fails on it).
    let descriptors = tollgate::raise_descriptor_limit(&loaded.server).err();
    let mut warnings = loaded.warnings();
    warnings.extend(
        descriptors.map(|refused| format!("on this machine serve would refuse: {refused}")),
    );
    // Under --strict a warned config is not valid: nothing on stdout says
    // it is.
    let failed = strict && !warnings.is_empty();
    if !failed {
        let mut out = io::stdout().lock();
        let _ = writeln!(
            out,
            "config {} is valid (hash {})",
            load.config.display(),
            loaded.hash
        );
        for serve in &loaded.policies {
            let _ = writeln!(out, "{}", tollgate::describe_policy(&serve.declared));
        }
    }
    let mut err = io::stderr().lock();
    for warning in &warnings {
        let _ = writeln!(err, "tollgate: warning: {warning}");
    }
    if failed {
        let count = warnings.len();
        let noun = if count == 1 { "warning" } else { "warnings" };
        return fail(
            &format_args!("{}: {count} {noun} under --strict", load.config.display()),
            1,
        );
    }
    ExitCode::SUCCESS
}

/// `tollgate explain`: each policy's scope, bound and failure mode (or
/// one policy's), as text or JSON.
fn explain_command(load: &Load, json: bool, policy: Option<&str>) -> ExitCode {
    let loaded = match load.load() {
        Ok(loaded) => loaded,
        Err(message) => return fail(&message, 1),
    };
    let path = load.config.display().to_string();
    let text = if let Some(name) = policy {
        match tollgate::explain_one(&loaded, &path, name, json) {
            Ok(text) => text,
            Err(unknown) => return fail(&format_args!("{path}: {unknown}"), 1),
        }
    } else if json {
        let mut text = tollgate::explain_json(&loaded, &path).to_string();
        text.push('\n');
        text
    } else {
        tollgate::explain(&loaded, &path)
    };
    let _ = io::stdout().lock().write_all(text.as_bytes());
    ExitCode::SUCCESS
}

/// `tollgate replay --format`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum ReplayFormat {
    Decision,
    Full,
}

fn fail(message: &dyn std::fmt::Display, code: u8) -> ExitCode {
    let _ = writeln!(io::stderr().lock(), "tollgate: {message}");
    ExitCode::from(code)
}
