//! What to export, from `server.otlp` and the OpenTelemetry environment.
//! A variable the environment sets wins over the file, as
//! `TOLLGATE_SHADOW_MODE` wins over `server.shadow_mode`: an operator
//! redirects traces without editing the config.
//!
//! Export is on when the file has an `otlp` section, an endpoint variable
//! is set, or `OTEL_TRACES_EXPORTER=otlp`; `OTEL_SDK_DISABLED=true` or
//! `OTEL_TRACES_EXPORTER=none` turns it off whatever else says.

use crate::config::{OtlpFile, Protocol, SamplerName, sampler_ratio};

/// Resolved export settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Exporting {
    /// Where spans are sent: the gRPC address, or the HTTP URL that
    /// receives them (`…/v1/traces`).
    pub endpoint: String,
    /// How.
    pub protocol: Protocol,
    /// Every span's `service.name`.
    pub service_name: String,
    /// Which traces are kept.
    pub sampler: SamplerName,
    /// The ratio of a `traceidratio` sampler.
    pub ratio: f64,
}

/// The export `file` and `env` (a variable's value by name) ask for, or
/// `None` when they ask for none; a value neither can mean is an error
/// naming its variable or field.
pub fn resolve(
    file: Option<&OtlpFile>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Exporting>, String> {
    let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let exporter = var("OTEL_TRACES_EXPORTER");
    match exporter.as_deref().map(str::trim) {
        Some("none") => return Ok(None),
        Some("otlp") | None => {}
        Some(other) => {
            return Err(format!(
                "OTEL_TRACES_EXPORTER={other:?}: tollgate exports traces only over otlp (or none)"
            ));
        }
    }
    let signal_endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    let base_endpoint = var("OTEL_EXPORTER_OTLP_ENDPOINT");
    let asked = file.is_some()
        || exporter.is_some()
        || signal_endpoint.is_some()
        || base_endpoint.is_some();
    if !asked {
        return Ok(None);
    }
    let file = file.cloned().unwrap_or_default();
    let protocol_var = [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ]
    .into_iter()
    .find_map(|name| var(name).map(|words| (name, words)));
    let protocol = match protocol_var {
        Some((name, words)) => words
            .trim()
            .parse()
            .map_err(|fault| format!("{name}: {fault}"))?,
        None => file.protocol.unwrap_or(Protocol::HttpProtobuf),
    };
    // A signal's own endpoint is used as written; a base endpoint, from the
    // environment or the file, gets the signal's path over HTTP.
    let endpoint = match (signal_endpoint, base_endpoint.or(file.endpoint)) {
        (Some(url), _) => url,
        (None, Some(base)) => with_signal_path(protocol, &base),
        (None, None) => with_signal_path(protocol, protocol.default_endpoint()),
    };
    let service_name = var("OTEL_SERVICE_NAME")
        .or(file.service_name)
        .unwrap_or_else(|| "tollgate".to_owned());
    let sampler = match var("OTEL_TRACES_SAMPLER") {
        Some(words) => words
            .trim()
            .parse()
            .map_err(|fault| format!("OTEL_TRACES_SAMPLER: {fault}"))?,
        None => file.sampler.unwrap_or(SamplerName::ParentBasedAlwaysOn),
    };
    let ratio = match var("OTEL_TRACES_SAMPLER_ARG") {
        Some(words) => {
            let value: f64 = words
                .trim()
                .parse()
                .map_err(|_| format!("OTEL_TRACES_SAMPLER_ARG: {words:?} is not a number"))?;
            sampler_ratio(value).map_err(|fault| format!("OTEL_TRACES_SAMPLER_ARG: {fault}"))?
        }
        None => file.sampler_arg.unwrap_or(1.0),
    };
    Ok(Some(Exporting {
        endpoint,
        protocol,
        service_name,
        sampler,
        ratio,
    }))
}

/// `base` with `/v1/traces` added over HTTP; a gRPC address as it is.
fn with_signal_path(protocol: Protocol, base: &str) -> String {
    match protocol {
        Protocol::Grpc => base.to_owned(),
        Protocol::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn nothing_asked_exports_nothing() {
        assert_eq!(resolve(None, &env_of(&[])), Ok(None));
        assert_eq!(
            resolve(None, &env_of(&[("OTEL_SERVICE_NAME", "api")])),
            Ok(None)
        );
    }

    #[test]
    fn a_base_endpoint_over_http_gets_the_signal_path() {
        let env = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")]);
        let exporting = resolve(None, &env).expect("resolves").expect("exports");
        assert_eq!(
            exporting,
            Exporting {
                endpoint: "http://collector:4318/v1/traces".to_owned(),
                protocol: Protocol::HttpProtobuf,
                service_name: "tollgate".to_owned(),
                sampler: SamplerName::ParentBasedAlwaysOn,
                ratio: 1.0,
            }
        );
    }

    #[test]
    fn the_environment_wins_over_the_file() {
        let file = OtlpFile {
            endpoint: Some("http://file:4317".to_owned()),
            protocol: Some(Protocol::Grpc),
            service_name: Some("from-file".to_owned()),
            sampler: Some(SamplerName::AlwaysOff),
            sampler_arg: Some(0.5),
        };
        let from_file = resolve(Some(&file), &env_of(&[]))
            .expect("resolves")
            .expect("exports");
        assert_eq!(from_file.endpoint, "http://file:4317");
        assert_eq!(from_file.protocol, Protocol::Grpc);
        assert_eq!(from_file.service_name, "from-file");
        assert_eq!(from_file.sampler, SamplerName::AlwaysOff);
        assert_eq!(from_file.ratio, 0.5);
        let env = env_of(&[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://env:4318/custom",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_SERVICE_NAME", "from-env"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ]);
        let from_env = resolve(Some(&file), &env)
            .expect("resolves")
            .expect("exports");
        assert_eq!(from_env.endpoint, "http://env:4318/custom");
        assert_eq!(from_env.protocol, Protocol::HttpProtobuf);
        assert_eq!(from_env.service_name, "from-env");
        assert_eq!(from_env.sampler, SamplerName::ParentBasedTraceIdRatio);
        assert_eq!(from_env.ratio, 0.25);
    }

    #[test]
    fn disabled_wins_over_everything() {
        let file = OtlpFile::default();
        let env = env_of(&[
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
        ]);
        assert_eq!(resolve(Some(&file), &env), Ok(None));
        let none = env_of(&[("OTEL_TRACES_EXPORTER", "none")]);
        assert_eq!(resolve(Some(&file), &none), Ok(None));
    }

    #[test]
    fn bad_values_name_their_variable() {
        let cases: [(&'static [(&'static str, &'static str)], &str); 4] = [
            (
                &[("OTEL_TRACES_EXPORTER", "jaeger")],
                "OTEL_TRACES_EXPORTER=\"jaeger\": tollgate exports traces only over otlp (or none)",
            ),
            (
                &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
                "OTEL_EXPORTER_OTLP_PROTOCOL: unknown OTLP protocol \"http/json\" (expected grpc or http/protobuf)",
            ),
            (
                &[("OTEL_TRACES_SAMPLER", "sometimes")],
                "OTEL_TRACES_SAMPLER: unknown sampler \"sometimes\" (expected always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio)",
            ),
            (
                &[("OTEL_TRACES_SAMPLER_ARG", "1.5")],
                "OTEL_TRACES_SAMPLER_ARG: sampler_arg 1.5 is outside 0..=1",
            ),
        ];
        for (pairs, message) in cases {
            let file = OtlpFile::default();
            assert_eq!(
                resolve(Some(&file), &env_of(pairs)),
                Err(message.to_owned())
            );
        }
    }
}
