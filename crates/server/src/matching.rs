//! Which requests a policy applies to: methods, a path prefix or pattern,
//! and a host. An absent part matches everything.

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

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn matches(&self, path: &str) -> bool {
        let Some(body) = path.strip_prefix('/') else {
            return false;
        };
        let mut parts = if body.is_empty() {
            None
        } else {
            Some(body.split('/'))
        };
        for segment in &self.segments {
            match segment {
                Segment::Rest => return true,
                Segment::Any | Segment::Literal(_) => {
                    let Some(part) = parts.as_mut().and_then(Iterator::next) else {
                        return false;
                    };
                    match segment {
                        Segment::Literal(l) if l != part => return false,
                        Segment::Any if part.is_empty() => return false,
                        _ => {}
                    }
                }
            }
        }
        parts.is_none_or(|mut rest| rest.next().is_none())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Matcher {
    /// Upper-case method names.
    pub methods: Option<Vec<String>>,
    pub path_prefix: Option<String>,
    pub path: Option<PathPattern>,
    /// Lower-case; `*.example.com` matches any subdomain.
    pub host: Option<String>,
}

impl Matcher {
    pub fn matches(&self, method: &str, path: &str, host: &str) -> bool {
        let method_ok = self
            .methods
            .as_ref()
            .is_none_or(|ms| ms.iter().any(|m| m.eq_ignore_ascii_case(method)));
        let prefix_ok = self
            .path_prefix
            .as_ref()
            .is_none_or(|prefix| path.starts_with(prefix.as_str()));
        let pattern_ok = self.path.as_ref().is_none_or(|p| p.matches(path));
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
            let ok = match want.strip_prefix("*.") {
                Some(suffix) => {
                    host.len() > suffix.len() + 1
                        && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
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
}
