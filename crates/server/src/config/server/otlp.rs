//! `server.otlp`: trace export over OTLP, off unless this section or the
//! standard OpenTelemetry environment names an exporter. The words a
//! setting takes are the OpenTelemetry specification's, parsed here once for
//! the file and the environment alike. Read at start.

use std::str::FromStr;

use serde::Deserialize;

/// The section as written; every field may be left to the environment.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpFile {
    /// The collector: for grpc its address (`http://collector:4317`); for
    /// http/protobuf its base URL, to which `/v1/traces` is added.
    pub endpoint: Option<String>,
    /// `grpc` or `http/protobuf`.
    #[serde(deserialize_with = "from_words")]
    pub protocol: Option<Protocol>,
    /// The `service.name` of every span.
    pub service_name: Option<String>,
    /// Which traces are kept (`parentbased_always_on`, …).
    #[serde(deserialize_with = "from_words")]
    pub sampler: Option<SamplerName>,
    /// The ratio of the `traceidratio` samplers, 0 to 1.
    pub sampler_arg: Option<f64>,
}

/// How spans reach the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP over gRPC (port 4317 by convention).
    Grpc,
    /// OTLP as protobuf over HTTP POST (port 4318 by convention).
    HttpProtobuf,
}

impl Protocol {
    /// The collector's conventional address for this protocol.
    pub fn default_endpoint(self) -> &'static str {
        match self {
            Protocol::Grpc => "http://localhost:4317",
            Protocol::HttpProtobuf => "http://localhost:4318",
        }
    }

    /// The specification's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
        }
    }
}

impl FromStr for Protocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            other => Err(format!(
                "unknown OTLP protocol {other:?} (expected grpc or http/protobuf)"
            )),
        }
    }
}

/// The specification's samplers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplerName {
    /// Every trace.
    AlwaysOn,
    /// No trace.
    AlwaysOff,
    /// A share of traces by trace id, whatever the parent decided.
    TraceIdRatio,
    /// The parent's decision; every root trace.
    ParentBasedAlwaysOn,
    /// The parent's decision; no root trace.
    ParentBasedAlwaysOff,
    /// The parent's decision; a share of root traces by trace id.
    ParentBasedTraceIdRatio,
}

impl FromStr for SamplerName {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "always_on" => SamplerName::AlwaysOn,
            "always_off" => SamplerName::AlwaysOff,
            "traceidratio" => SamplerName::TraceIdRatio,
            "parentbased_always_on" => SamplerName::ParentBasedAlwaysOn,
            "parentbased_always_off" => SamplerName::ParentBasedAlwaysOff,
            "parentbased_traceidratio" => SamplerName::ParentBasedTraceIdRatio,
            other => {
                return Err(format!(
                    "unknown sampler {other:?} (expected always_on, always_off, traceidratio, \
                     parentbased_always_on, parentbased_always_off or parentbased_traceidratio)"
                ));
            }
        })
    }
}

/// A ratio the `traceidratio` samplers take, checked alike wherever it is
/// written.
pub fn sampler_ratio(value: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(format!("sampler_arg {value} is outside 0..=1"))
    }
}

impl OtlpFile {
    /// Refuses what serde accepts but cannot export.
    pub(super) fn validate(&self) -> Result<(), String> {
        if let Some(arg) = self.sampler_arg {
            sampler_ratio(arg)?;
        }
        if self.endpoint.as_deref().is_some_and(str::is_empty) {
            return Err("endpoint is empty".to_owned());
        }
        Ok(())
    }
}

/// A field read by its [`FromStr`] words.
fn from_words<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: FromStr<Err = String>,
{
    use serde::de::Error;
    let text = String::deserialize(d)?;
    text.parse().map(Some).map_err(D::Error::custom)
}
