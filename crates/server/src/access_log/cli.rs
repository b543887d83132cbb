//! `tollgate trace`'s command line: its flags, the config or policies
//! they name, the identity key from the environment, and the run from
//! a file or stdin to stdout with its count on stderr.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use tollgate_config::DEFAULT_IDENTITY_KEY_ENV;

use super::{IdentitySource, LogFormat, Policies, TraceError, TraceOptions, trace_from_log};
use crate::config::{ServeConfig, hashed_series};

/// What a bad line does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnBadLine {
    /// Stop at it (exit 2), naming its line.
    Fail,
    /// Report it on stderr with its line number, go on, and exit 3.
    Skip,
}

/// `tollgate trace`: an access log as a trace for `tollgate replay`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The log's format: `nginx-combined` (nginx's default `combined`,
    /// optionally with quoted fields after it, see --nginx-fields),
    /// `envoy-json` (Envoy's JSON access log) or `jsonl` (any JSON lines).
    #[arg(long, value_enum)]
    pub from: LogFormat,
    /// Where the identity is read: `field:NAME` (nginx: remote_addr,
    /// remote_user, http_referer, http_user_agent or a --nginx-fields
    /// name; JSON: a top-level key) or `header:NAME` (nginx: the field
    /// `http_<name>`, dashes as underscores; JSON: the key NAME in lower
    /// case). Keys are written hashed with the identity key, as
    /// `server.trace` writes them.
    #[arg(long)]
    pub identity: IdentitySource,
    /// Check every line against this policy (repeat for several, decided
    /// together); with --config, only these of its policies.
    #[arg(long = "policy", value_name = "NAME")]
    pub policies: Vec<String>,
    /// Check each line against the policies of this config whose `match`
    /// takes its request (method, path, host), each at its own cost, as
    /// forward auth picks them; a line none takes is left out.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The cost of each check with --policy, without --config (whose
    /// policies cost what their `cost` says) [default: 1].
    #[arg(long)]
    pub cost: Option<u64>,
    /// JSON formats: the field holding the time, RFC 3339 text or a
    /// number of milliseconds since 1970 [default: start_time for
    /// envoy-json; required for jsonl].
    #[arg(long)]
    pub time_field: Option<String>,
    /// nginx: the names of the quoted fields the log_format writes after
    /// combined's (`"$http_x_tenant" "$host"` is `http_x_tenant,host`).
    #[arg(long, value_delimiter = ',')]
    pub nginx_fields: Vec<String>,
    /// `fail` (stop, exit 2) or `skip` (report on stderr, go on, exit 3).
    #[arg(long, value_enum, default_value_t = OnBadLine::Fail)]
    pub on_bad_line: OnBadLine,
    /// The log [default: stdin].
    pub file: Option<PathBuf>,
}

/// Runs `tollgate trace`; its exit status: 0, 2 when it stopped, 3 when
/// it skipped a bad line.
pub fn trace_command(args: &TraceArgs) -> u8 {
    let stderr = io::stderr();
    let fail = |message: &dyn std::fmt::Display| {
        let _ = writeln!(stderr.lock(), "tollgate: {message}");
        2
    };
    let options = match options(args) {
        Ok(options) => options,
        Err(message) => return fail(&message),
    };
    let input: Box<dyn BufRead> = match &args.file {
        None => Box::new(io::stdin().lock()),
        Some(path) => match File::open(path) {
            Ok(file) => Box::new(BufReader::with_capacity(1 << 16, file)),
            Err(e) => return fail(&format_args!("{}: {e}", path.display())),
        },
    };
    let stdout = io::BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let traced = match trace_from_log(&options, input, stdout, &stderr) {
        Ok(traced) => traced,
        Err(TraceError::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => return 0,
        Err(e) => return fail(&e),
    };
    let _ = writeln!(
        stderr.lock(),
        "tollgate: {} lines read, {} events written, {} matched no policy, {} bad lines skipped, {} earlier than the line before (written at its time)",
        traced.lines,
        traced.events,
        traced.unmatched,
        traced.skipped,
        traced.moved
    );
    if traced.skipped > 0 { 3 } else { 0 }
}

/// The run's options from its flags, the config and the environment.
fn options(args: &TraceArgs) -> Result<TraceOptions, String> {
    let time_field = match (args.from, &args.time_field) {
        (_, Some(name)) => name.clone(),
        (LogFormat::EnvoyJson, None) => "start_time".to_owned(),
        (LogFormat::Jsonl, None) => {
            return Err("--from jsonl needs --time-field NAME (the field holding the time)".into());
        }
        (LogFormat::NginxCombined, None) => String::new(),
    };
    if args.from != LogFormat::NginxCombined && !args.nginx_fields.is_empty() {
        return Err("--nginx-fields is for --from nginx-combined".into());
    }
    if args.from == LogFormat::NginxCombined && args.time_field.is_some() {
        return Err("--time-field is for JSON logs: nginx's time is $time_local".into());
    }
    let (policies, key_env) = match &args.config {
        Some(_) if args.cost.is_some() => {
            return Err(
                "--cost is for --policy without --config: a config's policies cost what their `cost` says"
                    .into(),
            );
        }
        Some(path) => {
            let config = ServeConfig::load(path).map_err(|e| e.to_string())?;
            let mut chosen = Vec::new();
            for name in &args.policies {
                if config.policies.iter().all(|p| p.policy.name() != name) {
                    return Err(format!("{}: no policy {name:?}", path.display()));
                }
            }
            for serve in &config.policies {
                let named = args.policies.is_empty()
                    || args.policies.iter().any(|n| n == serve.policy.name());
                // Forward auth takes no permits, and neither does a log.
                if named && !serve.declared.limits().holds_permits() {
                    chosen.push(serve.clone());
                }
            }
            (
                Policies::Matched(chosen),
                config.server.identity_key_env.clone(),
            )
        }
        None if args.policies.is_empty() => {
            return Err("name the policies: --policy NAME, or --config FILE to match them".into());
        }
        None => (
            Policies::Named {
                names: args.policies.clone(),
                cost: args.cost.unwrap_or(1),
            },
            DEFAULT_IDENTITY_KEY_ENV.to_owned(),
        ),
    };
    let key = std::env::var(&key_env)
        .ok()
        .filter(|k| !k.is_empty())
        .ok_or_else(|| {
            format!(
                "the trace's keys are the identities' keyed hash, as server.trace writes them, so the environment variable {key_env} must hold the identity key"
            )
        })?;
    let keys = hashed_series(&key_env, &key).map_err(|e| e.to_string())?;
    Ok(TraceOptions {
        from: args.from,
        identity: args.identity.clone(),
        policies,
        time_field,
        nginx_fields: args.nginx_fields.clone(),
        skip_bad_lines: args.on_bad_line == OnBadLine::Skip,
        keys,
    })
}
