//! Client input quoted back in a message (a problem's detail, an RLS
//! status, a log line): a short prefix, escaped, and marked when cut. What
//! a client sent then can neither grow a response header past a proxy's
//! buffer (nginx's `auth_request` answers 502 and fails open) nor forge a
//! log line with a newline or a terminal escape.

use std::fmt::Write;

/// Bytes of client input a quote shows at most.
pub const QUOTE_MAX_BYTES: usize = 32;

/// `text` as a message quotes it: double-quoted, at most
/// [`QUOTE_MAX_BYTES`] of it, every byte outside printable ASCII (and `"`,
/// `\`) escaped, and, when cut, `...` and its whole length after the
/// closing quote (`"aaaa"... (5000 bytes)`). Always printable ASCII, at
/// most `2 + 4 × QUOTE_MAX_BYTES + 32` bytes.
pub fn quote(text: &str) -> String {
    quote_bytes(text.as_bytes())
}

/// [`quote`] for input that need not be UTF-8: each byte outside
/// printable ASCII is `\xNN`.
pub fn quote_bytes(bytes: &[u8]) -> String {
    let shown = &bytes[..bytes.len().min(QUOTE_MAX_BYTES)];
    let mut out = String::with_capacity(shown.len() + 24);
    out.push('"');
    escape_into(&mut out, shown);
    out.push('"');
    if shown.len() < bytes.len() {
        // Writing to a String cannot fail.
        let _ = write!(out, "... ({} bytes)", bytes.len());
    }
    out
}

/// `text` whole, every byte outside printable ASCII (and `\`) escaped:
/// for a log field that must stay one line and carry no terminal escape.
/// Unlike [`quote`] it keeps the whole length; callers bound it.
pub fn escape(text: &str) -> String {
    if text
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'\\')
    {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    escape_into(&mut out, text.as_bytes());
    out
}

/// `text` with each control character (newline, ESC, DEL, C1) written as
/// `\u{…}`, the rest as it is: for a log field that holds text already
/// meant for people (a refusal's reason) and must stay one line with no
/// terminal escape.
pub fn without_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out.into()
}

fn escape_into(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_printable_text_is_quoted_as_it_is() {
        assert_eq!(quote("x-tenant"), "\"x-tenant\"");
        assert_eq!(quote(""), "\"\"");
    }

    #[test]
    fn control_bytes_quotes_and_non_ascii_are_escaped() {
        assert_eq!(
            quote("a\nb\x1b[31m\"c\\é"),
            "\"a\\nb\\x1b[31m\\\"c\\\\\\xc3\\xa9\""
        );
        assert_eq!(escape("line\nforged\x1b"), "line\\nforged\\x1b");
        assert_eq!(escape("plain text"), "plain text");
        assert_eq!(
            without_controls("a\nb\x1b[31m ≥ \\"),
            "a\\u{a}b\\u{1b}[31m ≥ \\"
        );
    }

    #[test]
    fn a_long_text_is_cut_and_says_how_long_it_was() {
        let long = "9".repeat(5_000);
        assert_eq!(
            quote(&long),
            format!("\"{}\"... (5000 bytes)", "9".repeat(QUOTE_MAX_BYTES))
        );
    }

    #[test]
    fn every_quote_is_short_printable_ascii() {
        let worst: String = std::iter::repeat_n('\u{7f}', 4_000).collect();
        for text in [worst.as_str(), "é".repeat(3_000).as_str(), "\n\r\t\"\\"] {
            let q = quote(text);
            assert!(q.len() <= 2 + 4 * QUOTE_MAX_BYTES + 32, "{}", q.len());
            assert!(q.bytes().all(|b| (0x20..0x7f).contains(&b)), "{q}");
        }
    }
}
