//! Bearer tokens for tollgate's own endpoints: the decision API
//! (`POST /v1/check`, gRPC `ShouldRateLimit`), the admin endpoints
//! (`/v1/policies`) and `/metrics`, each guarded by its own optional token
//! read from the environment. Without a token an endpoint stays open, as a
//! loopback deployment needs, unless the config's `server.require_tokens`
//! names its group: then a missing token refuses the config, so a
//! deployment cannot come up open by forgetting a variable.
//!
//! Only a BLAKE3 hash of each token is kept, and a presented token is
//! hashed and compared in constant time, so neither memory dumps, `Debug`
//! output nor response timing give a token away. `/v1/authorize` carries
//! its token in [`AUTHORIZE_TOKEN_HEADER`], not `Authorization`: that
//! header belongs to the client being limited, and the proxy forwards it
//! as it is. The proxy sets its own header over any a client sent, so a
//! client cannot forge it; without it any local process could describe a
//! login from any address and lock that address out.

use std::fmt;

use hyper::http::{HeaderMap, HeaderValue};

/// The header the proxy sends `/v1/authorize`'s token in, as
/// `Bearer <token>` (examples/nginx.conf and examples/Caddyfile set it).
pub const AUTHORIZE_TOKEN_HEADER: &str = "tollgate-authorization";

/// A token shorter than this is refused at load: it could be guessed.
pub const MIN_TOKEN_BYTES: usize = 16;

/// An endpoint group that a token may guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guarded {
    /// `POST /v1/check` and gRPC `ShouldRateLimit`.
    Check,
    /// `/v1/policies`, `/v1/state` and `/v1/hot`.
    Admin,
    /// `/metrics`.
    Metrics,
    /// `/v1/authorize`, its token in [`AUTHORIZE_TOKEN_HEADER`].
    Authorize,
}

impl Guarded {
    /// Every group.
    pub const ALL: [Guarded; 4] = [
        Guarded::Check,
        Guarded::Admin,
        Guarded::Metrics,
        Guarded::Authorize,
    ];

    /// The environment variable holding this group's token.
    pub const fn env(self) -> &'static str {
        match self {
            Guarded::Check => "TOLLGATE_CHECK_TOKEN",
            Guarded::Admin => "TOLLGATE_ADMIN_TOKEN",
            Guarded::Metrics => "TOLLGATE_METRICS_TOKEN",
            Guarded::Authorize => "TOLLGATE_AUTHORIZE_TOKEN",
        }
    }

    /// Its name in the config (`server.require_tokens`).
    pub const fn name(self) -> &'static str {
        match self {
            Guarded::Check => "check",
            Guarded::Admin => "admin",
            Guarded::Metrics => "metrics",
            Guarded::Authorize => "authorize",
        }
    }

    /// The header its token comes in.
    pub const fn header(self) -> &'static str {
        match self {
            Guarded::Authorize => AUTHORIZE_TOKEN_HEADER,
            Guarded::Check | Guarded::Admin | Guarded::Metrics => "authorization",
        }
    }

    /// The group named `name` in the config.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|group| group.name() == name)
    }
}

/// Why a token in the environment was refused. The token itself is never
/// part of the message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    /// The variable is set to the empty string.
    #[error("{var} is set but empty (unset it to leave the endpoint open)")]
    Empty {
        /// The variable's name.
        var: &'static str,
    },
    /// The token is too short to resist guessing.
    #[error("{var} is shorter than {MIN_TOKEN_BYTES} bytes; use a longer, random token")]
    TooShort {
        /// The variable's name.
        var: &'static str,
    },
    /// The token has a character a bearer header cannot carry.
    #[error(
        "{var} must be printable ASCII without spaces (it is sent in an `Authorization: Bearer` header)"
    )]
    NotPrintable {
        /// The variable's name.
        var: &'static str,
    },
    /// `server.require_tokens` names a group whose variable is unset.
    #[error(
        "server.require_tokens names {group}, but {var} is not set: set it to a random token of at least {MIN_TOKEN_BYTES} bytes (e.g. `openssl rand -hex 32`), or take {group} out of the list to leave those endpoints open"
    )]
    Required {
        /// The group's name in the config.
        group: &'static str,
        /// The variable's name.
        var: &'static str,
    },
}

/// A token as kept in memory: its BLAKE3 hash only.
#[derive(Clone)]
pub struct Token(blake3::Hash);

