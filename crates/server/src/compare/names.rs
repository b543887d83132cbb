//! How `compare` names the identities whose decisions changed: as the
//! metrics and logs name them (`hash:` and the keyed hash of the
//! identity's encoding, keyed from the config's identity key), never raw.
//! A trace `serve` captured (or one made from access logs) already holds
//! such names as its keys: those are kept as they are.

use tollgate_core::{Identity, SecretHasher};
use tollgate_limiter::HotSeries;

/// Names identities, or says why it cannot.
pub(crate) struct Namer {
    series: Option<HotSeries>,
    /// The variable the key was looked for in.
    env: String,
}

impl Namer {
    /// Hashing with `key` (from the variable `env`), when there is one of
    /// at least 32 bytes; the hot identity series' own derivation.
    pub fn new(env: &str, key: Option<&str>) -> Self {
        let series = key.filter(|k| k.len() >= 32).map(|key| {
            let material = [b"tollgate hot identity series\0".as_slice(), key.as_bytes()].concat();
            HotSeries::Hashed(SecretHasher::new(&material))
        });
        Self {
            series,
            env: env.to_owned(),
        }
    }

    /// `identity`'s name: its own when it is already a keyed hash
    /// (`hash:` and 32 hex digits), else its keyed hash.
    pub fn name(&self, identity: &Identity) -> Result<String, String> {
        let shown = identity.to_string();
        if is_hashed(&shown) && Identity::value(&shown) == *identity {
            return Ok(shown);
        }
        self.series
            .as_ref()
            .and_then(|series| series.label(identity))
            .ok_or_else(|| {
                format!(
                    "the trace's identities are not hashed, and compare names them only as the metrics do, by the identity key: set {} to the key serve uses (at least 32 bytes)",
                    self.env
                )
            })
    }
}

/// Whether `name` is a keyed hash as the metrics write one.
fn is_hashed(name: &str) -> bool {
    name.strip_prefix("hash:").is_some_and(|hex| {
        hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hashed_key_is_kept_and_a_raw_one_is_hashed_only_with_a_key() {
        let hashed = "hash:0123456789abcdef0123456789abcdef";
        let without = Namer::new("TOLLGATE_IDENTITY_KEY", None);
        assert_eq!(
            without.name(&Identity::value(hashed)),
            Ok(hashed.to_owned())
        );
        let raw = Identity::value("tenant-a");
        assert!(
            without
                .name(&raw)
                .is_err_and(|e| e.contains("set TOLLGATE_IDENTITY_KEY"))
        );
        let key = "k".repeat(32);
        let with = Namer::new("TOLLGATE_IDENTITY_KEY", Some(&key));
        let material = [b"tollgate hot identity series\0".as_slice(), key.as_bytes()].concat();
        let expected = format!("hash:{}", SecretHasher::new(&material).hash(raw.as_bytes()));
        assert_eq!(with.name(&raw), Ok(expected));
    }
}
