//! A stored key's identity: its encoded bytes, inside the slot when short.

/// Identities up to this many encoded bytes are kept inside the slot.
pub(super) const INLINE_IDENTITY: usize = 22;

/// An identity's encoded bytes, inside the slot when short (user ids, IPv4
/// addresses, tenant names): the lookup that finds the slot then has them,
/// with no further memory read to compare them, and storing them allocates
/// nothing. Longer identities live on the heap.
pub(super) enum IdentityBytes {
    Inline {
        len: u8,
        bytes: [u8; INLINE_IDENTITY],
    },
    Heap(Box<[u8]>),
}

impl IdentityBytes {
    pub(super) fn new(identity: &[u8]) -> Self {
        match u8::try_from(identity.len()) {
            Ok(len) if identity.len() <= INLINE_IDENTITY => {
                let mut bytes = [0; INLINE_IDENTITY];
                bytes[..identity.len()].copy_from_slice(identity);
                Self::Inline { len, bytes }
            }
            _ => Self::Heap(identity.into()),
        }
    }

    /// Whether these are `other`'s bytes; a short identity is compared
    /// word by word here, where a slice compare calls `memcmp`.
    pub(super) fn is(&self, other: &[u8]) -> bool {
        match self {
            Self::Inline { len, bytes } => {
                usize::from(*len) == other.len() && short_eq(&bytes[..other.len()], other)
            }
            Self::Heap(bytes) => **bytes == *other,
        }
    }
}

/// `a == b` for two slices of one length of at most 24 bytes, in at most
/// three word compares (overlapping where the length is not a multiple).
#[inline(always)]
fn short_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    // Fixed-size loads: a `copy_from_slice` of a range the compiler cannot
    // prove is 8 bytes long became a call to `memmove` a word.
    let word = |s: &[u8], at: usize| {
        s.get(at..)
            .and_then(<[u8]>::first_chunk)
            .map(|w| u64::from_ne_bytes(*w))
    };
    let half = |s: &[u8], at: usize| {
        s.get(at..)
            .and_then(<[u8]>::first_chunk)
            .map(|w| u32::from_ne_bytes(*w))
    };
    match n {
        0..4 => a == b,
        4..8 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        8..=16 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        17..=24 => {
            word(a, 0) == word(b, 0) && word(a, 8) == word(b, 8) && word(a, n - 8) == word(b, n - 8)
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::{IdentityBytes, short_eq};

    #[test]
    fn short_identities_compare_as_their_bytes_at_every_length_and_position() {
        for n in 0..=24usize {
            let a: Vec<u8> = (0..n).map(|i| i as u8 + 1).collect();
            assert!(short_eq(&a, &a.clone()), "length {n}");
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x80;
                assert!(!short_eq(&a, &b), "length {n}, byte {at}");
            }
        }
    }

    #[test]
    fn an_identity_is_its_own_bytes_and_no_other() {
        for bytes in [&b""[..], b"\x01a", b"\x01tenant-123456789012345", &[7; 40]] {
            let stored = IdentityBytes::new(bytes);
            assert!(stored.is(bytes));
            let mut longer = bytes.to_vec();
            longer.push(0);
            assert!(!stored.is(&longer));
            if let Some(last) = longer.len().checked_sub(2) {
                longer[last] ^= 1;
                assert!(!stored.is(&longer[..=last]));
            }
        }
    }
}