impl Token {
    fn new(var: &'static str, text: &str) -> Result<Self, TokenError> {
        if text.is_empty() {
            return Err(TokenError::Empty { var });
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError::NotPrintable { var });
        }
        if text.len() < MIN_TOKEN_BYTES {
            return Err(TokenError::TooShort { var });
        }
        Ok(Self(blake3::hash(text.as_bytes())))
    }

    /// Whether `presented` is this token. `blake3::Hash`'s `==` is
    /// constant-time (it compares with `constant_time_eq`), and hashing
    /// first makes the time independent of how much of the token matched.
    fn admits(&self, presented: &[u8]) -> bool {
        blake3::hash(presented) == self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// The tokens of the endpoint groups; `None` leaves a group open.
#[derive(Clone, Default)]
pub struct EndpointTokens {
    check: Option<Token>,
    admin: Option<Token>,
    metrics: Option<Token>,
    authorize: Option<Token>,
}

impl EndpointTokens {
    /// Reads `TOLLGATE_CHECK_TOKEN`, `TOLLGATE_ADMIN_TOKEN`,
    /// `TOLLGATE_METRICS_TOKEN` and `TOLLGATE_AUTHORIZE_TOKEN` through `env`.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<Self, TokenError> {
        let read = |group: Guarded| {
            env(group.env())
                .map(|text| Token::new(group.env(), &text))
                .transpose()
        };
        Ok(Self {
            check: read(Guarded::Check)?,
            admin: read(Guarded::Admin)?,
            metrics: read(Guarded::Metrics)?,
            authorize: read(Guarded::Authorize)?,
        })
    }

    fn token(&self, group: Guarded) -> Option<&Token> {
        match group {
            Guarded::Check => self.check.as_ref(),
            Guarded::Admin => self.admin.as_ref(),
            Guarded::Metrics => self.metrics.as_ref(),
            Guarded::Authorize => self.authorize.as_ref(),
        }
    }

    /// Whether a token guards `group`.
    pub fn guards(&self, group: Guarded) -> bool {
        self.token(group).is_some()
    }

    /// Refuses when a group in `required` (`server.require_tokens`) has
    /// no token: its endpoints would be open to any caller that reaches
    /// the listener.
    pub fn require(&self, required: &[Guarded]) -> Result<(), TokenError> {
        match required.iter().find(|group| !self.guards(**group)) {
            Some(group) => Err(TokenError::Required {
                group: group.name(),
                var: group.env(),
            }),
            None => Ok(()),
        }
    }

    /// Whether a request whose `Authorization` value is `authorization`
    /// may use `group`: always when no token guards it (an `Option` test,
    /// nothing more, on the decision path).
    #[inline]
    pub fn admits(&self, group: Guarded, authorization: Option<&[u8]>) -> bool {
        match self.token(group) {
            None => true,
            Some(token) => authorization
                .and_then(bearer)
                .is_some_and(|presented| token.admits(presented)),
        }
    }

    /// [`Self::admits`] for an HTTP request's headers: the group's
    /// [`Guarded::header`].
    #[inline]
    pub fn admits_headers(&self, group: Guarded, headers: &HeaderMap) -> bool {
        self.token(group).is_none()
            || self.admits(
                group,
                headers.get(group.header()).map(HeaderValue::as_bytes),
            )
    }
}

impl fmt::Debug for EndpointTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = |t: &Option<Token>| if t.is_some() { "set" } else { "unset" };
        f.debug_struct("EndpointTokens")
            .field("check", &state(&self.check))
            .field("admin", &state(&self.admin))
            .field("metrics", &state(&self.metrics))
            .field("authorize", &state(&self.authorize))
            .finish()
    }
}

