//! Which requests a policy applies to: methods, a path prefix or pattern,
//! and a host. An absent part matches everything. Paths arrive normalized
//! ([`crate::request_path::normalize`]); whether case, a trailing slash and
//! a format suffix (`/login.json`) matter is the policy's choice, and its
//! canonical path follows that choice so that spellings it matches alike
//! also share one bucket. `GET` takes `HEAD` too: HTTP defines HEAD as GET
//! without the body (RFC 9110 §9.3.2), and routers answer it with the GET
//! handler, so a GET limit a HEAD skipped would be no limit. Every door that
//! matches a request asks [`Matcher::matches`]: this file is the one
//! definition.

use std::borrow::Cow;

/// A path pattern: literal segments, `{name}` for any one segment and a
/// final `{*name}` for the rest of the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    text: String,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Any,
    Rest,
}

impl PathPattern {
    /// Reads a pattern; the error says what is wrong with `text`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let Some(body) = text.strip_prefix('/') else {
            return Err(format!("{text:?} must start with '/'"));
        };
        let parts: Vec<&str> = if body.is_empty() {
            Vec::new()
        } else {
            body.split('/').collect()
        };
        let mut segments = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            let segment =
                if let Some(inner) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                    if let Some(name) = inner.strip_prefix('*') {
                        if i + 1 != parts.len() {
                            return Err(format!("{text:?}: {{*{name}}} must be the last segment"));
                        }
                        Segment::Rest
                    } else if inner.is_empty() || inner.contains(['{', '}']) {
                        return Err(format!(
                            "{text:?}: {part:?} is not a valid {{name}} segment"
                        ));
                    } else {
                        Segment::Any
                    }
                } else if part.contains(['{', '}']) {
                    return Err(format!("{text:?}: braces may only wrap a whole segment"));
                } else {
                    Segment::Literal((*part).to_owned())
                };
            segments.push(segment);
        }
        Ok(Self {
            text: text.to_owned(),
            segments,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the last segment is a literal (`/login`, not `/{id}` or
    /// `/{*rest}`, which take any suffix anyway).
    fn ends_in_literal(&self) -> bool {
        matches!(self.segments.last(), Some(Segment::Literal(l)) if !l.is_empty())
    }

    /// Whether the pattern ends in `{*rest}`, which takes any tail.
    fn ends_in_rest(&self) -> bool {
        matches!(self.segments.last(), Some(Segment::Rest))
    }

    /// Whether `path` fits exactly: case and a trailing slash count.
    pub fn matches(&self, path: &str) -> bool {
        self.matches_with(path, false, TrailingSlash::Strict)
    }

    /// Whether `path` fits, literal segments compared ASCII
    /// case-insensitively when `case_insensitive`, and with a trailing
    /// slash on either side disregarded under [`TrailingSlash::Ignore`].
    pub fn matches_with(
        &self,
        path: &str,
        case_insensitive: bool,
        trailing_slash: TrailingSlash,
    ) -> bool {
        let mut segments = self.segments.as_slice();
        let mut path = path;
        if trailing_slash == TrailingSlash::Ignore {
            path = without_trailing_slash(path);
            if let [init @ .., Segment::Literal(last)] = segments
                && last.is_empty()
                && !init.is_empty()
            {
                segments = init;
            }
        }
        let Some(body) = path.strip_prefix('/') else {
            return false;
        };
        let mut parts = if body.is_empty() {
            None
        } else {
            Some(body.split('/'))
        };
        for segment in segments {
            match segment {
                Segment::Rest => return true,
                Segment::Any | Segment::Literal(_) => {
                    let Some(part) = parts.as_mut().and_then(Iterator::next) else {
                        return false;
                    };
                    match segment {
                        Segment::Literal(l) if !same_text(l, part, case_insensitive) => {
                            return false;
                        }
                        Segment::Any if part.is_empty() => return false,
                        _ => {}
                    }
                }
            }
        }
        parts.is_none_or(|mut rest| rest.next().is_none())
    }
}

/// Whether a trailing slash makes a path different (`match.trailing_slash`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TrailingSlash {
    /// `/login/` and `/login` are different paths (what a router does).
    #[default]
    Strict,
    /// `/login/` and `/login` are one path: for applications that route
    /// both to the same handler.
    Ignore,
}

impl TrailingSlash {
    /// Its name in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            TrailingSlash::Strict => "strict",
            TrailingSlash::Ignore => "ignore",
        }
    }
}

