//! Which header fields describe the original request to forward auth,
//! by proxy family. Only these are read, and only from a trusted proxy.

use http::HeaderName;

/// Which headers describe the original request to `/v1/authorize`. Only
/// these are read, and only from a peer in `trusted_proxies`: a header of
/// another family is never believed, whoever sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardAuth {
    /// `nginx`, `traefik`, `envoy`, `custom` or `off`, for messages and docs.
    pub family: &'static str,
    /// The original method; absent: the call's own method.
    pub method: Option<HeaderName>,
    /// The original request target; absent: the call's own path (below
    /// `/v1/authorize/` when the proxy appends it there, as Envoy does).
    pub uri: Option<HeaderName>,
    /// The original host; absent: the call's own `Host`.
    pub host: Option<HeaderName>,
}

impl ForwardAuth {
    /// No forward auth: `/v1/authorize` answers 404, for a tollgate that
    /// only services ask (`/v1/check`, `/v1/release`), such as the one a
    /// tower layer's `RemoteTollgate` shares a config file with.
    pub fn off() -> Self {
        Self {
            family: "off",
            method: None,
            uri: None,
            host: None,
        }
    }

    /// Whether this is [`ForwardAuth::off`].
    pub fn is_off(&self) -> bool {
        self.family == "off"
    }

    /// nginx `auth_request`: `X-Original-Method`, `X-Original-URI` and the
    /// `Host` nginx sets (examples/nginx.conf).
    pub fn nginx() -> Self {
        Self {
            family: "nginx",
            method: Some(HeaderName::from_static("x-original-method")),
            uri: Some(HeaderName::from_static("x-original-uri")),
            host: None,
        }
    }

    /// Traefik ForwardAuth: `X-Forwarded-Method`, `-Uri`, `-Host`.
    pub fn traefik() -> Self {
        Self {
            family: "traefik",
            method: Some(HeaderName::from_static("x-forwarded-method")),
            uri: Some(HeaderName::from_static("x-forwarded-uri")),
            host: Some(HeaderName::from_static("x-forwarded-host")),
        }
    }

    /// Envoy ext_authz (HTTP): the call itself is the original request
    /// (its method, `path_prefix` + its path, its Host); no header is read.
    /// So is a service's own request, limited where it is served.
    pub fn envoy() -> Self {
        Self {
            family: "envoy",
            method: None,
            uri: None,
            host: None,
        }
    }
}
