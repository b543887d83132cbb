//! An address to listen on as an operator writes it: `127.0.0.1:8080`,
//! `[::1]:8080` or `localhost:8080`. A host name is kept as written and
//! resolved when the listener binds, so `--listen`, `TOLLGATE_LISTEN` and
//! `server.listen` accept the same spellings and every refusal names the
//! value.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use serde::Deserialize;

/// `HOST:PORT`, checked for shape (not resolved) when it is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddress(String);

/// Why a text is not an address to listen on; the message quotes it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not an address to listen on: expected HOST:PORT (e.g. 127.0.0.1:8080, localhost:8080, [::1]:8080)"
)]
pub struct BadListenAddress(pub String);

impl ListenAddress {
    /// The address as written, which `TcpListener::bind` resolves.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<SocketAddr> for ListenAddress {
    fn from(addr: SocketAddr) -> Self {
        Self(addr.to_string())
    }
}

impl FromStr for ListenAddress {
    type Err = BadListenAddress;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.parse::<SocketAddr>().is_ok() {
            return Ok(Self(text.to_owned()));
        }
        let bad = || BadListenAddress(text.to_owned());
        let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
        port.parse::<u16>().map_err(|_| bad())?;
        // A DNS name: labels of letters, digits and '-', dot-separated.
        let is_name = !host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if !is_name {
            return Err(bad());
        }
        Ok(Self(text.to_owned()))
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ListenAddress {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_addresses_and_host_names_are_accepted_as_written() {
        for text in [
            "127.0.0.1:8080",
            "[::1]:0",
            "localhost:9000",
            "tollgate-1.internal:80",
        ] {
            assert_eq!(
                text.parse::<ListenAddress>().map(|a| a.to_string()),
                Ok(text.to_owned())
            );
        }
    }

    #[test]
    fn a_text_without_a_port_or_with_a_bad_host_is_refused_naming_it() {
        for text in [
            "localhost",
            "localhost:http",
            ":8080",
            "a b:80",
            "host:70000",
            "",
        ] {
            assert_eq!(
                text.parse::<ListenAddress>(),
                Err(BadListenAddress(text.to_owned()))
            );
        }
        assert_eq!(
            BadListenAddress("localhost".into()).to_string(),
            "\"localhost\" is not an address to listen on: expected HOST:PORT (e.g. 127.0.0.1:8080, localhost:8080, [::1]:8080)"
        );
    }
}
