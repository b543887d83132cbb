//! The `server` settings that bound connections: how many in all, per
//! peer, kept for trusted proxies, how long a silent one is held, and the
//! proxy's own unix socket. docs/deploy.md says what a flood can and
//! cannot do under them.

use std::path::PathBuf;

use serde::Deserialize;
use tollgate_core::{ConfigError, node_path};

use super::ServerSettings;

/// Connections one peer that is not a trusted proxy may hold by default:
/// room for an application instance calling `/v1/check` over HTTP/1.1
/// with a thousand requests in flight (a store outage piles them up for
/// as long as the store's timeout), while one address takes at most a
/// twelfth of the untrusted share (12,288 of the default 16,384).
pub(super) const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 1024;
/// `server.max_connections` when the file names none. Only this default is
/// lowered to fit the file descriptors a process may open
/// ([`crate::descriptors`]); a value the file sets that does not fit is refused.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16_384;
/// A request head's deadline for such a peer by default: a client on a
/// network sends its head in well under a second; five is room for a slow
/// link, not for a socket held open on purpose.
pub(super) const DEFAULT_HEADER_TIMEOUT_MS: u64 = 5_000;
/// A trusted proxy's idle keep-alive connections are kept this long by
/// default: longer than nginx's upstream `keepalive_timeout` (60 s),
/// Traefik's (90 s) and Caddy's (2 m), so the proxy closes an idle
/// connection before tollgate does and never sends on one just closed.
pub(super) const DEFAULT_PROXY_IDLE_TIMEOUT_MS: u64 = 180_000;
/// `proxy_socket.mode` by default: the owner and its group (put the
/// proxy's user in tollgate's group), nobody else.
const DEFAULT_SOCKET_MODE: u32 = 0o660;

/// `server.proxy_socket`: a unix socket only the proxy reaches.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxySocket {
    /// The socket file, relative to the config file. A stale one left by a
    /// stopped tollgate is replaced; one another process listens on is not.
    pub path: PathBuf,
    /// Its permissions, in octal (`"0660"`): who may connect.
    #[serde(default = "default_mode", deserialize_with = "octal_mode")]
    pub mode: u32,
}

fn default_mode() -> u32 {
    DEFAULT_SOCKET_MODE
}

fn octal_mode<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let text = String::deserialize(d)?;
    let digits = text.strip_prefix("0o").unwrap_or(&text);
    u32::from_str_radix(digits, 8)
        .ok()
        .filter(|mode| *mode <= 0o777 && !digits.is_empty())
        .ok_or_else(|| {
            serde::de::Error::custom(format!(
                "proxy_socket.mode: {text:?} is not a file mode in octal (e.g. \"0660\")"
            ))
        })
}

impl ServerSettings {
    /// How many of `max` connections (`max_connections`, or its default
    /// lowered to fit the file descriptors) only trusted proxies may take:
    /// as configured, else a quarter; none when nobody is trusted (no
    /// `trusted_proxies`, no `proxy_socket`), as there is no one to keep
    /// them for. Always below `max`, so other peers keep a slot.
    pub(crate) fn reserved_of(&self, max: usize) -> usize {
        if self.trusted_proxies.is_empty() && self.proxy_socket.is_none() {
            return 0;
        }
        self.proxy_reserved_connections
            .unwrap_or(max / 4)
            .min(max.saturating_sub(1))
    }

    /// Refuses connection bounds that cannot serve.
    pub(super) fn validate_connections(&self) -> Result<(), ConfigError> {
        for (name, value) in [
            ("max_connections", self.max_connections as u64),
            (
                "max_connections_per_peer",
                self.max_connections_per_peer as u64,
            ),
            ("header_timeout_ms", self.header_timeout_ms),
            ("proxy_idle_timeout_ms", self.proxy_idle_timeout_ms),
        ] {
            if value == 0 {
                return Err(
                    ConfigError::Document(format!("server: {name} must be positive"))
                        .at(node_path!["server", name]),
                );
            }
        }
        if let Some(reserved) = self.proxy_reserved_connections
            && reserved >= self.max_connections
        {
            return Err(ConfigError::Document(format!(
                "server: proxy_reserved_connections {reserved} must be below max_connections {}: peers that are not trusted proxies need some",
                self.max_connections
            ))
            .at(node_path!["server", "proxy_reserved_connections"]));
        }
        if let Some(socket) = &self.proxy_socket
            && socket.path.as_os_str().is_empty()
        {
            return Err(
                ConfigError::Document("server: proxy_socket needs a path".to_owned())
                    .at(node_path!["server", "proxy_socket", "path"]),
            );
        }
        Ok(())
    }
}
