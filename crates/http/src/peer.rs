//! Who is at the other end of a connection: an address, or the proxy on
//! `server.proxy_socket`, which only the proxy can reach and so is trusted
//! by construction. One definition of "trusted proxy" for every layer: the
//! acceptor (which slots a peer may take) and forward auth (whose headers
//! are believed).

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

/// The peer of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// A TCP peer: trusted only when `server.trusted_proxies` lists it.
    Addr(SocketAddr),
    /// A connection on `server.proxy_socket` (a unix socket): the proxy, with
    /// no address of its own to speak of.
    ProxySocket,
}

impl Peer {
    /// Whether this peer is a trusted proxy under `trusted_proxies`.
    pub fn is_trusted(&self, trusted_proxies: &[IpNet]) -> bool {
        match self {
            Peer::Addr(addr) => is_trusted(trusted_proxies, &addr.ip()),
            Peer::ProxySocket => true,
        }
    }

    /// The peer's address; `None` on the proxy socket.
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Peer::Addr(addr) => Some(addr.ip()),
            Peer::ProxySocket => None,
        }
    }
}

impl From<SocketAddr> for Peer {
    fn from(addr: SocketAddr) -> Self {
        Peer::Addr(addr)
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Addr(addr) => write!(f, "{addr}"),
            Peer::ProxySocket => f.write_str("the proxy socket"),
        }
    }
}

/// Whether a trusted proxy is at `ip`, written either way: an IPv4-mapped
/// address (`::ffff:10.0.0.7`, a dual-stack socket's peer) matches an IPv4
/// network, and still matches a network written mapped.
pub fn is_trusted(trusted: &[IpNet], ip: &IpAddr) -> bool {
    let canonical = ip.to_canonical();
    trusted
        .iter()
        .any(|net| net.contains(ip) || net.contains(&canonical))
}