/// Whether a format suffix on the last segment makes a path different
/// (`match.format_suffix`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FormatSuffix {
    /// `/login.json` and `/login` are different paths.
    #[default]
    Strict,
    /// `/login.json`, `/login.xml` and `/login` are one path: Rails (and
    /// Django REST framework's `format_suffix_patterns`) route them to one
    /// handler, answering in the format the suffix names.
    Ignore,
}

impl FormatSuffix {
    /// Its name in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            FormatSuffix::Strict => "strict",
            FormatSuffix::Ignore => "ignore",
        }
    }
}

/// The longest format suffix taken off a path, dot excluded: Rails' formats
/// (`json`, `xml`, `html`, `csv`, `atom`…) are all far shorter.
const MAX_FORMAT_SUFFIX: usize = 10;

/// `path` without a format suffix (`.json`) on its last segment, if it has
/// one: a dot that does not start the segment, then 1 to
/// [`MAX_FORMAT_SUFFIX`] ASCII letters or digits to the end. One suffix
/// only, as Rails' `(.:format)` takes one.
fn without_format_suffix(path: &str) -> Option<&str> {
    let last = path.rfind('/').map_or(0, |slash| slash + 1);
    let dot = last + path[last..].rfind('.')?;
    let suffix = &path[dot + 1..];
    (dot > last
        && (1..=MAX_FORMAT_SUFFIX).contains(&suffix.len())
        && suffix.bytes().all(|b| b.is_ascii_alphanumeric()))
    .then(|| &path[..dot])
}

/// `path` without one trailing slash, except the root.
fn without_trailing_slash(path: &str) -> &str {
    match path.strip_suffix('/') {
        Some(trimmed) if !trimmed.is_empty() => trimmed,
        _ => path,
    }
}

fn same_text(a: &str, b: &str, case_insensitive: bool) -> bool {
    if case_insensitive {
        a.eq_ignore_ascii_case(b)
    } else {
        a == b
    }
}

/// Whether `path` starts with `prefix`, ASCII case-insensitively if asked.
fn has_prefix(path: &str, prefix: &str, case_insensitive: bool) -> bool {
    match path.as_bytes().get(..prefix.len()) {
        Some(head) if case_insensitive => head.eq_ignore_ascii_case(prefix.as_bytes()),
        Some(head) => head == prefix.as_bytes(),
        None => false,
    }
}

/// A spelling a match does not take ([`Matcher::respellings`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Respelling {
    /// The spelling, made from the path as written (`/LOGIN`, `/login/`).
    pub example: String,
    /// The `match` option that takes it.
    pub option: &'static str,
}

/// A policy's `match`: which requests it applies to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Matcher {
    /// Upper-case method names.
    pub methods: Option<Vec<String>>,
    /// A prefix the path must start with.
    pub path_prefix: Option<String>,
    /// A pattern the whole path must fit.
    pub path: Option<PathPattern>,
    /// Lower-case, without a trailing dot; `*.example.com` matches any
    /// subdomain.
    pub host: Option<String>,
    /// `match.case_insensitive`: `path` literals and `path_prefix` compare
    /// ASCII case-insensitively.
    pub case_insensitive: bool,
    /// `match.trailing_slash`.
    pub trailing_slash: TrailingSlash,
    /// `match.format_suffix`.
    pub format_suffix: FormatSuffix,
}

impl Matcher {
    /// Whether the request fits. `path` is the normalized path
    /// ([`crate::request_path::normalize`]); `host` may carry a port and a
    /// trailing dot (`api.example.com.:8443` is `api.example.com`).
    pub fn matches(&self, method: &str, path: &str, host: &str) -> bool {
        if !self.method_matches(method) {
            return false;
        }
        let path_ok = self.path_matches(path)
            || (self.format_suffix == FormatSuffix::Ignore
                && without_format_suffix(self.without_slash(path))
                    .is_some_and(|stem| self.path_matches(stem)));
        if !path_ok {
            return false;
        }
        if let Some(want) = &self.host {
            let host = host.rsplit_once(':').map_or(host, |(h, port)| {
                if port.bytes().all(|b| b.is_ascii_digit()) {
                    h
                } else {
                    host
                }
            });
            // `host.` is the same name, fully qualified (RFC 1034 §3.1).
            let host = host.strip_suffix('.').unwrap_or(host);
            let ok = match want.strip_prefix("*.") {
                Some(suffix) => {
                    host.len() > suffix.len() + 1
                        && host.as_bytes()[host.len() - suffix.len()..]
                            .eq_ignore_ascii_case(suffix.as_bytes())
                        && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
                }
                None => host.eq_ignore_ascii_case(want),
            };
            if !ok {
                return false;
            }
        }
        true
    }

