//! The path a forwarded request is matched and charged by: the path the
//! proxy's router and the application see, not the bytes the client wrote.
//! Matching raw text would let `//login`, `/./login`, `/%6Cogin` or
//! `/login;x` escape a `/login` limit, so every spelling a server would
//! route to one path is turned into that one path first, the way nginx
//! builds `$uri` (RFC 3986 §6): decode, strip parameters, merge slashes,
//! resolve dot segments. Most paths need none of it and are not copied.

use std::borrow::Cow;

use thiserror::Error;

/// Why a request target has no path a router would accept. nginx answers
/// these with 400 too, so no application ever sees such a request.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PathFault {
    /// The target is neither origin-form nor absolute-form.
    #[error("the path must start with '/'")]
    NotAbsolute,
    /// `at` counts bytes from 0 in the request target as given.
    /// A `%` not followed by two hex digits.
    #[error("the path has a malformed percent-escape at byte {at}")]
    MalformedEscape {
        /// Where the `%` is.
        at: usize,
    },
    /// A NUL byte in the path, raw or as `%00`.
    #[error("the path decodes to a NUL byte")]
    Nul,
    /// The decoded bytes are not UTF-8.
    #[error("the path is not UTF-8 once percent-decoded")]
    NotUtf8,
    /// More `..` segments than there are segments above them.
    #[error("the path climbs above the root with `..`")]
    AboveRoot,
}

/// The path routers see for `target`, a request target as a proxy forwards
/// it (origin-form `/p?q#f`, or absolute-form `http://host/p`). In order:
///
/// 1. an absolute-form scheme and authority are dropped (`http://h` is `/`);
///    anything else not starting with `/` is a fault;
/// 2. the path ends at the first raw `?` or `#`;
/// 3. every `%XX` is decoded, once: a decoded `%` is never decoded again,
///    but a decoded `/`, `.` or `;` takes part in the steps below, as in
///    nginx. A malformed escape, a NUL or bytes that are not UTF-8 are
///    faults;
/// 4. `;params` are cut from every segment (Tomcat, Jetty and Spring route
///    `/login;jsessionid=x` as `/login`) — after decoding, so an encoded
///    `%3B` is cut too: anything an application could read as `/login` is
///    charged as `/login`;
/// 5. repeated slashes are merged;
/// 6. `.` and `..` segments are resolved (RFC 3986 §5.2.4; a final `/.`
///    or `/..` leaves a trailing slash); a `..` above the root is a fault.
///
/// Case and a trailing slash are kept: whether they matter is a policy's
/// choice (`match.case_insensitive`, `match.trailing_slash`). Backslashes
/// are ordinary bytes: nginx and the RFC do not treat them as separators.
pub fn normalize(target: &str) -> Result<Cow<'_, str>, PathFault> {
    let (path, offset) = match target.as_bytes().first() {
        Some(b'/') => (target, 0),
        _ => match strip_scheme_and_authority(target) {
            Some(rest) => (rest, target.len() - rest.len()),
            None => return Err(PathFault::NotAbsolute),
        },
    };
    let bytes = path.as_bytes();
    // One scan: where the path ends, and whether it needs any rewriting.
    let mut end = bytes.len();
    let mut rewrite = false;
    let mut segment_start = 1;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'?' | b'#' => {
                end = i;
                break;
            }
            b'%' | b';' | 0 => rewrite = true,
            b'/' if i > 0 => {
                rewrite |= matches!(&bytes[segment_start..i], b"" | b"." | b"..");
                segment_start = i + 1;
            }
            _ => {}
        }
    }
    if end == 0 {
        // Absolute-form without a path (`http://host?q`) asks for the root.
        return Ok(Cow::Borrowed("/"));
    }
    rewrite |= matches!(&bytes[segment_start.min(end)..end], b"." | b"..");
    if !rewrite {
        return Ok(Cow::Borrowed(&path[..end]));
    }
    let decoded = percent_decode(&bytes[..end], offset)?;
    resolve(&decoded).map(Cow::Owned)
}

/// The path of an absolute-form target (`HTTP://Host:80/p` → `/p`, and
/// `http://host?q` → `?q`), or `None` when `target` is not absolute-form.
fn strip_scheme_and_authority(target: &str) -> Option<&str> {
    let (scheme, rest) = target.split_once("://")?;
    let mut chars = scheme.bytes();
    let first_ok = chars.next().is_some_and(|b| b.is_ascii_alphabetic());
    if !first_ok || !chars.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')) {
        return None;
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some(&rest[authority_end..])
}

/// `path` with every `%XX` decoded once. `offset` places `path` in the
/// target, for the fault's byte position.
fn percent_decode(path: &[u8], offset: usize) -> Result<String, PathFault> {
    let mut out = Vec::with_capacity(path.len());
    let mut i = 0;
    while let Some(&b) = path.get(i) {
        let byte = if b == b'%' {
            let hex = |j: usize| path.get(j).and_then(|&h| (h as char).to_digit(16));
            match (hex(i + 1), hex(i + 2)) {
                // Two hex digits are below 256.
                (Some(hi), Some(lo)) => {
                    i += 3;
                    (hi * 16 + lo) as u8
                }
                _ => return Err(PathFault::MalformedEscape { at: offset + i }),
            }
        } else {
            i += 1;
            b
        };
        if byte == 0 {
            return Err(PathFault::Nul);
        }
        out.push(byte);
    }
    String::from_utf8(out).map_err(|_| PathFault::NotUtf8)
}

/// Cuts `;params`, merges slashes and resolves dot segments of a decoded
/// path that starts with `/`.
fn resolve(path: &str) -> Result<String, PathFault> {
    // Built as `/a/b` with no trailing slash; the root is the empty string.
    let mut out = String::with_capacity(path.len());
    let mut trailing_slash = false;
    for segment in path.split('/').skip(1) {
        let segment = segment.split_once(';').map_or(segment, |(s, _)| s);
        match segment {
            "" | "." => trailing_slash = true,
            ".." => {
                let parent = out.rfind('/').ok_or(PathFault::AboveRoot)?;
                out.truncate(parent);
                trailing_slash = true;
            }
            _ => {
                out.push('/');
                out.push_str(segment);
                trailing_slash = false;
            }
        }
    }
    if out.is_empty() || trailing_slash {
        out.push('/');
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
