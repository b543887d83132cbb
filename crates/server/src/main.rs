//! `tollgate`: a thin binary over the core and the stores. Each subcommand
//! is an adapter that translates its input into core calls and back.

mod replay;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// Decide a trace of events (JSON lines on stdin) at their own times;
    /// write one decision a line to stdout.
    Replay {
        /// The policy config (YAML).
        #[arg(long)]
        config: PathBuf,
        /// The most keys the memory store keeps before evicting.
        #[arg(long, default_value_t = 10_000_000)]
        max_keys: usize,
    },
    /// Check a config and print its policies; exit 1 when it is invalid.
    Validate {
        /// The policy config (YAML).
        #[arg(long)]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Replay { config, max_keys } => {
            let policies = match load_policies(&config) {
                Ok(p) => p,
                Err(message) => return fail(&message, 2),
            };
            let stdin = io::stdin().lock();
            let stdout = io::BufWriter::with_capacity(1 << 16, io::stdout().lock());
            match replay::run(&policies, max_keys, stdin, stdout) {
                Ok(_) => ExitCode::SUCCESS,
                Err(replay::ReplayError::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => {
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e.to_string(), 2),
            }
        }
        Command::Validate { config } => match load_policies(&config) {
            Ok(policies) => {
                let mut out = io::stdout().lock();
                for policy in policies.iter() {
                    let _ = writeln!(out, "{}", describe_policy(policy));
                }
                ExitCode::SUCCESS
            }
            Err(message) => fail(&message, 1),
        },
    }
}

fn load_policies(path: &std::path::Path) -> Result<tollgate_core::PolicySet, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read config {}: {e}", path.display()))?;
    tollgate_core::PolicySet::from_yaml(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn describe_policy(policy: &tollgate_core::Policy) -> String {
    use tollgate_core::{Limits, format_duration_ms};
    match policy.limits() {
        Limits::TokenBucket(r) | Limits::Gcra(r) => format!(
            "{}: {} capacity {} refill {} per {}",
            policy.name(),
            policy.algorithm(),
            r.capacity(),
            r.tokens(),
            format_duration_ms(r.per_ms())
        ),
        Limits::FixedWindow(w) | Limits::SlidingWindow(w) | Limits::SlidingLog(w) => format!(
            "{}: {} limit {} per {}",
            policy.name(),
            policy.algorithm(),
            w.limit(),
            format_duration_ms(w.window_ms())
        ),
    }
}

fn fail(message: &str, code: u8) -> ExitCode {
    let _ = writeln!(io::stderr().lock(), "tollgate: {message}");
    ExitCode::from(code)
}
