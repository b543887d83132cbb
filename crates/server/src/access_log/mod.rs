//! `tollgate trace --from`: an access log (nginx `combined`, Envoy's JSON
//! access log, or JSON lines) as a trace `tollgate replay` decides, one
//! line in, at most one event out, streamed in constant memory (a line
//! is at most [`MAX_LINE_BYTES`]). Each event's identity is one field or
//! header of the line, written as `server.trace` writes keys (the keyed
//! hash the hot identity series use, never the value itself); its time is
//! the line's own; its policies are named, or those of a config whose
//! `match` takes the request, as forward auth picks them.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{self, BufRead, Write};
use std::str::FromStr;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use thiserror::Error;
use tollgate_config::{CostRule, Matcher, ServePolicy, normalize};
use tollgate_core::{Identity, quote};
use tollgate_limiter::HotSeries;

mod cli;
mod formats;
#[cfg(test)]
mod tests;
mod time;

pub use cli::{TraceArgs, trace_command};
pub use formats::LogFormat;
use formats::{Fields, NGINX_COMBINED, parse_json, parse_nginx, split_request};

/// A longer line is refused (and skipped whole, or fatal) rather than
/// buffered without bound.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// The most checks a trace line carries (replay's bound).
const MAX_CHECKS: usize = 64;

/// Where an event's identity is read: `field:NAME` (a field of the log
/// line) or `header:NAME` (a request header the log recorded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentitySource {
    /// A field by its name in the log (`remote_addr`, `x_tenant`).
    Field(String),
    /// A request header, found where the format logs it
    /// ([`LogFormat::header_field`]).
    Header(String),
}

impl FromStr for IdentitySource {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (kind, name) = text.split_once(':').unwrap_or(("", ""));
        if name.is_empty() || name.trim() != name {
            return Err(format!(
                "{}: expected field:NAME or header:NAME",
                quote(text)
            ));
        }
        match kind {
            "field" => Ok(Self::Field(name.to_owned())),
            "header" => Ok(Self::Header(name.to_owned())),
            _ => Err(format!(
                "{}: expected field:NAME or header:NAME",
                quote(text)
            )),
        }
    }
}

/// Which policies a line is checked against.
#[derive(Debug)]
pub enum Policies {
    /// Every line, these policies, at this cost each.
    Named {
        /// The policies, in the order of each line's checks.
        names: Vec<String>,
        /// Each check's cost.
        cost: u64,
    },
    /// Those of a config whose `match` takes the line's request (method,
    /// path, host), each at its own `cost`.
    Matched(Vec<ServePolicy>),
}

/// How a log becomes a trace.
pub struct TraceOptions {
    /// The log's format.
    pub from: LogFormat,
    /// Where each line's identity is read.
    pub identity: IdentitySource,
    /// The policies each line is checked against.
    pub policies: Policies,
    /// The JSON field holding the time (`start_time` for Envoy); unused
    /// for nginx (`$time_local`).
    pub time_field: String,
    /// nginx: the quoted fields logged after combined's eight, by name.
    pub nginx_fields: Vec<String>,
    /// Report a bad line and go on, instead of stopping at it.
    pub skip_bad_lines: bool,
    /// How keys are named: [`HotSeries::Hashed`], as `server.trace` does.
    pub keys: HotSeries,
}

/// Why a trace was not made to the end.
#[derive(Debug, Error)]
pub enum TraceError {
    /// A line could not be made an event (and bad lines are fatal).
    #[error("line {line}: {fault}")]
    Line {
        /// The line's number, from 1.
        line: u64,
        /// What is wrong with it.
        fault: String,
    },
    /// The log could not be read.
    #[error("reading the log: {0}")]
    Input(io::Error),
    /// The trace could not be written.
    #[error("writing the trace: {0}")]
    Output(io::Error),
    /// The options ask for a field the format does not have.
    #[error("{0}")]
    Fields(String),
    /// The keys would not be hashed.
    #[error("identities must be hashed (server.trace's keyed hash): no identity key")]
    Unhashed,
}

/// What a log came to.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Traced {
    /// Lines read (blank ones included).
    pub lines: u64,
    /// Events written.
    pub events: u64,
    /// Lines whose request no policy's `match` takes.
    pub unmatched: u64,
    /// Bad lines reported and passed over.
    pub skipped: u64,
    /// Events earlier than the one before, written at its time so the
    /// trace never goes back in time.
    pub moved: u64,
}

