//! What of the `server` section every door reads: the two fields the
//! policies depend on (the identity key's variable, shadow mode), and how
//! a request is read ([`RequestSettings`]: whose `X-Forwarded-For` is
//! believed, the longest identity, the request id header). Defined here
//! once: the server's section declares these fields with these defaults,
//! readers and checks, and a tower layer reads them from the same file.

use http::HeaderName;
use ipnet::IpNet;
use serde::Deserialize;
use serde_json::Value;
use tollgate_core::{ConfigError, describe, node_path};

use crate::fields::deserialize_at;

/// The variable holding the identity key when `server.identity_key_env`
/// names none.
pub const DEFAULT_IDENTITY_KEY_ENV: &str = "TOLLGATE_IDENTITY_KEY";

/// The longest encoded identity keyed when `server.max_key_bytes` is not
/// set: longer ones are refused (400), never cut.
pub const DEFAULT_MAX_KEY_BYTES: usize = 1024;

/// The `server` fields the shared part of a config depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerFields {
    /// `server.identity_key_env`: the variable holding the identity key.
    pub identity_key_env: String,
    /// `server.shadow_mode`.
    pub shadow_mode: bool,
    /// How every door reads a request.
    pub request: RequestSettings,
    /// Whether requests are read by this config: a policy hashing an API
    /// key then needs the identity key. `false` for a reader of the
    /// policies alone (`tollgate replay`, whose trace carries identities
    /// already keyed), which builds no hasher without a key.
    pub reads_requests: bool,
}

impl Default for ServerFields {
    fn default() -> Self {
        Self {
            identity_key_env: DEFAULT_IDENTITY_KEY_ENV.to_owned(),
            shadow_mode: false,
            request: RequestSettings::default(),
            reads_requests: true,
        }
    }
}

impl ServerFields {
    /// These fields as `server` states them; the server's other settings
    /// are not read here (`tollgate validate` reads them all).
    pub fn read(server: Option<&Value>) -> Result<Self, ConfigError> {
        let mut fields = Self::default();
        let Some(Value::Object(map)) = server else {
            return match server {
                None | Some(Value::Null) => Ok(fields),
                Some(other) => Err(ConfigError::Document(format!(
                    "server: expected a mapping, got {}",
                    describe(other)
                ))
                .at(node_path!["server"])),
            };
        };
        match map.get("identity_key_env") {
            None => {}
            Some(Value::String(name)) => fields.identity_key_env.clone_from(name),
            Some(other) => {
                return Err(ConfigError::Document(format!(
                    "server: identity_key_env must be a variable name, got {}",
                    describe(other)
                ))
                .at(node_path!["server", "identity_key_env"]));
            }
        }
        match map.get("shadow_mode") {
            None => {}
            Some(Value::Bool(on)) => fields.shadow_mode = *on,
            Some(other) => {
                return Err(ConfigError::Document(format!(
                    "server: shadow_mode must be true or false, got {}",
                    describe(other)
                ))
                .at(node_path!["server", "shadow_mode"]));
            }
        }
        fields.request = RequestSettings::read(server)?;
        Ok(fields)
    }
}

/// How every door reads a request: `server.trusted_proxies`,
/// `server.max_key_bytes` and `server.request_id_header`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct RequestSettings {
    /// Peers whose `X-Forwarded-For` / `X-Real-IP`, and whose description
    /// of the original request (`forward_auth`), are believed: CIDR networks
    /// or single addresses.
    #[serde(deserialize_with = "trusted_proxies")]
    pub trusted_proxies: Vec<IpNet>,
    /// Largest encoded identity accepted.
    pub max_key_bytes: usize,
    /// The header carrying a request id (e.g.
    /// draft-ietf-httpapi-idempotency-key-header's `Idempotency-Key`): a
    /// retry under the same id is charged once. Off unless named: the id is
    /// the *client's* header, and a client reusing one id is admitted for
    /// one charge unless the application behind honours it.
    #[serde(deserialize_with = "request_id_header")]
    pub request_id_header: Option<HeaderName>,
}

impl Default for RequestSettings {
    fn default() -> Self {
        Self {
            trusted_proxies: Vec::new(),
            max_key_bytes: DEFAULT_MAX_KEY_BYTES,
            request_id_header: None,
        }
    }
}

impl RequestSettings {
    /// These settings as the `server` mapping states them (absent: the
    /// defaults), checked; its other fields are the server's.
    pub fn read(server: Option<&Value>) -> Result<Self, ConfigError> {
        let settings: Self = match server {
            None | Some(Value::Null) => Self::default(),
            Some(v) => deserialize_at(v, node_path!["server"], "server")?,
        };
        settings.validate()?;
        Ok(settings)
    }

    /// Refuses what serde accepts but cannot serve: an identity bound of 0.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_key_bytes == 0 {
            return Err(
                ConfigError::Document("server: max_key_bytes must be positive".to_owned())
                    .at(node_path!["server", "max_key_bytes"]),
            );
        }
        Ok(())
    }
}

/// `server.trusted_proxies`: CIDR networks or single addresses.
pub fn trusted_proxies<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
    let texts = Vec::<String>::deserialize(d)?;
    texts
        .iter()
        .map(|t| {
            t.parse::<IpNet>()
                .or_else(|_| t.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    serde::de::Error::custom(format!(
                        "trusted_proxies: {t:?} is not an IP address or CIDR network"
                    ))
                })
        })
        .collect()
}

/// `server.request_id_header`: a header name.
pub fn request_id_header<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<HeaderName>, D::Error> {
    let text = String::deserialize(d)?;
    HeaderName::from_bytes(text.as_bytes())
        .map(Some)
        .map_err(|_| {
            serde::de::Error::custom(format!("request_id_header: {text:?} is not a header name"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> Result<RequestSettings, String> {
        let value: Value = tollgate_core::parse_yaml(yaml).map_err(|e| e.to_string())?;
        RequestSettings::read(Some(&value)).map_err(|e| e.to_string())
    }

    #[test]
    fn the_request_settings_are_read_beside_the_servers_own_fields() {
        let settings = read(
            "{listen: 0.0.0.0:80, trusted_proxies: [10.0.0.1, 192.168.0.0/16], max_key_bytes: 64, request_id_header: Idempotency-Key}",
        )
        .expect("valid");
        assert_eq!(
            settings,
            RequestSettings {
                trusted_proxies: vec![
                    "10.0.0.1/32".parse().expect("net"),
                    "192.168.0.0/16".parse().expect("net")
                ],
                max_key_bytes: 64,
                request_id_header: Some(HeaderName::from_static("idempotency-key")),
            }
        );
        assert_eq!(
            RequestSettings::read(None).expect("defaults"),
            RequestSettings::default()
        );
    }

    #[test]
    fn a_bad_request_setting_is_refused_naming_it() {
        assert_eq!(
            read("{trusted_proxies: [proxy]}").expect_err("refused"),
            "config: server: trusted_proxies: \"proxy\" is not an IP address or CIDR network"
        );
        assert_eq!(
            read("{max_key_bytes: 0}").expect_err("refused"),
            "config: server: max_key_bytes must be positive"
        );
        assert_eq!(
            read("{request_id_header: \"a b\"}").expect_err("refused"),
            "config: server: request_id_header: \"a b\" is not a header name"
        );
    }
}
