//! Which requests a policy applies to: methods, a path prefix or pattern,
//! and a host. An absent part matches everything. Paths arrive normalized
//! ([`crate::request_path::normalize`]); whether case and a trailing slash
//! matter is the policy's choice, and its canonical path follows that
//! choice so that spellings it matches alike also share one bucket.

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
}

impl Matcher {
    /// Whether the request fits. `path` is the normalized path
    /// ([`crate::request_path::normalize`]); `host` may carry a port and a
    /// trailing dot (`api.example.com.:8443` is `api.example.com`).
    pub fn matches(&self, method: &str, path: &str, host: &str) -> bool {
        let method_ok = self
            .methods
            .as_ref()
            .is_none_or(|ms| ms.iter().any(|m| m.eq_ignore_ascii_case(method)));
        let prefix_ok = self
            .path_prefix
            .as_ref()
            .is_none_or(|prefix| self.prefix_matches(prefix, path));
        let pattern_ok = self
            .path
            .as_ref()
            .is_none_or(|p| p.matches_with(path, self.case_insensitive, self.trailing_slash));
        if !(method_ok && prefix_ok && pattern_ok) {
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
    /// (except the root) under `trailing_slash: ignore`. Without it,
    /// `/LOGIN` and `/login` would match one limit but spend from two
    /// buckets — 2^5 buckets for the spellings of `login`. Borrows when
    /// nothing changes.
    pub fn canonical_path<'p>(&self, path: &'p str) -> Cow<'p, str> {
        let path = match self.trailing_slash {
            TrailingSlash::Ignore => without_trailing_slash(path),
            TrailingSlash::Strict => path,
        };
        if self.case_insensitive && path.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(path.to_ascii_lowercase())
        } else {
            Cow::Borrowed(path)
        }
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
mod tests {
    use super::*;

    #[test]
    fn patterns_match_whole_segments() {
        let p = PathPattern::parse("/orders/{id}").expect("valid");
        assert!(p.matches("/orders/42"));
        assert!(!p.matches("/orders/42/items"));
        assert!(!p.matches("/orders/"));
        assert!(!p.matches("/orders"));
        let rest = PathPattern::parse("/static/{*file}").expect("valid");
        assert!(rest.matches("/static/a/b.css"));
        assert!(rest.matches("/static/"));
        assert!(!rest.matches("/other/a"));
        let root = PathPattern::parse("/").expect("valid");
        assert!(root.matches("/"));
        assert!(!root.matches("/a"));
    }

    #[test]
    fn bad_patterns_are_refused() {
        assert!(PathPattern::parse("orders").is_err());
        assert!(PathPattern::parse("/a/{*rest}/b").is_err());
        assert!(PathPattern::parse("/a/x{id}").is_err());
        assert!(PathPattern::parse("/a/{}").is_err());
    }

    #[test]
    fn hosts_match_exactly_or_by_subdomain() {
        let m = Matcher {
            host: Some("*.example.com".into()),
            ..Matcher::default()
        };
        assert!(m.matches("GET", "/", "api.example.com"));
        assert!(m.matches("GET", "/", "api.example.com:8443"));
        assert!(!m.matches("GET", "/", "example.com"));
        assert!(!m.matches("GET", "/", "evilexample.com"));
        let exact = Matcher {
            host: Some("api.example.com".into()),
            methods: Some(vec!["POST".into()]),
            ..Matcher::default()
        };
        assert!(exact.matches("post", "/", "API.example.com"));
        assert!(!exact.matches("GET", "/", "api.example.com"));
    }

    #[test]
    fn a_fully_qualified_host_is_the_same_host() {
        let exact = Matcher {
            host: Some("api.example.com".into()),
            ..Matcher::default()
        };
        assert!(exact.matches("GET", "/", "api.example.com."));
        assert!(exact.matches("GET", "/", "API.example.com.:8443"));
        assert!(!exact.matches("GET", "/", "api.example.com.."));
        let wild = Matcher {
            host: Some("*.example.com".into()),
            ..Matcher::default()
        };
        assert!(wild.matches("GET", "/", "api.example.com."));
        assert!(!wild.matches("GET", "/", "example.com."));
        assert!(!wild.matches("GET", "/", "é.example.coé"));
    }

    fn with_path(pattern: &str) -> Matcher {
        Matcher {
            path: Some(PathPattern::parse(pattern).expect("valid")),
            ..Matcher::default()
        }
    }

