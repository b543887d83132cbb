//! File descriptors: every connection is one, so `server.max_connections`
//! means nothing if the process may not open that many. Past its limit
//! `accept` fails, the proxy's calls time out, and a proxy that fails open
//! admits everything — the failure a limit on connections is there to stop.
//!
//! So `serve` raises the soft `RLIMIT_NOFILE` to the hard limit, the most
//! an unprivileged process may, and refuses to start when even that cannot
//! hold a `max_connections` the config sets and `SPARE` more: a limiter
//! that cannot keep its bound is better stopped at start than found out
//! under a flood. The default `max_connections`, which nobody chose, is
//! lowered to what the limit holds instead (with a warning), so the same
//! config starts on a machine with a small hard limit. `validate` warns of
//! what `serve` would refuse on the machine it runs on, without failing:
//! a CI runner's limit is not the server's.

use crate::config::{DEFAULT_MAX_CONNECTIONS, ServerSettings};

/// Descriptors kept beyond `max_connections` for everything else the
/// process opens: listeners, Redis connections (one per worker lane and
/// node), each worker runtime's event descriptors, the trace file, the
/// config file on reload.
pub const SPARE: u64 = 512;

/// The descriptors this process may open after [`raise_descriptor_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptors {
    /// The soft limit now in force.
    pub soft: u64,
    /// The hard limit, above which only a privileged process may raise it.
    pub hard: u64,
    /// What `max_connections` and `SPARE` need.
    pub needed: u64,
    /// The connections this process may hold: `max_connections`, or the
    /// default lowered to fit the limit.
    pub max_connections: usize,
}

impl Descriptors {
    /// Whether the default `max_connections` was lowered to fit.
    pub fn lowered(&self, server: &ServerSettings) -> bool {
        self.max_connections < server.max_connections
    }
}

/// Why the process cannot keep `server.max_connections`.
#[derive(Debug, thiserror::Error)]
pub enum DescriptorError {
    /// The limit is below what the connections need.
    #[error(
        "server.max_connections {max_connections} needs {needed} file descriptors ({SPARE} more for listeners, stores and files), but this process may open only {soft} (RLIMIT_NOFILE soft {soft}, hard {hard}): past it connections are not accepted and a proxy's calls time out; raise the limit (ulimit -n, systemd LimitNOFILE=, docker run --ulimit nofile=) or lower server.max_connections to at most {most}"
    )]
    TooFew {
        /// `server.max_connections`.
        max_connections: usize,
        /// What they need.
        needed: u64,
        /// The soft limit after raising it.
        soft: u64,
        /// The hard limit.
        hard: u64,
        /// The most `max_connections` the limit allows.
        most: u64,
    },
    /// The limit could not be read or raised.
    #[error("cannot read or raise RLIMIT_NOFILE: {0}")]
    Limit(#[from] std::io::Error),
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (when the hard limit
/// is unlimited, to what `server` needs), then checks that it holds
/// `max_connections` and `SPARE`, lowering the default to fit. The
/// process's own limit: call it where `serve` runs.
pub fn raise_descriptor_limit(server: &ServerSettings) -> Result<Descriptors, DescriptorError> {
    let needed = (server.max_connections as u64).saturating_add(SPARE);
    // An unlimited hard limit cannot be a soft one on Linux (the kernel
    // caps it at fs.nr_open): ask for what is needed instead.
    if rlimit::increase_nofile_limit(u64::MAX).is_err() {
        rlimit::increase_nofile_limit(needed)?;
    }
    let (soft, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE)?;
    let most = soft.saturating_sub(SPARE);
    if soft < needed && server.max_connections == DEFAULT_MAX_CONNECTIONS && most > 0 {
        return Ok(Descriptors {
            soft,
            hard,
            needed,
            max_connections: usize::try_from(most).unwrap_or(usize::MAX),
        });
    }
    if soft < needed {
        return Err(DescriptorError::TooFew {
            max_connections: server.max_connections,
            needed,
            soft,
            hard,
            most,
        });
    }
    Ok(Descriptors {
        soft,
        hard,
        needed,
        max_connections: server.max_connections,
    })
}