/// Reads `input` line by line, writes one trace event a line to `output`,
/// and reports skipped bad lines on `errors` (`line N: …`).
pub fn trace_from_log(
    options: &TraceOptions,
    mut input: impl BufRead,
    mut output: impl Write,
    mut errors: impl Write,
) -> Result<Traced, TraceError> {
    if !matches!(options.keys, HotSeries::Hashed(_)) {
        return Err(TraceError::Unhashed);
    }
    let names = nginx_names(options)?;
    let mut line = Vec::with_capacity(512);
    let mut text = String::with_capacity(512);
    let mut traced = Traced::default();
    let mut last_ms = 0u64;
    loop {
        line.clear();
        let read = io::Read::take(&mut input, MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(TraceError::Input)?;
        if read == 0 {
            break;
        }
        traced.lines += 1;
        let event = if line.len() > MAX_LINE_BYTES {
            skip_rest_of_line(&mut input, &mut line)?;
            Err(format!("longer than {MAX_LINE_BYTES} bytes"))
        } else {
            match std::str::from_utf8(&line) {
                Ok(s) if s.trim().is_empty() => continue,
                Ok(s) => event_of(options, &names, s.trim()),
                Err(e) => Err(format!("not UTF-8 ({e})")),
            }
        };
        let (t_ms, checks) = match event {
            Ok(Some(event)) => event,
            Ok(None) => {
                traced.unmatched += 1;
                continue;
            }
            Err(fault) if options.skip_bad_lines => {
                writeln!(errors, "tollgate: line {}: {fault} (skipped)", traced.lines)
                    .map_err(TraceError::Output)?;
                traced.skipped += 1;
                continue;
            }
            Err(fault) => {
                return Err(TraceError::Line {
                    line: traced.lines,
                    fault,
                });
            }
        };
        if t_ms < last_ms {
            traced.moved += 1;
        }
        last_ms = last_ms.max(t_ms);
        text.clear();
        write_event(&mut text, last_ms, &checks);
        output
            .write_all(text.as_bytes())
            .map_err(TraceError::Output)?;
        traced.events += 1;
    }
    output.flush().map_err(TraceError::Output)?;
    Ok(traced)
}

/// nginx's fields by name: combined's, then `--nginx-fields`; each named
/// once, and the identity among them (for JSON, any name may be there).
fn nginx_names(options: &TraceOptions) -> Result<Vec<String>, TraceError> {
    let names: Vec<String> = NGINX_COMBINED
        .iter()
        .map(|n| (*n).to_owned())
        .chain(options.nginx_fields.iter().cloned())
        .collect();
    if options.from != LogFormat::NginxCombined {
        return Ok(names);
    }
    for (i, name) in names.iter().enumerate() {
        if name.is_empty() || names[..i].contains(name) {
            return Err(TraceError::Fields(format!(
                "--nginx-fields: {} is {}",
                quote(name),
                if name.is_empty() {
                    "empty"
                } else {
                    "named twice (combined's fields are remote_addr, remote_user, time_local, request, status, body_bytes_sent, http_referer, http_user_agent)"
                }
            )));
        }
    }
    let wanted = match &options.identity {
        IdentitySource::Field(name) => name.clone(),
        IdentitySource::Header(name) => options.from.header_field(name),
    };
    if !names.contains(&wanted) {
        return Err(TraceError::Fields(format!(
            "nginx's combined format has no field {}: log it (`\"${wanted}\"` after combined's fields in the log_format) and name it in --nginx-fields",
            quote(&wanted)
        )));
    }
    Ok(names)
}

/// One check of an event: its policy, hashed key and cost.
struct Check<'p> {
    policy: &'p str,
    key: String,
    cost: u64,
}

/// A line's time and checks; `None` when no policy takes it.
fn event_of<'o>(
    options: &'o TraceOptions,
    names: &[String],
    line: &str,
) -> Result<Option<(u64, Vec<Check<'o>>)>, String> {
    let fields = match options.from {
        LogFormat::NginxCombined => parse_nginx(line, names)?,
        LogFormat::EnvoyJson | LogFormat::Jsonl => parse_json(line)?,
    };
    let t_ms = time_of(options, &fields)?;
    let identity = match &options.identity {
        IdentitySource::Field(name) => (Cow::Borrowed(name.as_str()), "field"),
        IdentitySource::Header(name) => (Cow::Owned(options.from.header_field(name)), "header"),
    };
    let value = fields
        .get(&identity.0)?
        .ok_or_else(|| match &options.identity {
            IdentitySource::Header(header) => format!(
                "the identity, header {header} (field {}), is absent",
                quote(&identity.0)
            ),
            IdentitySource::Field(_) => {
                format!("the identity, field {}, is absent", quote(&identity.0))
            }
        })?;
    let key = options
        .keys
        .label(&Identity::value(value.trim()))
        .ok_or("identities are not hashed")?;
    let checks = match &options.policies {
        Policies::Named { names, cost } => names
            .iter()
            .map(|policy| Check {
                policy,
                key: key.clone(),
                cost: *cost,
            })
            .collect(),
        Policies::Matched(policies) => matched(options.from, &fields, policies, &key)?,
    };
    if checks.is_empty() {
        return Ok(None);
    }
    if checks.len() > MAX_CHECKS {
        return Err(format!(
            "{} policies take this request, more than the {MAX_CHECKS} a trace line holds",
            checks.len()
        ));
    }
    Ok(Some((t_ms, checks)))
}

