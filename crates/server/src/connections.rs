//! Who may hold a connection, decided at accept before a byte is read:
//! `server.max_connections` in all (every listener together), at most
//! `max_connections_per_peer` from one peer that is not a trusted proxy,
//! and the last `proxy_reserved_connections` of them for trusted proxies
//! alone — so a flood from anywhere else can fill what it may, but never
//! make tollgate refuse the proxy that asks it (which would fail open).
//!
//! A slot is held by the connection's task and given back when it ends.
//! The per-peer map holds only peers with an open connection, so it is
//! bounded by `max_connections`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::metrics::gauge::Gauge;

use crate::config::ServerSettings;

/// Why a connection was refused: each is a label of
/// `tollgate_connections_refused_total` (docs/metrics.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// `max_connections` are open.
    Full,
    /// Only the slots kept for trusted proxies are left.
    ProxyReserve,
    /// This peer holds `max_connections_per_peer` already.
    PerPeer,
}

impl Refused {
    /// The rule's name, as the metric labels it.
    pub(crate) fn rule(self) -> &'static str {
        match self {
            Refused::Full => "max_connections",
            Refused::ProxyReserve => "proxy_reserved_connections",
            Refused::PerPeer => "max_connections_per_peer",
        }
    }
}

/// Whom a connection is from, as the gate counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Caller {
    /// A trusted proxy: no per-peer bound, and the reserve is its own.
    Proxy,
    /// Anyone else, by address.
    Other(IpAddr),
}

/// The bounds, read at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnectionLimits {
    /// `server.max_connections`.
    pub(crate) max: usize,
    /// `server.max_connections_per_peer`.
    pub(crate) per_peer: usize,
    /// Slots only trusted proxies may take ([`ServerSettings::reserved_of`]).
    pub(crate) reserved: usize,
}

impl ConnectionLimits {
    /// The bounds `server` sets.
    pub(crate) fn of(server: &ServerSettings) -> Self {
        Self::at_most(server, server.max_connections)
    }

    /// The bounds `server` sets, with `max` connections in all (the
    /// default lowered to fit the file descriptors, [`crate::descriptors`]).
    pub(crate) fn at_most(server: &ServerSettings, max: usize) -> Self {
        Self {
            max,
            per_peer: server.max_connections_per_peer,
            reserved: server.reserved_of(max),
        }
    }
}

/// The open connections of every listener, counted.
#[derive(Debug)]
pub(crate) struct ConnectionGate {
    limits: ConnectionLimits,
    counts: Mutex<Counts>,
    /// `tollgate_open_connections`: trusted proxies' and everyone else's.
    open_proxy: Gauge,
    open_other: Gauge,
}

#[derive(Debug, Default)]
struct Counts {
    open: usize,
    /// Open connections of each peer that is not a trusted proxy; a peer
    /// leaves when its last one closes.
    by_peer: HashMap<PeerKey, usize>,
}

/// What one peer is counted as: an IPv4 address (a mapped one as itself),
/// or an IPv6 /64 — one host's share of addresses, which it may rotate
/// through freely.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct PeerKey(IpAddr);

impl PeerKey {
    fn of(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Self(IpAddr::V4(v4)),
            IpAddr::V6(v6) => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                Self(IpAddr::V6(Ipv6Addr::from(prefix)))
            }
        }
    }
}

/// One admitted connection's place; dropping it gives the place back.
#[derive(Debug)]
pub(crate) struct Slot {
    gate: Arc<ConnectionGate>,
    peer: Option<PeerKey>,
}

impl ConnectionGate {
    /// A gate with no connection open, showing how many are open in
    /// `open_proxy` and `open_other`.
    pub(crate) fn new(limits: ConnectionLimits, open_proxy: Gauge, open_other: Gauge) -> Self {
        Self {
            limits,
            counts: Mutex::new(Counts::default()),
            open_proxy,
            open_other,
        }
    }

    /// The same gate (and gauges) under other bounds, before any
    /// connection is open.
    pub(crate) fn with_limits(&self, limits: ConnectionLimits) -> Self {
        Self::new(limits, self.open_proxy.clone(), self.open_other.clone())
    }

