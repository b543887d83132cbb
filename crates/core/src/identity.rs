//! Identities and their key encoding. An identity is one value or a
//! composite of named parts; its encoding is injective (`a|b` + `c` never
//! equals `a` + `b|c`), so no two identities ever share a key.

use std::fmt;

use thiserror::Error;

mod label;
pub use label::LABEL_MAX_BYTES;

const TAG_VALUE: u8 = 0;
const TAG_COMPOSITE: u8 = 1;
const TAG_SHARD: u8 = 2;

/// Why a composite identity cannot be encoded without ambiguity.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum IdentityError {
    /// A composite with no parts would key every caller alike.
    #[error("identity has no parts")]
    Empty,
    /// A part name given twice has no single value to key by.
    #[error("identity part {} appears twice", crate::quote(.0))]
    DuplicatePart(String),
}

/// An encoded identity: the bytes a store keys state by.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identity {
    encoded: Vec<u8>,
}

impl Identity {
    /// A single value, e.g. a tenant name or a whole pre-built key.
    pub fn value(value: &str) -> Self {
        let mut encoded = Vec::with_capacity(1 + value.len());
        encoded.push(TAG_VALUE);
        encoded.extend_from_slice(value.as_bytes());
        Self { encoded }
    }

    /// Named parts, in any order: `{tenant: acme, route: /orders}` and
    /// `{route: /orders, tenant: acme}` are the same identity.
    pub fn composite<'a>(
        parts: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, IdentityError> {
        let mut parts = parts.into_iter();
        let first = parts.next().ok_or(IdentityError::Empty)?;
        // One part (the common case: a single header or claim) needs no
        // sorting and no list of its own: encoded in one allocation.
        let Some(second) = parts.next() else {
            return Ok(Self::encode_composite(&[first]));
        };
        let mut parts: Vec<(&str, &str)> = [first, second].into_iter().chain(parts).collect();
        parts.sort_unstable();
        if let Some(pair) = parts.windows(2).find(|p| p[0].0 == p[1].0) {
            return Err(IdentityError::DuplicatePart(pair[0].0.to_owned()));
        }
        Ok(Self::encode_composite(&parts))
    }

    /// Sorted, distinct named parts, encoded.
    fn encode_composite(parts: &[(&str, &str)]) -> Self {
        let len: usize = parts.iter().map(|(n, v)| n.len() + v.len() + 10).sum();
        let mut encoded = Vec::with_capacity(1 + len);
        encoded.push(TAG_COMPOSITE);
        for (name, value) in parts {
            put_length_prefixed(&mut encoded, name.as_bytes());
            put_length_prefixed(&mut encoded, value.as_bytes());
        }
        Self { encoded }
    }

    /// Shard `index` of this identity (a policy with `shards: N` splits each
    /// identity's limit over N keys): its own key, on its own hash tag, and
    /// never equal to any other identity or another shard of this one.
    pub fn shard(&self, index: u16) -> Self {
        let mut encoded = Vec::with_capacity(3 + self.encoded.len());
        encoded.push(TAG_SHARD);
        encoded.extend_from_slice(&index.to_be_bytes());
        encoded.extend_from_slice(&self.encoded);
        Self { encoded }
    }

    /// The injective encoding, for stores to build keys from.
    pub fn as_bytes(&self) -> &[u8] {
        &self.encoded
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Identity({})", String::from_utf8_lossy(&self.encoded))
    }
}

/// For people: the value, or `name=value` parts joined by `,`. Neither
/// injective nor bounded, unlike the encoding: never a key, and never a
/// metric label or a log field either ([`Identity::label`], a keyed hash).
impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some((&tag, mut rest)) = self.encoded.split_first() else {
            return Ok(());
        };
        if tag == TAG_SHARD
            && let Some((index, inner)) = rest.split_first_chunk::<2>()
        {
            let inner = Identity {
                encoded: inner.to_vec(),
            };
            return write!(f, "{inner} [shard {}]", u16::from_be_bytes(*index));
        }
        if tag == TAG_VALUE {
            return f.write_str(&String::from_utf8_lossy(rest));
        }
        let mut first = true;
        while let (Some(name), Some(value)) = (
            take_length_prefixed(&mut rest),
            take_length_prefixed(&mut rest),
        ) {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(
                f,
                "{}={}",
                String::from_utf8_lossy(name),
                String::from_utf8_lossy(value)
            )?;
        }
        Ok(())
    }
}

