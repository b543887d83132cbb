//! A shipped config's policies as the attacks read them, straight from
//! the YAML (not from tollgate's own reading of it): which requests each
//! matches, its limit, and what a request needs to carry for its identity.

use serde_json::Value;

/// One policy with a `match` that names a path.
#[derive(Debug, Clone)]
pub struct PathPolicy {
    pub name: String,
    /// Upper-case; `None`: every method.
    pub methods: Option<Vec<String>>,
    /// A concrete path the match takes: the pattern with its parameters
    /// filled in, or the prefix with a segment after it.
    pub path: String,
    /// `limit`, or `capacity` for the buckets.
    pub limit: u64,
    /// Header lines a request needs for the identity's other parts.
    pub identity_headers: String,
    /// Whether the identity holds the client's address.
    pub per_client_ip: bool,
    /// Whether the identity needs a header (an API key, a bearer token, a
    /// tenant header): a request without it must be refused, never put in
    /// a shared bucket.
    pub needs_header: bool,
}

impl PathPolicy {
    pub fn takes(&self, method: &str) -> bool {
        self.methods
            .as_ref()
            .is_none_or(|ms| ms.iter().any(|m| m == method))
    }

    /// A login: its path names one and it takes POST.
    pub fn is_login(&self) -> bool {
        self.path.to_ascii_lowercase().contains("login") && self.takes("POST")
    }
}

/// The policies of `config` whose `match` names a path.
pub fn path_policies(config: &Value) -> Vec<PathPolicy> {
    let Some(policies) = config["policies"].as_array() else {
        return Vec::new();
    };
    policies.iter().filter_map(path_policy).collect()
}

fn path_policy(policy: &Value) -> Option<PathPolicy> {
    let m = &policy["match"];
    let path = match (m["path"].as_str(), m["path_prefix"].as_str()) {
        (Some(pattern), _) => fill_pattern(pattern),
        (None, Some(prefix)) if prefix.ends_with('/') => format!("{prefix}orders"),
        (None, Some(prefix)) => format!("{prefix}/orders"),
        (None, None) => return None,
    };
    let methods = m["methods"].as_array().map(|ms| {
        ms.iter()
            .filter_map(|x| x.as_str().map(str::to_ascii_uppercase))
            .collect()
    });
    let limit = policy["limit"]
        .as_u64()
        .or_else(|| policy["capacity"].as_u64())
        .expect("a limit or a capacity");
    let parts = policy["identity"].as_array().cloned();
    let mut identity_headers = String::new();
    let mut per_client_ip = parts.is_none();
    let mut needs_header = false;
    for part in parts.unwrap_or_default() {
        match (&part, part.as_object().and_then(|o| o.iter().next())) {
            (Value::String(name), _) if name == "client_ip" => per_client_ip = true,
            (Value::String(name), _) if name == "bearer" => {
                needs_header = true;
                identity_headers.push_str("Authorization: Bearer shipped-test-bearer\r\n");
            }
            (_, Some((kind, header))) if kind == "header" || kind == "api_key" => {
                needs_header = true;
                let header = header.as_str().expect("a header name");
                identity_headers.push_str(&format!("{header}: shipped-test-{kind}\r\n"));
            }
            (_, Some((kind, _))) if kind == "client_ip" => per_client_ip = true,
            _ => {}
        }
    }
    Some(PathPolicy {
        name: policy["name"].as_str().expect("a name").to_owned(),
        methods,
        path,
        limit,
        identity_headers,
        per_client_ip,
        needs_header,
    })
}

/// `/orders/{id}/{*rest}` as a request path: `/orders/x1/rest`.
fn fill_pattern(pattern: &str) -> String {
    pattern
        .split('/')
        .map(|segment| match segment.strip_prefix('{') {
            Some(inner) if inner.starts_with('*') => "rest",
            Some(_) => "x1",
            None => segment,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The spellings of `path` a router may take for it: any case, a trailing
/// slash, a format suffix, doubled slashes and a percent-escape.
pub fn spellings(path: &str) -> Vec<String> {
    let (first, rest) = path[1..].split_at(1);
    vec![
        path.to_owned(),
        path.to_ascii_uppercase(),
        format!("/{}{rest}", first.to_ascii_uppercase()),
        format!("{path}/"),
        format!("{path}.json"),
        format!("/{path}"),
        format!("/%{:02X}{rest}", first.as_bytes()[0]),
    ]
}