/// The line's time in milliseconds since the epoch.
fn time_of(options: &TraceOptions, fields: &Fields<'_>) -> Result<u64, String> {
    if options.from == LogFormat::NginxCombined {
        let text = fields.get("time_local")?.ok_or("no $time_local")?;
        return time::nginx_time(&text);
    }
    let name = &options.time_field;
    match fields.json(name) {
        None | Some(serde_json::Value::Null) => Err(format!("no time field {}", quote(name))),
        Some(serde_json::Value::String(text)) => time::rfc3339_time(text),
        Some(number) => time::millis_time(number),
    }
}

/// The config's policies whose `match` takes the line's request, as
/// forward auth picks them, each with the cost it charges. The request is
/// read only when a policy has a `match`: one without takes every line.
fn matched<'p>(
    from: LogFormat,
    fields: &Fields<'_>,
    policies: &'p [ServePolicy],
    key: &str,
) -> Result<Vec<Check<'p>>, String> {
    let mut request = None;
    let mut checks = Vec::new();
    for serve in policies {
        if serve.matcher != Matcher::default() {
            let (method, path, host) = match &request {
                Some(read) => read,
                None => request.insert(request_of(from, fields)?),
            };
            if !serve.matcher.matches(method, path, host) {
                continue;
            }
        }
        checks.push(Check {
            policy: serve.policy.name(),
            key: key.to_owned(),
            cost: cost_of(from, fields, serve)?,
        });
    }
    Ok(checks)
}

/// The line's request: its method, its path normalized as `serve`
/// normalizes it, and its host ("" when the log has none).
fn request_of(from: LogFormat, fields: &Fields<'_>) -> Result<(String, String, String), String> {
    let (method, target) = match from {
        LogFormat::NginxCombined => {
            let request = fields.get("request")?.ok_or("no $request")?;
            let (method, target) = split_request(&request)?;
            (method.to_owned(), target.to_owned())
        }
        LogFormat::EnvoyJson | LogFormat::Jsonl => (
            fields
                .get("method")?
                .ok_or("no field \"method\" (a policy's match reads it)")?
                .into_owned(),
            fields
                .get("path")?
                .ok_or("no field \"path\" (a policy's match reads it)")?
                .into_owned(),
        ),
    };
    let path = normalize(&target)
        .map_err(|fault| format!("the request's path: {fault}"))?
        .into_owned();
    let host = fields
        .get(from.host_field())?
        .unwrap_or_default()
        .into_owned();
    Ok((method, path, host))
}

/// The cost `policy` charges for the line: its constant, or its cost
/// header as the log recorded it (its default when the log did not).
fn cost_of(from: LogFormat, fields: &Fields<'_>, policy: &ServePolicy) -> Result<u64, String> {
    let CostRule::Header { name, .. } = &policy.cost else {
        return tollgate_http::cost_of(policy, &HeaderMap::new()).map_err(|f| f.0);
    };
    let mut headers = HeaderMap::new();
    if let Some(value) = fields.get(&from.header_field(name))? {
        let header = HeaderName::from_str(name).map_err(|e| format!("header {name}: {e}"))?;
        let value = HeaderValue::from_str(&value)
            .map_err(|_| format!("header {name}: {} is not a header value", quote(&value)))?;
        headers.insert(header, value);
    }
    tollgate_http::cost_of(policy, &headers).map_err(|f| f.0)
}

/// The event's trace line, newline included, as `server.trace` writes it.
fn write_event(out: &mut String, t_ms: u64, checks: &[Check<'_>]) {
    let quoted = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
    if let [check] = checks {
        let _ = writeln!(
            out,
            "{{\"t_ms\":{t_ms},\"policy\":{},\"key\":{},\"cost\":{}}}",
            quoted(check.policy),
            quoted(&check.key),
            check.cost
        );
        return;
    }
    let _ = write!(out, "{{\"t_ms\":{t_ms},\"checks\":[");
    for (i, check) in checks.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            "{{\"policy\":{},\"key\":{},\"cost\":{}}}",
            quoted(check.policy),
            quoted(&check.key),
            check.cost
        );
    }
    out.push_str("]}\n");
}

/// Reads and drops what is left of an overlong line, up to its newline.
fn skip_rest_of_line(input: &mut impl BufRead, buffer: &mut Vec<u8>) -> Result<(), TraceError> {
    while buffer.last() != Some(&b'\n') {
        buffer.clear();
        let read = io::Read::take(&mut *input, MAX_LINE_BYTES as u64)
            .read_until(b'\n', buffer)
            .map_err(TraceError::Input)?;
        if read == 0 {
            break;
        }
    }
    Ok(())
}