    /// A slot for a connection from `caller`, or the rule that refuses it.
    pub(crate) fn admit(self: &Arc<Self>, caller: Caller) -> Result<Slot, Refused> {
        let limits = self.limits;
        let mut counts = self.lock();
        if counts.open >= limits.max {
            return Err(Refused::Full);
        }
        let peer = match caller {
            Caller::Proxy => None,
            Caller::Other(ip) => {
                if counts.open >= limits.max.saturating_sub(limits.reserved) {
                    return Err(Refused::ProxyReserve);
                }
                let key = PeerKey::of(ip);
                let held = counts.by_peer.entry(key).or_insert(0);
                if *held >= limits.per_peer {
                    return Err(Refused::PerPeer);
                }
                *held += 1;
                Some(key)
            }
        };
        counts.open += 1;
        self.gauge(peer.is_some()).inc();
        Ok(Slot {
            gate: Arc::clone(self),
            peer,
        })
    }

    /// Connections open now.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.lock().open
    }

    fn gauge(&self, other: bool) -> &Gauge {
        if other {
            &self.open_other
        } else {
            &self.open_proxy
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        // The counts stay consistent under a panic elsewhere: each update
        // is complete before the guard drops.
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.gate.lock();
        counts.open = counts.open.saturating_sub(1);
        self.gate.gauge(self.peer.is_some()).dec();
        if let Some(key) = self.peer
            && let Some(held) = counts.by_peer.get_mut(&key)
        {
            *held -= 1;
            if *held == 0 {
                counts.by_peer.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(max: usize, per_peer: usize, reserved: usize) -> Arc<ConnectionGate> {
        let limits = ConnectionLimits {
            max,
            per_peer,
            reserved,
        };
        Arc::new(ConnectionGate::new(
            limits,
            Gauge::default(),
            Gauge::default(),
        ))
    }

    fn other(text: &str) -> Caller {
        Caller::Other(text.parse().expect("an address"))
    }

    #[test]
    fn a_peer_past_its_cap_is_refused_while_another_is_admitted() {
        let gate = gate(10, 2, 0);
        let held: Vec<Slot> = (0..2)
            .map(|_| gate.admit(other("192.0.2.1")).expect("admitted"))
            .collect();
        assert_eq!(gate.admit(other("192.0.2.1")).err(), Some(Refused::PerPeer));
        // The same address mapped into IPv6 is the same peer.
        assert_eq!(
            gate.admit(other("::ffff:192.0.2.1")).err(),
            Some(Refused::PerPeer)
        );
        let _second = gate.admit(other("192.0.2.2")).expect("another peer");
        drop(held);
        let _again = gate.admit(other("192.0.2.1")).expect("its slots came back");
        assert_eq!(gate.open(), 2);
    }

    #[test]
    fn an_ipv6_peer_is_its_slash_64() {
        let gate = gate(10, 1, 0);
        let _one = gate.admit(other("2001:db8::1")).expect("admitted");
        assert_eq!(
            gate.admit(other("2001:db8::ffff:2")).err(),
            Some(Refused::PerPeer)
        );
        let _other = gate.admit(other("2001:db8:0:1::1")).expect("another /64");
    }

    #[test]
    fn the_reserve_is_for_proxies_alone_and_max_binds_them_too() {
        let gate = gate(4, 10, 2);
        let _a = gate.admit(other("192.0.2.1")).expect("admitted");
        let _b = gate.admit(other("192.0.2.2")).expect("admitted");
        assert_eq!(
            gate.admit(other("192.0.2.3")).err(),
            Some(Refused::ProxyReserve)
        );
        let _p = gate.admit(Caller::Proxy).expect("the reserve");
        let q = gate.admit(Caller::Proxy).expect("the reserve");
        assert_eq!(gate.admit(Caller::Proxy).err(), Some(Refused::Full));
        assert_eq!(gate.admit(other("192.0.2.3")).err(), Some(Refused::Full));
        assert_eq!((gate.open_proxy.get(), gate.open_other.get()), (2, 2));
        drop(q);
        assert_eq!((gate.open_proxy.get(), gate.open_other.get()), (1, 2));
    }

    #[test]
    fn the_peer_map_forgets_a_peer_with_nothing_open() {
        let gate = gate(100, 5, 0);
        for i in 0..50u8 {
            drop(
                gate.admit(other(&format!("192.0.2.{i}")))
                    .expect("admitted"),
            );
        }
        assert_eq!(gate.open(), 0);
        assert!(gate.lock().by_peer.is_empty());
    }
}
