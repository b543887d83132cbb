//! Redis keys: `<prefix>:<policy>:<algorithm>:{<identity>}` (docs/design.md §4).
//!
//! The braces are a Cluster hash tag, so every policy of one identity lands
//! in one slot and a multi-policy decision stays one atomic script. What
//! stands inside them can hold no brace: the identity's bytes are escaped
//! (`%XX` for `%`, `{`, `}` and control bytes), and long identities are
//! replaced by a fixed-length hash. The encoding is injective:
//! - a single value: its escaped bytes (`tenant-a`);
//! - a composite: `%P` then the escaped bytes of its injective encoding;
//! - longer than [`MAX_TAG`] bytes either way: `%H` then 32 hex digits of
//!   BLAKE3 over the identity's bytes (128 bits);
//! - the empty value: `%E` (an empty tag would hash the whole key instead).
//!
//! An escape is `%` and two hex digits for one of the bytes 00–1F, 25, 7B,
//! 7D, 7F, so it never starts `%P`, `%H` or `%E`, and the forms cannot meet.

use tollgate_core::{Identity, Policy};

/// The longest identity kept readable in a key; longer ones are hashed.
pub const MAX_TAG: usize = 64;

/// The first byte of [`Identity::as_bytes`]: a single value or a composite.
const VALUE: u8 = 0;

/// The key of `policy`'s state for `identity`.
pub fn state_key(prefix: &str, policy: &Policy, identity: &Identity) -> Vec<u8> {
    let name = policy.name();
    let algorithm = policy.algorithm().as_str();
    let mut key = Vec::with_capacity(prefix.len() + name.len() + algorithm.len() + MAX_TAG + 8);
    key.extend_from_slice(prefix.as_bytes());
    key.push(b':');
    key.extend_from_slice(name.as_bytes());
    key.push(b':');
    key.extend_from_slice(algorithm.as_bytes());
    key.extend_from_slice(b":{");
    push_tag(&mut key, identity.as_bytes());
    key.push(b'}');
    key
}

/// The key of the request ids recorded with `state_key` as a call's first
/// check: the same hash tag, so the same Cluster slot and script call.
pub fn record_key(state_key: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(state_key.len() + 4);
    key.extend_from_slice(state_key);
    key.extend_from_slice(b":ids");
    key
}

/// Appends `identity`'s tag (escaped, or hashed when long): what stands
/// inside a state key's braces, and at the end of a ledger entry's key.
pub(super) fn push_tag(key: &mut Vec<u8>, identity: &[u8]) {
    let start = key.len();
    match identity.split_first() {
        Some((&VALUE, [])) => key.extend_from_slice(b"%E"),
        Some((&VALUE, value)) => escape(key, value),
        Some((_, parts)) => {
            key.extend_from_slice(b"%P");
            escape(key, parts);
        }
        None => key.extend_from_slice(b"%E"),
    }
    if key.len() - start > MAX_TAG {
        key.truncate(start);
        key.extend_from_slice(b"%H");
        let digest = blake3::hash(identity);
        for byte in &digest.as_bytes()[..16] {
            key.push(HEX[usize::from(byte >> 4)]);
            key.push(HEX[usize::from(byte & 0xf)]);
        }
    }
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

fn escape(key: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        if b < 0x20 || matches!(b, b'%' | b'{' | b'}' | 0x7f) {
            key.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]);
        } else {
            key.push(b);
        }
    }
}

/// The Redis Cluster slot of a key: CRC16 (XMODEM) of its hash tag, or of
/// the whole key when it has none, modulo 16384.
pub fn slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(hashed) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
#[path = "key/tests.rs"]
mod tests;
