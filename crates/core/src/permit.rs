//! A permit's name: what an admitted concurrency check hands its holder,
//! and what the holder hands back to release it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One held permit of a concurrency policy. Written as exactly 16
/// lowercase hex digits (the wire's and the Redis member's spelling), so
/// every door and every store reads one form back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PermitId(pub u64);

impl PermitId {
    /// The permit of an acquire decided without a name for it (a
    /// reference model, a bench): a store always names its own.
    pub const UNNAMED: PermitId = PermitId(0);
}

impl Serialize for PermitId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Read as it is written: exactly 16 lowercase hex digits in a string.
impl<'de> Deserialize<'de> for PermitId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Why a text is not a permit id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a permit id is exactly 16 lowercase hex digits")]
pub struct PermitIdError;

impl fmt::Display for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl FromStr for PermitId {
    type Err = PermitIdError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        // `from_str_radix` alone would take a sign, upper case or fewer digits.
        if text.len() != 16 || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(PermitIdError);
        }
        u64::from_str_radix(text, 16)
            .map(PermitId)
            .map_err(|_| PermitIdError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permit_id_is_sixteen_lowercase_hex_digits_both_ways() {
        let id = PermitId(0x00ab_cdef_0123_4567);
        assert_eq!(id.to_string(), "00abcdef01234567");
        assert_eq!("00abcdef01234567".parse(), Ok(id));
        assert_eq!(PermitId(u64::MAX).to_string(), "ffffffffffffffff");
        for bad in [
            "",
            "abc",
            "00ABCDEF01234567",
            "+0abcdef01234567",
            "00abcdef012345678",
            "00abcdef0123456g",
            " 0abcdef01234567",
        ] {
            assert_eq!(bad.parse::<PermitId>(), Err(PermitIdError), "{bad:?}");
        }
    }
}
