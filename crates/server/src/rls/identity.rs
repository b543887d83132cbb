//! A descriptor's identity. A rule bound to a tollgate policy keys by that
//! policy's identity rules, through the one identity code every door calls
//! ([`crate::identity`]): an entry named after one of the policy's parts
//! (`client_ip`, which Envoy's `remote_address` action also names;
//! `api_key`; `bearer`; a header part's lower-cased header name; `method`,
//! `path`, `host`…) is shaped as forward auth shapes that part, so an
//! address is its network, a secret only its keyed hash, and an empty value
//! is refused. Unbound rules keep envoyproxy/ratelimit's own namespace.

use std::borrow::Cow;

use tollgate_core::{Identity, SecretHasher};

use super::wire::Entry;
use crate::config::{IdentityPart, ServePolicy};
use tollgate_config::{ComposeFault, PartFault, Told, compose, shape_part};

/// Why a descriptor has no identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum IdentityFault {
    /// What the client sent cannot key a budget (an empty part, a
    /// `client_ip` that is no address, entries over `server.max_key_bytes`):
    /// answered over the limit, never an error Envoy could fail open on.
    Refused(String),
    /// The descriptor itself is malformed (a key given twice): Envoy's
    /// configuration, not the client, wrote it.
    Invalid(String),
}

/// The identity of a descriptor matched by a rule bound to `policy`: the
/// composite of its entries, each named after the policy's part it names
/// and shaped by that part's rule (`share_threshold` wildcards put their
/// pattern in place of the value); an entry naming no part keys as it is,
/// refused when empty. The domain is not part of it: the policy is one
/// budget whichever door asks.
pub(super) fn bound_identity(
    policy: &ServePolicy,
    entries: &[Entry<'_>],
    shared: Option<&[Option<&str>]>,
    hasher: Option<&SecretHasher>,
    max_bytes: usize,
) -> Result<Identity, IdentityFault> {
    let name = policy.policy.name();
    let mut values: Vec<(&str, Cow<'_, str>)> = Vec::with_capacity(entries.len());
    for (k, entry) in entries.iter().enumerate() {
        let part = policy.identity.iter().find(|p| names(p, entry.key));
        let pattern = shared.and_then(|s| s.get(k)).copied().flatten();
        let value = match (part, pattern) {
            (_, Some(pattern)) => Cow::Borrowed(pattern),
            (Some(part), None) => shape_part(policy, part, Some(Told::Text(entry.value)), hasher)
                .map_err(|fault| {
                let part = part.name();
                IdentityFault::Refused(match fault {
                    PartFault::Missing => {
                        format!("policy {name}: identity part {part} is empty")
                    }
                    PartFault::NotAnAddress(_) => {
                        format!("policy {name}: identity part {part} is not an IP address")
                    }
                    PartFault::NoHasher => "no identity hashing key is configured".to_owned(),
                })
            })?,
            (None, None) if entry.value.trim().is_empty() => {
                return Err(IdentityFault::Refused(format!(
                    "policy {name}: entries[{k}] has an empty value"
                )));
            }
            (None, None) => Cow::Borrowed(entry.value),
        };
        values.push((part.map_or(entry.key, IdentityPart::name), value));
    }
    compose(values.iter().map(|(n, v)| (*n, v.as_ref())), max_bytes).map_err(|fault| match fault {
        ComposeFault::Parts(e) => IdentityFault::Invalid(e.to_string()),
        ComposeFault::TooLong(bytes) => IdentityFault::Refused(too_long(bytes, max_bytes)),
    })
}

/// Whether descriptor key `key` names `part`: its name in any case, and
/// for `client_ip` also `remote_address`, the key Envoy's
/// `remote_address` action always writes.
fn names(part: &IdentityPart, key: &str) -> bool {
    part.name().eq_ignore_ascii_case(key)
        || (matches!(part, IdentityPart::ClientIp(_)) && key.eq_ignore_ascii_case("remote_address"))
}

fn too_long(bytes: usize, max_bytes: usize) -> String {
    format!(
        "the descriptor's entries take {bytes} bytes; at most {max_bytes} are accepted (server.max_key_bytes)"
    )
}

/// A descriptor's entries, each `share_threshold` wildcard's pattern in
/// place of its entry's value.
fn with_shared<'a>(
    entries: impl Iterator<Item = (&'a str, &'a str)>,
    shared: Option<&'a [Option<&'a str>]>,
) -> impl Iterator<Item = (&'a str, &'a str)> {
    entries.enumerate().map(move |(i, (key, value))| {
        let value = shared
            .and_then(|s| s.get(i))
            .copied()
            .flatten()
            .unwrap_or(value);
        (key, value)
    })
}

/// The identity of a descriptor matched by an unbound rule (or carrying
/// its own `limit`): the domain and every entry, each length-prefixed so
/// no two descriptors share one (`share_threshold` wildcards put their
/// pattern in place of the value). Entries over `max_bytes` are refused.
pub(super) fn descriptor_identity<'a>(
    domain: &str,
    entries: impl Iterator<Item = (&'a str, &'a str)>,
    shared: Option<&'a [Option<&'a str>]>,
    max_bytes: usize,
) -> Result<Identity, IdentityFault> {
    let mut text = String::with_capacity(64);
    let mut digits = itoa::Buffer::new();
    // `{len}:{text}`, written piece by piece (no formatting machinery on
    // the hot path).
    let mut prefixed = |text: &mut String, piece: &str| {
        text.push_str(digits.format(piece.len()));
        text.push(':');
        text.push_str(piece);
    };
    text.push_str("rls:");
    prefixed(&mut text, domain);
    for (key, value) in with_shared(entries, shared) {
        text.push('|');
        prefixed(&mut text, key);
        prefixed(&mut text, value);
    }
    if text.len() > max_bytes {
        return Err(IdentityFault::Refused(too_long(text.len(), max_bytes)));
    }
    Ok(Identity::value(&text))
}

#[cfg(test)]
mod tests;