    /// Whether `method` is one of `methods`; `HEAD` is whenever `GET` is.
    fn method_matches(&self, method: &str) -> bool {
        self.methods.as_ref().is_none_or(|ms| {
            ms.iter().any(|m| {
                m.eq_ignore_ascii_case(method)
                    || (m == "GET" && method.eq_ignore_ascii_case("HEAD"))
            })
        })
    }

    /// Whether `path` fits `path_prefix` and `path` as written.
    fn path_matches(&self, path: &str) -> bool {
        let prefix_ok = self
            .path_prefix
            .as_ref()
            .is_none_or(|prefix| self.prefix_matches(prefix, path));
        prefix_ok
            && self
                .path
                .as_ref()
                .is_none_or(|p| p.matches_with(path, self.case_insensitive, self.trailing_slash))
    }

    /// `path` without its trailing slash when this policy disregards it.
    fn without_slash<'p>(&self, path: &'p str) -> &'p str {
        match self.trailing_slash {
            TrailingSlash::Ignore => without_trailing_slash(path),
            TrailingSlash::Strict => path,
        }
    }

    /// Under `trailing_slash: ignore`, `path_prefix: /api/` also takes
    /// `/api`: the prefix's own path with its slash dropped.
    fn prefix_matches(&self, prefix: &str, path: &str) -> bool {
        has_prefix(path, prefix, self.case_insensitive)
            || (self.trailing_slash == TrailingSlash::Ignore
                && prefix.len() > 1
                && prefix.ends_with('/')
                && same_text(path, &prefix[..prefix.len() - 1], self.case_insensitive))
    }

    /// The path as this policy tells paths apart, for the `path` identity
    /// part: lower-cased under `case_insensitive`, without a trailing slash
    /// (except the root) under `trailing_slash: ignore`, without a format
    /// suffix under `format_suffix: ignore`. Without it, `/LOGIN` and
    /// `/login` would match one limit but spend from two buckets — 2^5
    /// buckets for the spellings of `login`. Borrows when nothing changes.
    pub fn canonical_path<'p>(&self, path: &'p str) -> Cow<'p, str> {
        let mut path = self.without_slash(path);
        if self.format_suffix == FormatSuffix::Ignore
            && let Some(stem) = without_format_suffix(path)
        {
            path = stem;
        }
        if self.case_insensitive && path.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(path.to_ascii_lowercase())
        } else {
            Cow::Borrowed(path)
        }
    }

    /// The spellings of this match's path that it does not take, although
    /// common routers serve them from the same handler (Express and
    /// ASP.NET Core ignore case, many frameworks a trailing slash, Rails
    /// and Django REST framework a format suffix), each with the option
    /// that would take it. Empty when the match names no path.
    pub fn respellings(&self) -> Vec<Respelling> {
        let (text, slash, suffix) = match (&self.path, &self.path_prefix) {
            (Some(pattern), _) => {
                let text = pattern.as_str();
                let slash = (text != "/" && !pattern.ends_in_rest()).then(|| {
                    text.strip_suffix('/')
                        .map_or_else(|| format!("{text}/"), str::to_owned)
                });
                let suffix = pattern.ends_in_literal().then(|| format!("{text}.json"));
                (text, slash, suffix)
            }
            (None, Some(prefix)) => {
                let slash = prefix
                    .strip_suffix('/')
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned);
                (prefix.as_str(), slash, None)
            }
            (None, None) => return Vec::new(),
        };
        let mut found = Vec::new();
        if !self.case_insensitive && text.bytes().any(|b| b.is_ascii_lowercase()) {
            found.push(Respelling {
                example: text.to_ascii_uppercase(),
                option: "case_insensitive: true",
            });
        }
        if let Some(example) = slash.filter(|_| self.trailing_slash == TrailingSlash::Strict) {
            found.push(Respelling {
                example,
                option: "trailing_slash: ignore",
            });
        }
        if let Some(example) = suffix.filter(|_| self.format_suffix == FormatSuffix::Strict) {
            found.push(Respelling {
                example,
                option: "format_suffix: ignore",
            });
        }
        found
    }

    /// The route a request matched, for the `route` identity part.
    pub fn route(&self) -> Option<&str> {
        self.path
            .as_ref()
            .map(PathPattern::as_str)
            .or(self.path_prefix.as_deref())
    }
}

#[cfg(test)]
mod tests;