/// The inverse of [`put_length_prefixed`]; `None` at the end or on a
/// truncated field.
fn take_length_prefixed<'a>(input: &mut &'a [u8]) -> Option<&'a [u8]> {
    let mut len: usize = 0;
    let mut shift = 0;
    loop {
        let (&byte, rest) = input.split_first()?;
        *input = rest;
        len |= usize::from(byte & 0x7f).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    if input.len() < len {
        return None;
    }
    let (field, rest) = input.split_at(len);
    *input = rest;
    Some(field)
}

/// LEB128 length, then the bytes.
fn put_length_prefixed(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut len = bytes.len();
    loop {
        let low = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            out.push(low);
            break;
        }
        out.push(low | 0x80);
    }
    out.extend_from_slice(bytes);
}

/// Keyed hashing for secret identity parts (API keys, bearer tokens): the
/// raw secret is never stored or logged, only this digest. The key comes
/// from config or the environment and is never printed, not even by `Debug`.
#[derive(Clone)]
pub struct SecretHasher {
    key: [u8; 32],
}

impl SecretHasher {
    /// Derives the hashing key from operator-supplied key material.
    pub fn new(key_material: &[u8]) -> Self {
        Self {
            key: blake3::derive_key("tollgate 2026 identity secret hashing", key_material),
        }
    }

    /// A 128-bit keyed digest, hex: stable across restarts for the same key.
    pub fn hash(&self, secret: &[u8]) -> String {
        let digest = blake3::keyed_hash(&self.key, secret);
        let mut out = String::with_capacity(32);
        for byte in &digest.as_bytes()[..16] {
            out.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
            out.push(char::from_digit(u32::from(byte & 0xf), 16).unwrap_or('0'));
        }
        out
    }
}

impl fmt::Debug for SecretHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretHasher(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_in_values_cannot_collide() {
        let a = Identity::composite([("x", "a|b"), ("y", "c")]).expect("valid");
        let b = Identity::composite([("x", "a"), ("y", "b|c")]).expect("valid");
        assert_ne!(a, b);
        assert_ne!(
            Identity::value("x"),
            Identity::composite([("x", "")]).expect("valid")
        );
    }

    #[test]
    fn identities_display_as_their_value_or_their_named_parts() {
        assert_eq!(Identity::value("acme").to_string(), "acme");
        let long = "v".repeat(300);
        let composite = Identity::composite([
            ("tenant", "acme"),
            ("route", "/orders"),
            ("k", long.as_str()),
        ])
        .expect("valid");
        assert_eq!(
            composite.to_string(),
            format!("k={long},route=/orders,tenant=acme")
        );
    }

    #[test]
    fn shards_are_distinct_from_each_other_and_from_every_identity() {
        let acme = Identity::value("acme");
        let shards: Vec<Identity> = (0..4).map(|i| acme.shard(i)).collect();
        for (i, a) in shards.iter().enumerate() {
            assert_ne!(*a, acme);
            for b in &shards[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // A value spelling a shard's bytes is still a value.
        let mut spelled = vec![TAG_SHARD, 0, 0];
        spelled.extend_from_slice(acme.as_bytes());
        assert_ne!(
            Identity::value(&String::from_utf8_lossy(&spelled)),
            shards[0]
        );
        assert_ne!(
            Identity::value("acm").shard(0),
            Identity::value("acme").shard(0)
        );
        assert_eq!(shards[3].to_string(), "acme [shard 3]");
        let composite = Identity::composite([("tenant", "t1")]).expect("valid");
        assert_eq!(composite.shard(12).to_string(), "tenant=t1 [shard 12]");
    }

    #[test]
    fn part_order_does_not_matter() {
        let a = Identity::composite([("tenant", "acme"), ("route", "/orders")]).expect("valid");
        let b = Identity::composite([("route", "/orders"), ("tenant", "acme")]).expect("valid");
        assert_eq!(a, b);
    }

    #[test]
    fn duplicate_and_empty_composites_are_rejected() {
        assert_eq!(
            Identity::composite([("a", "1"), ("a", "2")]),
            Err(IdentityError::DuplicatePart("a".into()))
        );
        assert_eq!(Identity::composite([]), Err(IdentityError::Empty));
    }

    #[test]
    fn secret_hash_is_keyed_and_never_shows_the_key() {
        let a = SecretHasher::new(b"key one");
        let b = SecretHasher::new(b"key two");
        assert_eq!(a.hash(b"sk_live_123"), a.hash(b"sk_live_123"));
        assert_ne!(a.hash(b"sk_live_123"), b.hash(b"sk_live_123"));
        assert_eq!(a.hash(b"x").len(), 32);
        assert!(!a.hash(b"sk_live_123").contains("sk_live"));
        assert_eq!(format!("{a:?}"), "SecretHasher(<redacted>)");
    }
}
