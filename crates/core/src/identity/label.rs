//! An identity named for a person who must still tell identities apart: a
//! raw metric label, `/v1/hot`. The display form is not injective (the
//! value `x-tenant=acme` and the part `x-tenant: acme` print alike) nor
//! bounded, so it is shown as it is only when it is short, printable and
//! cannot be read two ways; anything else is cut, escaped and followed by
//! a digest of the encoding, the bytes the store keys by.

use super::{Identity, TAG_COMPOSITE, TAG_VALUE, take_length_prefixed};

/// The most bytes of display text a label shows before its digest.
pub const LABEL_MAX_BYTES: usize = 128;

/// Characters that make a display form ambiguous: the composite's
/// separators, the digest's and a shard's marks, and the escape.
const RESERVED: [char; 6] = ['=', ',', '#', '[', ']', '\\'];

impl Identity {
    /// The identity for people: its display form when that is at most
    /// [`LABEL_MAX_BYTES`], has no control character, and no name or value
    /// holds a reserved character (`= , # [ ] \`); otherwise that form
    /// escaped, cut to [`LABEL_MAX_BYTES`] (`...` marks the cut), then `#`
    /// and 128 bits of a digest of the encoding (`x-tenant=acme#5c1f…`).
    /// Two identities never share a label: a plain one has no `#`, a plain
    /// value no `=`, every plain composite at least one, and the rest
    /// differ by their encoding's digest.
    pub fn label(&self) -> String {
        if let Some(plain) = self.plain() {
            return plain;
        }
        let mut shown = crate::escape(&self.to_string());
        if shown.len() > LABEL_MAX_BYTES {
            // Escaped text is ASCII: any byte is a char boundary.
            shown.truncate(LABEL_MAX_BYTES);
            shown.push_str("...");
        }
        shown.push('#');
        for byte in &blake3::hash(&self.encoded).as_bytes()[..16] {
            shown.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
            shown.push(char::from_digit(u32::from(byte & 0xf), 16).unwrap_or('0'));
        }
        shown
    }

    /// The display form, when it reads only one way and is short.
    fn plain(&self) -> Option<String> {
        let plain_text = |bytes: &[u8]| {
            std::str::from_utf8(bytes).is_ok_and(|text| {
                !text
                    .chars()
                    .any(|c| c.is_control() || RESERVED.contains(&c))
            })
        };
        let (&tag, mut rest) = self.encoded.split_first()?;
        match tag {
            TAG_VALUE if plain_text(rest) => {}
            TAG_COMPOSITE => {
                while !rest.is_empty() {
                    let name = take_length_prefixed(&mut rest)?;
                    let value = take_length_prefixed(&mut rest)?;
                    if name.is_empty() || !plain_text(name) || !plain_text(value) {
                        return None;
                    }
                }
            }
            _ => return None,
        }
        let text = self.to_string();
        (text.len() <= LABEL_MAX_BYTES).then_some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn composite(parts: &[(&str, &str)]) -> Identity {
        Identity::composite(parts.iter().copied()).expect("valid")
    }

    #[test]
    fn a_short_unambiguous_identity_is_labelled_as_it_displays() {
        assert_eq!(Identity::value("mallory").label(), "mallory");
        assert_eq!(Identity::value("café").label(), "café");
        assert_eq!(
            composite(&[("tenant", "t1"), ("route", "/x")]).label(),
            "route=/x,tenant=t1"
        );
        assert_eq!(composite(&[("x-tenant", "acme")]).label(), "x-tenant=acme");
    }

    #[test]
    fn identities_that_display_alike_have_different_labels() {
        let pairs = [
            (
                Identity::value("x-tenant=acme"),
                composite(&[("x-tenant", "acme")]),
            ),
            (
                composite(&[("a", "1,b=2")]),
                composite(&[("a", "1"), ("b", "2")]),
            ),
            (
                Identity::value("acme [shard 1]"),
                Identity::value("acme").shard(1),
            ),
            (
                Identity::value(&format!("{}a", "x".repeat(200))),
                Identity::value(&format!("{}b", "x".repeat(200))),
            ),
        ];
        for (a, b) in pairs {
            assert_eq!(a.to_string().get(..128), b.to_string().get(..128));
            assert_ne!(a.label(), b.label(), "{a:?} {b:?}");
        }
    }

    #[test]
    fn a_label_is_bounded_and_has_no_control_byte() {
        let evil = Identity::value(&format!("x\n\x1b[31m{}", "é".repeat(1_000)));
        let label = evil.label();
        assert!(label.len() <= LABEL_MAX_BYTES + 3 + 33, "{}", label.len());
        assert!(label.starts_with("x\\n\\x1b[31m\\xc3\\xa9"), "{label}");
        assert!(label.bytes().all(|b| (0x20..0x7f).contains(&b)), "{label}");
    }
}