/// The token of `Bearer <token>` (the scheme is case-insensitive, as
/// HTTP's auth schemes are).
fn bearer(authorization: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = authorization.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") || rest.first() != Some(&b' ') {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// The detail of a 401 and of a gRPC `UNAUTHENTICATED`: what the endpoint
/// needs, in tollgate's words; never what the client sent.
pub fn needs_token(group: Guarded) -> String {
    let header = match group {
        Guarded::Authorize => "Tollgate-Authorization",
        Guarded::Check | Guarded::Admin | Guarded::Metrics => "Authorization",
    };
    format!(
        "this endpoint needs `{header}: Bearer <token>` ({})",
        group.env()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "s3cret-token-0123456789";

    fn tokens(check: Option<&str>) -> Result<EndpointTokens, TokenError> {
        EndpointTokens::from_env(|name| {
            (name == "TOLLGATE_CHECK_TOKEN")
                .then(|| check.map(str::to_owned))
                .flatten()
        })
    }

    #[test]
    fn an_unset_token_leaves_its_endpoint_open() {
        let tokens = tokens(None).expect("no tokens is valid");
        for group in Guarded::ALL {
            assert!(!tokens.guards(group));
            assert!(tokens.admits(group, None));
            assert!(tokens.admits(group, Some(b"Bearer anything")));
        }
    }

    #[test]
    fn a_set_token_admits_only_itself_as_a_bearer_token() {
        let tokens = tokens(Some(TOKEN)).expect("valid token");
        assert!(tokens.guards(Guarded::Check));
        assert!(!tokens.guards(Guarded::Admin));
        let with = |value: &str| tokens.admits(Guarded::Check, Some(value.as_bytes()));
        assert!(with(&format!("Bearer {TOKEN}")));
        assert!(with(&format!("bearer {TOKEN}")));
        assert!(with(&format!("BEARER  {TOKEN} ")));
        assert!(!tokens.admits(Guarded::Check, None));
        assert!(!with(""));
        assert!(!with("Bearer"));
        assert!(!with("Bearer "));
        assert!(!with(TOKEN));
        assert!(!with(&format!("Basic {TOKEN}")));
        assert!(!with(&format!("Bearer{TOKEN}")));
        assert!(!with(&format!("Bearer {TOKEN}x")));
        assert!(!with(&format!("Bearer {}", &TOKEN[1..])));
        // Other groups stay open.
        assert!(tokens.admits(Guarded::Admin, None));
    }

    #[test]
    fn empty_short_or_unprintable_tokens_are_refused_without_echoing_them() {
        let var = "TOLLGATE_CHECK_TOKEN";
        assert_eq!(tokens(Some("")).err(), Some(TokenError::Empty { var }));
        assert_eq!(
            tokens(Some("fifteen-bytes!!")).err(),
            Some(TokenError::TooShort { var })
        );
        assert_eq!(
            tokens(Some("sixteen bytes with a space")).err(),
            Some(TokenError::NotPrintable { var })
        );
        assert_eq!(
            TokenError::TooShort { var }.to_string(),
            "TOLLGATE_CHECK_TOKEN is shorter than 16 bytes; use a longer, random token"
        );
        assert_eq!(
            TokenError::Empty { var }.to_string(),
            "TOLLGATE_CHECK_TOKEN is set but empty (unset it to leave the endpoint open)"
        );
        assert!(tokens(Some("sixteen-bytes-ok")).is_ok());
    }

    #[test]
    fn a_required_group_without_its_token_is_refused_by_name() {
        let tokens = tokens(Some(TOKEN)).expect("valid token");
        assert_eq!(tokens.require(&[]), Ok(()));
        assert_eq!(tokens.require(&[Guarded::Check]), Ok(()));
        let refused = tokens.require(&Guarded::ALL);
        assert_eq!(
            refused.map_err(|e| e.to_string()),
            Err("server.require_tokens names admin, but TOLLGATE_ADMIN_TOKEN is not set: set it to a random token of at least 16 bytes (e.g. `openssl rand -hex 32`), or take admin out of the list to leave those endpoints open".to_owned())
        );
        assert_eq!(Guarded::from_name("metrics"), Some(Guarded::Metrics));
        assert_eq!(Guarded::from_name("authorize"), Some(Guarded::Authorize));
        assert_eq!(Guarded::from_name("Admin"), None);
    }

    #[test]
    fn debug_output_holds_no_secret() {
        let tokens = tokens(Some(TOKEN)).expect("valid token");
        let shown = format!("{tokens:?}");
        assert_eq!(
            shown,
            "EndpointTokens { check: \"set\", admin: \"unset\", metrics: \"unset\", authorize: \"unset\" }"
        );
        let hash = blake3::hash(TOKEN.as_bytes()).to_hex().to_string();
        assert!(!shown.contains(&hash));
        assert_eq!(format!("{:?}", tokens.check), "Some(Token(<redacted>))");
    }

    #[test]
    fn the_authorize_token_is_read_from_its_own_header_never_the_clients_authorization() {
        let tokens = EndpointTokens::from_env(|name| {
            (name == "TOLLGATE_AUTHORIZE_TOKEN").then(|| TOKEN.to_owned())
        })
        .expect("valid token");
        assert!(tokens.guards(Guarded::Authorize));
        let with = |name: &str, value: String| {
            let mut headers = HeaderMap::new();
            headers.insert(
                hyper::http::HeaderName::from_bytes(name.as_bytes()).expect("name"),
                HeaderValue::from_str(&value).expect("value"),
            );
            tokens.admits_headers(Guarded::Authorize, &headers)
        };
        assert!(with("Tollgate-Authorization", format!("Bearer {TOKEN}")));
        assert!(!with("Authorization", format!("Bearer {TOKEN}")));
        assert!(!with("Tollgate-Authorization", TOKEN.to_owned()));
        assert!(!tokens.admits_headers(Guarded::Authorize, &HeaderMap::new()));
        assert_eq!(
            needs_token(Guarded::Authorize),
            "this endpoint needs `Tollgate-Authorization: Bearer <token>` (TOLLGATE_AUTHORIZE_TOKEN)"
        );
    }
}
