//! One access log line as named fields: nginx's `combined` format (with
//! optional quoted fields after it), or a JSON object (Envoy's
//! `json_format`, or any JSON lines). A value the log wrote as absent
//! (`-`, an empty string, `null`) is no value. A fault never quotes a
//! field that could hold an identity or a secret (a request's target may
//! carry a token): it names the field, and how long it was.

use std::borrow::Cow;

use serde_json::{Map, Value};
use tollgate_core::quote;

/// The fields of nginx's `combined` format, in their order:
/// `$remote_addr - $remote_user [$time_local] "$request" $status
/// $body_bytes_sent "$http_referer" "$http_user_agent"`.
pub const NGINX_COMBINED: [&str; 8] = [
    "remote_addr",
    "remote_user",
    "time_local",
    "request",
    "status",
    "body_bytes_sent",
    "http_referer",
    "http_user_agent",
];

/// The access log formats `tollgate trace --from` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// nginx's `combined` (its default), optionally with more quoted fields
    /// after it (`--nginx-fields`).
    NginxCombined,
    /// Envoy's JSON access log (`json_format`): one object a line.
    EnvoyJson,
    /// Any JSON lines: one object a line, the time in `--time-field`.
    Jsonl,
}

impl LogFormat {
    /// The field a request header is logged under: nginx's variable for it
    /// (`X-Tenant` is `http_x_tenant`), or in JSON the header's name in
    /// lower case (as `"x-tenant": "%REQ(X-TENANT)%"` writes it).
    pub fn header_field(self, header: &str) -> String {
        let lower = header.to_ascii_lowercase();
        match self {
            LogFormat::NginxCombined => format!("http_{}", lower.replace('-', "_")),
            LogFormat::EnvoyJson | LogFormat::Jsonl => lower,
        }
    }

    /// The field holding the request's host, if the format has one.
    pub fn host_field(self) -> &'static str {
        match self {
            LogFormat::NginxCombined | LogFormat::Jsonl => "host",
            LogFormat::EnvoyJson => "authority",
        }
    }
}

/// A parsed line: its fields by name.
pub enum Fields<'a> {
    /// nginx: the values in the order of `names`.
    Nginx {
        names: &'a [String],
        values: Vec<&'a str>,
    },
    /// A JSON object.
    Json(Map<String, Value>),
}

impl Fields<'_> {
    /// The field's value; `None` when the line has no such field or wrote
    /// it as absent. A JSON value that is not a string, a number or a
    /// boolean is a fault.
    pub fn get(&self, name: &str) -> Result<Option<Cow<'_, str>>, String> {
        let text = match self {
            Fields::Nginx { names, values } => names
                .iter()
                .position(|n| n == name)
                .map(|i| Cow::Borrowed(values[i])),
            Fields::Json(map) => match map.get(name) {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(Cow::Borrowed(s.as_str())),
                Some(Value::Number(n)) => Some(Cow::Owned(n.to_string())),
                Some(Value::Bool(b)) => Some(Cow::Owned(b.to_string())),
                Some(_) => {
                    return Err(format!("field {} is not a string or a number", quote(name)));
                }
            },
        };
        Ok(text.filter(|t| {
            let t = t.trim();
            !t.is_empty() && t != "-"
        }))
    }

    /// The raw JSON value of `name` (a JSON line's time may be a number).
    pub fn json(&self, name: &str) -> Option<&Value> {
        match self {
            Fields::Json(map) => map.get(name),
            Fields::Nginx { .. } => None,
        }
    }
}

/// One line of nginx's `combined` format, then one quoted field for each
/// of `names` past the eight combined ones. nginx escapes `"` inside a
/// variable (as `\x22`), so a quoted field ends at the next `"`.
pub fn parse_nginx<'a>(line: &'a str, names: &'a [String]) -> Result<Fields<'a>, String> {
    let mut values = Vec::with_capacity(names.len());
    let mut rest = line;
    let bare = |rest: &mut &'a str, what: &str| -> Result<&'a str, String> {
        let end = rest.find(' ').unwrap_or(rest.len());
        let (value, after) = rest.split_at(end);
        if value.is_empty() {
            return Err(format!("expected {what}"));
        }
        *rest = after.strip_prefix(' ').unwrap_or(after);
        Ok(value)
    };
    values.push(bare(&mut rest, "$remote_addr")?);
    let dash = bare(&mut rest, "`-` after $remote_addr")?;
    if dash != "-" {
        return Err(format!(
            "expected `-` after $remote_addr, got {} bytes of something else",
            dash.len()
        ));
    }
    values.push(bare(&mut rest, "$remote_user")?);
    let time = rest
        .strip_prefix('[')
        .and_then(|r| r.split_once(']'))
        .ok_or("expected [$time_local]")?;
    values.push(time.0);
    rest = time.1.strip_prefix(' ').ok_or("expected a space after ]")?;
    values.push(quoted(&mut rest, "$request")?);
    values.push(bare(&mut rest, "$status")?);
    values.push(bare(&mut rest, "$body_bytes_sent")?);
    for name in &names[6..] {
        values.push(quoted(&mut rest, name)?);
    }
    if !rest.trim().is_empty() {
        return Err(format!(
            "{} bytes more after the last field ({} fields named: pass --nginx-fields for quoted fields after combined's)",
            rest.trim().len(),
            names.len()
        ));
    }
    Ok(Fields::Nginx { names, values })
}

/// A `"…"` field, and the space after it unless the line ends.
fn quoted<'a>(rest: &mut &'a str, what: &str) -> Result<&'a str, String> {
    let inner = rest
        .strip_prefix('"')
        .ok_or_else(|| format!("expected \"{what}\" (quoted)"))?;
    let (value, after) = inner
        .split_once('"')
        .ok_or_else(|| format!("\"{what}\" has no closing quote"))?;
    *rest = after.strip_prefix(' ').unwrap_or(after);
    Ok(value)
}

/// A JSON object line.
pub fn parse_json(line: &str) -> Result<Fields<'static>, String> {
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(map)) => Ok(Fields::Json(map)),
        Ok(_) => Err("not a JSON object".into()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

/// nginx's `$request` as its method and target: `GET /path HTTP/1.1`
/// (HTTP/0.9's `GET /path` too).
pub fn split_request(request: &str) -> Result<(&str, &str), String> {
    let mut words = request.split(' ');
    match (words.next(), words.next(), words.next(), words.next()) {
        (Some(method), Some(target), _, None)
            if !method.is_empty() && method.bytes().all(|b| b.is_ascii_alphabetic()) =>
        {
            Ok((method, target))
        }
        _ => Err(format!(
            "$request ({} bytes) is not METHOD TARGET PROTOCOL",
            request.len()
        )),
    }
}