    fn with_prefix(prefix: &str) -> Matcher {
        Matcher {
            path_prefix: Some(prefix.into()),
            ..Matcher::default()
        }
    }

    #[test]
    fn paths_are_case_sensitive_and_slash_strict_by_default() {
        let login = with_path("/login");
        assert!(login.matches("GET", "/login", ""));
        assert!(!login.matches("GET", "/LOGIN", ""));
        assert!(!login.matches("GET", "/login/", ""));
        let api = with_prefix("/api/");
        assert!(api.matches("GET", "/api/x", ""));
        assert!(!api.matches("GET", "/API/x", ""));
        assert!(!api.matches("GET", "/api", ""));
        assert_eq!(login.canonical_path("/LOGIN/"), "/LOGIN/");
        assert!(matches!(login.canonical_path("/LOGIN/"), Cow::Borrowed(_)));
    }

    #[test]
    fn case_insensitive_compares_literals_and_prefixes_in_any_case() {
        let login = Matcher {
            case_insensitive: true,
            ..with_path("/Login/{id}")
        };
        assert!(login.matches("GET", "/login/Ab", ""));
        assert!(login.matches("GET", "/LOGIN/ab", ""));
        assert!(!login.matches("GET", "/logout/ab", ""));
        assert!(!login.matches("GET", "/login/ab/", ""));
        let api = Matcher {
            case_insensitive: true,
            ..with_prefix("/api/")
        };
        assert!(api.matches("GET", "/API/orders", ""));
        assert!(api.matches("GET", "/Api/", ""));
        assert!(!api.matches("GET", "/apx/", ""));
        assert!(!api.matches("GET", "/ap", ""));
        // Non-ASCII letters are compared as they are.
        let cafe = Matcher {
            case_insensitive: true,
            ..with_path("/café")
        };
        assert!(cafe.matches("GET", "/CAFé", ""));
        assert!(!cafe.matches("GET", "/CAFÉ", ""));
    }

    #[test]
    fn trailing_slash_ignore_matches_with_or_without_it() {
        let login = Matcher {
            trailing_slash: TrailingSlash::Ignore,
            ..with_path("/login")
        };
        assert!(login.matches("GET", "/login", ""));
        assert!(login.matches("GET", "/login/", ""));
        assert!(!login.matches("GET", "/login//", ""));
        let slashed = Matcher {
            trailing_slash: TrailingSlash::Ignore,
            ..with_path("/login/")
        };
        assert!(slashed.matches("GET", "/login", ""));
        assert!(slashed.matches("GET", "/login/", ""));
        let order = Matcher {
            trailing_slash: TrailingSlash::Ignore,
            ..with_path("/orders/{id}")
        };
        assert!(order.matches("GET", "/orders/42/", ""));
        assert!(!order.matches("GET", "/orders/", ""));
        let root = Matcher {
            trailing_slash: TrailingSlash::Ignore,
            ..with_path("/")
        };
        assert!(root.matches("GET", "/", ""));
        assert!(!root.matches("GET", "/a", ""));
        let api = Matcher {
            trailing_slash: TrailingSlash::Ignore,
            ..with_prefix("/api/")
        };
        assert!(api.matches("GET", "/api", ""));
        assert!(api.matches("GET", "/api/", ""));
        assert!(api.matches("GET", "/api/x", ""));
        assert!(!api.matches("GET", "/apix", ""));
        let both = Matcher {
            trailing_slash: TrailingSlash::Ignore,
            case_insensitive: true,
            ..with_prefix("/api/")
        };
        assert!(both.matches("GET", "/API", ""));
    }

    #[test]
    fn the_canonical_path_is_one_bucket_for_spellings_matched_alike() {
        let m = Matcher {
            case_insensitive: true,
            trailing_slash: TrailingSlash::Ignore,
            ..with_path("/login")
        };
        for spelling in ["/login", "/LOGIN", "/LoGiN/", "/login/"] {
            assert_eq!(m.canonical_path(spelling), "/login", "{spelling}");
        }
        assert_eq!(m.canonical_path("/"), "/");
        assert!(matches!(
            m.canonical_path("/login/"),
            Cow::Borrowed("/login")
        ));
        let cased = Matcher {
            case_insensitive: true,
            ..Matcher::default()
        };
        assert_eq!(cased.canonical_path("/A/B/"), "/a/b/");
        let slash = Matcher {
            trailing_slash: TrailingSlash::Ignore,
            ..Matcher::default()
        };
        assert_eq!(slash.canonical_path("/A/B/"), "/A/B");
    }
}
