use super::*;
use crate::config::{ServeConfig, hashed_series};

const KEY: &str = "an identity key of thirty-two bytes or more";

fn keys() -> HotSeries {
    hashed_series("TOLLGATE_IDENTITY_KEY", KEY).expect("a key")
}

fn key_of(value: &str) -> String {
    keys().label(&Identity::value(value)).expect("hashed")
}

fn named(from: LogFormat, identity: &str) -> TraceOptions {
    TraceOptions {
        from,
        identity: identity.parse().expect("a source"),
        policies: Policies::Named {
            names: vec!["p".into()],
            cost: 1,
        },
        time_field: "start_time".into(),
        nginx_fields: Vec::new(),
        skip_bad_lines: false,
        keys: keys(),
    }
}

/// The trace, what went to the error stream, and the count; or the error.
fn run(options: &TraceOptions, log: &[u8]) -> Result<(String, String, Traced), TraceError> {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let traced = trace_from_log(options, log, &mut out, &mut err)?;
    Ok((
        String::from_utf8(out).expect("utf-8"),
        String::from_utf8(err).expect("utf-8"),
        traced,
    ))
}

const NGINX_LINE: &str =
    r#"127.0.0.40 - - [04/Dec/2026:17:31:05 +0000] "POST /login HTTP/1.1" 200 2 "-" "curl/8.5.0""#;

#[test]
fn an_nginx_combined_line_is_one_event_at_its_time_under_its_hashed_address() {
    let options = named(LogFormat::NginxCombined, "field:remote_addr");
    let (trace, errors, traced) =
        run(&options, format!("{NGINX_LINE}\n").as_bytes()).expect("a trace");
    // 2026-12-04T17:31:05Z.
    let line = format!(
        "{{\"t_ms\":1796405465000,\"policy\":\"p\",\"key\":\"{}\",\"cost\":1}}\n",
        key_of("127.0.0.40")
    );
    assert_eq!(trace, line);
    assert!(!trace.contains("127.0.0.40"));
    assert_eq!(errors, "");
    assert_eq!(
        traced,
        Traced {
            lines: 1,
            events: 1,
            ..Traced::default()
        }
    );
    // The header spelling finds combined's own header fields.
    let by_agent = named(LogFormat::NginxCombined, "header:User-Agent");
    let (trace, _, _) = run(&by_agent, NGINX_LINE.as_bytes()).expect("a trace");
    assert!(trace.contains(&key_of("curl/8.5.0")), "{trace}");
}

#[test]
fn nginx_times_in_any_offset_are_one_instant() {
    for text in [
        "10/Oct/2000:13:55:36 -0700",
        "10/Oct/2000:20:55:36 +0000",
        "11/Oct/2000:02:25:36 +0530",
    ] {
        assert_eq!(time::nginx_time(text), Ok(971_211_336_000), "{text}");
    }
    assert_eq!(
        time::nginx_time("29/Feb/2024:00:00:00 +0000"),
        Ok(1_709_164_800_000)
    );
    assert_eq!(time::nginx_time("01/Jan/1970:00:00:00 +0000"), Ok(0));
    // A leap second is the next minute's first.
    assert_eq!(
        time::nginx_time("31/Dec/2016:23:59:60 +0000"),
        Ok(1_483_228_800_000)
    );
}

#[test]
fn odd_times_are_refused_naming_what_was_read() {
    for (text, fault) in [
        (
            "29/Feb/2023:00:00:00 +0000",
            "time \"29/Feb/2023:00:00:00 +0000\": no such day",
        ),
        (
            "01/Jan/1970:00:00:00 +0100",
            "time \"01/Jan/1970:00:00:00 +0100\": before 1970",
        ),
        (
            "10/Okt/2000:13:55:36 -0700",
            "time \"10/Okt/2000:13:55:36 -0700\" is not nginx's DD/Mon/YYYY:HH:MM:SS +ZZZZ",
        ),
        (
            "10/Oct/2000:24:00:00 +0000",
            "time \"10/Oct/2000:24:00:00 +0000\" is not nginx's DD/Mon/YYYY:HH:MM:SS +ZZZZ",
        ),
        (
            "10/Oct/2000:13:55:36 0700",
            "time \"10/Oct/2000:13:55:36 0700\" is not nginx's DD/Mon/YYYY:HH:MM:SS +ZZZZ",
        ),
        (
            "1/Oct/2000:13:55:36 -0700",
            "time \"1/Oct/2000:13:55:36 -0700\" is not nginx's DD/Mon/YYYY:HH:MM:SS +ZZZZ",
        ),
    ] {
        assert_eq!(time::nginx_time(text), Err(fault.to_owned()), "{text}");
    }
    for (text, ms) in [
        ("2000-10-10T20:55:36Z", 971_211_336_000),
        ("2000-10-10T20:55:36.1Z", 971_211_336_100),
        ("2000-10-10T20:55:36.123456789Z", 971_211_336_123),
        ("2000-10-10t13:55:36.123-07:00", 971_211_336_123),
        ("2000-10-10 20:55:36z", 971_211_336_000),
    ] {
        assert_eq!(time::rfc3339_time(text), Ok(ms), "{text}");
    }
    for text in [
        "2000-10-10T20:55:36",
        "2000-10-10T20:55:36.Z",
        "2000-13-10T20:55:36Z",
        "2000-10-10T20:55:36+0700",
        "10/Oct/2000:13:55:36 -0700",
        "1969-12-31T23:59:59Z",
        "-000-10-10T20:55:36Z",
    ] {
        assert!(time::rfc3339_time(text).is_err(), "{text}");
    }
}

#[test]
fn a_bad_line_is_fatal_by_default_and_named_by_its_number() {
    let options = named(LogFormat::NginxCombined, "field:remote_addr");
    let log =
        format!("{NGINX_LINE}\n\n127.0.0.1 - - [04/Dec/2026:17:31:05 +0000] \"GET / HTTP/1.1\"\n");
    let error = run(&options, log.as_bytes()).expect_err("a bad line");
    assert_eq!(error.to_string(), "line 3: expected $status");
}

#[test]
fn bad_lines_are_skipped_reported_and_counted_when_asked() {
    let mut options = named(LogFormat::NginxCombined, "field:remote_user");
    options.skip_bad_lines = true;
    let alice = NGINX_LINE.replacen(" - - ", " - alice ", 1);
    let log =
        format!("{alice}\n{NGINX_LINE}\nnot a log line\n\u{0}x\n{alice} \"extra\"\n{alice}\n");
    let mut bytes = log.into_bytes();
    // Not UTF-8 on line 4.
    let at = bytes.iter().position(|b| *b == 0).expect("the marker");
    bytes[at] = 0xff;
    let (trace, errors, traced) = run(&options, &bytes).expect("a trace");
    assert_eq!(trace.lines().count(), 2, "{trace}");
    assert_eq!(
        errors,
        "tollgate: line 2: the identity, field \"remote_user\", is absent (skipped)\n\
         tollgate: line 3: expected `-` after $remote_addr, got 1 bytes of something else (skipped)\n\
         tollgate: line 4: not UTF-8 (invalid utf-8 sequence of 1 bytes from index 0) (skipped)\n\
         tollgate: line 5: 7 bytes more after the last field (8 fields named: pass --nginx-fields for quoted fields after combined's) (skipped)\n"
    );
    assert_eq!(
        traced,
        Traced {
            lines: 6,
            events: 2,
            skipped: 4,
            ..Traced::default()
        }
    );
}

#[test]
fn a_huge_line_is_one_bad_line_and_the_next_is_read() {
    let mut options = named(LogFormat::Jsonl, "field:user");
    options.time_field = "t".into();
    options.skip_bad_lines = true;
    let huge = format!(
        "{{\"t\": 5, \"user\": \"{}\"}}\n",
        "x".repeat(3 * MAX_LINE_BYTES)
    );
    let log = format!("{huge}{{\"t\": 7, \"user\": \"u\"}}\n{huge}");
    let (trace, errors, traced) = run(&options, log.as_bytes()).expect("a trace");
    assert_eq!(
        trace,
        format!(
            "{{\"t_ms\":7,\"policy\":\"p\",\"key\":\"{}\",\"cost\":1}}\n",
            key_of("u")
        )
    );
    assert_eq!(
        errors,
        format!(
            "tollgate: line 1: longer than {MAX_LINE_BYTES} bytes (skipped)\n\
             tollgate: line 2: longer than {MAX_LINE_BYTES} bytes (skipped)\n"
        )
        .replace("line 2:", "line 3:")
    );
    assert_eq!((traced.lines, traced.events, traced.skipped), (3, 1, 2));
    options.skip_bad_lines = false;
    let error = run(&options, log.as_bytes()).expect_err("fatal");
    assert_eq!(
        error.to_string(),
        format!("line 1: longer than {MAX_LINE_BYTES} bytes")
    );
}

#[test]
fn json_lines_take_times_as_text_or_milliseconds_and_never_go_back() {
    let mut options = named(LogFormat::EnvoyJson, "header:X-Tenant");
    options.policies = Policies::Named {
        names: vec!["a".into(), "b".into()],
        cost: 2,
    };
    let log = concat!(
        r#"{"start_time": "2026-12-04T17:31:05.250Z", "x-tenant": "acme"}"#,
        "\n",
        r#"{"start_time": 1796405465100, "x-tenant": "acme"}"#,
        "\n",
        r#"{"start_time": "2026-12-04T17:31:06Z", "x-tenant": 7}"#,
        "\n",
    );
    let (trace, _, traced) = run(&options, log.as_bytes()).expect("a trace");
    let acme = key_of("acme");
    let seven = key_of("7");
    assert_eq!(
        trace,
        format!(
            "{{\"t_ms\":1796405465250,\"checks\":[{{\"policy\":\"a\",\"key\":\"{acme}\",\"cost\":2}},{{\"policy\":\"b\",\"key\":\"{acme}\",\"cost\":2}}]}}\n\
             {{\"t_ms\":1796405465250,\"checks\":[{{\"policy\":\"a\",\"key\":\"{acme}\",\"cost\":2}},{{\"policy\":\"b\",\"key\":\"{acme}\",\"cost\":2}}]}}\n\
             {{\"t_ms\":1796405466000,\"checks\":[{{\"policy\":\"a\",\"key\":\"{seven}\",\"cost\":2}},{{\"policy\":\"b\",\"key\":\"{seven}\",\"cost\":2}}]}}\n"
        )
    );
    assert_eq!(traced.moved, 1);
    for (line, fault) in [
        (
            r#"{"x-tenant": "acme"}"#,
            "line 1: no time field \"start_time\"",
        ),
        (
            r#"{"start_time": -5, "x-tenant": "acme"}"#,
            "line 1: time -5 is not a whole number of milliseconds since 1970",
        ),
        (
            r#"{"start_time": 1, "x-tenant": "-"}"#,
            "line 1: the identity, header X-Tenant (field \"x-tenant\"), is absent",
        ),
        (
            r#"{"start_time": 1, "x-tenant": ["a"]}"#,
            "line 1: field \"x-tenant\" is not a string or a number",
        ),
        (r#"["start_time"]"#, "line 1: not a JSON object"),
    ] {
        let error = run(&options, line.as_bytes()).expect_err(line);
        assert_eq!(error.to_string(), fault, "{line}");
    }
}

#[test]
fn a_config_matches_requests_to_its_policies_with_their_costs() {
    let text = "policies:
  - {name: login, algorithm: fixed_window, limit: 5, window: 1m, match: {methods: [POST], path: /login}, identity: [client_ip]}
  - {name: api, algorithm: fixed_window, limit: 5, window: 1m, match: {path_prefix: /api/}, identity: [client_ip], cost: {header: X-Cost, max: 10, default: 3}}
  - {name: all, algorithm: fixed_window, limit: 5, window: 1m, identity: [client_ip]}
";
    let config = ServeConfig::parse(text, |_| None).expect("a config");
    let mut options = named(LogFormat::NginxCombined, "field:remote_addr");
    options.policies = Policies::Matched(config.policies.clone());
    options.nginx_fields = vec!["http_x_cost".into(), "host".into()];
    let line = |request: &str, cost: &str| {
        format!(
            "198.51.100.7 - - [04/Dec/2026:17:31:05 +0000] \"{request}\" 200 2 \"-\" \"curl\" \"{cost}\" \"api.example\"\n"
        )
    };
    let log = [
        line("POST /login HTTP/1.1", "-"),
        line("GET /login HTTP/1.1", "-"),
        line("GET /api/../api/orders?x=1 HTTP/1.1", "7"),
        line("GET /api/orders HTTP/1.1", "-"),
    ]
    .concat();
    let (trace, _, _) = run(&options, log.as_bytes()).expect("a trace");
    let events: Vec<serde_json::Value> = trace
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let checks: Vec<Vec<(String, u64)>> = events
        .iter()
        .map(|e| {
            let one = [e.clone()];
            e["checks"]
                .as_array()
                .map_or(one.as_slice(), Vec::as_slice)
                .iter()
                .map(|c| {
                    (
                        c["policy"].as_str().expect("a policy").to_owned(),
                        c["cost"].as_u64().expect("a cost"),
                    )
                })
                .collect()
        })
        .collect();
    let pairs = |list: &[(&str, u64)]| {
        list.iter()
            .map(|(p, c)| ((*p).to_owned(), *c))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        checks,
        vec![
            pairs(&[("login", 1), ("all", 1)]),
            pairs(&[("all", 1)]),
            pairs(&[("api", 7), ("all", 1)]),
            pairs(&[("api", 3), ("all", 1)]),
        ]
    );
    // A cost past the policy's maximum is the line's fault, as forward
    // auth refuses it; a request line that is not one is too.
    for (bad, fault) in [
        (
            line("GET /api/x HTTP/1.1", "11"),
            "line 1: policy api: header x-cost is 11, above the maximum 10",
        ),
        (
            line("\\x16\\x03\\x01", "-"),
            "line 1: $request (12 bytes) is not METHOD TARGET PROTOCOL",
        ),
        (
            line("GET ../x HTTP/1.1", "-"),
            "line 1: the request's path: ",
        ),
    ] {
        let error = run(&options, bad.as_bytes())
            .expect_err("a bad line")
            .to_string();
        assert!(error.starts_with(fault), "{error}");
    }
    // No policy takes a request the config's `match`es leave out.
    let mut only_login = named(LogFormat::NginxCombined, "field:remote_addr");
    only_login.policies = Policies::Matched(vec![config.policies[0].clone()]);
    only_login.nginx_fields = options.nginx_fields.clone();
    let (trace, _, traced) = run(&only_login, log.as_bytes()).expect("a trace");
    assert_eq!((trace.lines().count(), traced.unmatched), (1, 3));
}

#[test]
fn identity_sources_are_spelled_field_or_header() {
    assert_eq!(
        "field:remote_addr".parse(),
        Ok(IdentitySource::Field("remote_addr".into()))
    );
    assert_eq!(
        "header:X-Tenant".parse(),
        Ok(IdentitySource::Header("X-Tenant".into()))
    );
    for bad in ["remote_addr", "field:", "cookie:x", "header: x"] {
        assert_eq!(
            bad.parse::<IdentitySource>(),
            Err(format!(
                "{}: expected field:NAME or header:NAME",
                quote(bad)
            ))
        );
    }
    assert_eq!(
        LogFormat::NginxCombined.header_field("X-Tenant"),
        "http_x_tenant"
    );
    assert_eq!(LogFormat::EnvoyJson.header_field("X-Tenant"), "x-tenant");
}

#[test]
fn unhashed_keys_are_refused() {
    let mut options = named(LogFormat::Jsonl, "field:u");
    options.keys = HotSeries::Raw;
    assert!(matches!(run(&options, b""), Err(TraceError::Unhashed)));
}

#[test]
fn a_request_is_read_only_when_a_policy_has_a_match() {
    let text = "policies:
  - {name: login, algorithm: fixed_window, limit: 5, window: 1m, match: {methods: [POST], path: /login}, identity: [client_ip]}
  - {name: all, algorithm: fixed_window, limit: 5, window: 1m, identity: [client_ip]}
";
    let config = ServeConfig::parse(text, |_| None).expect("a config");
    let mut options = named(LogFormat::Jsonl, "field:user");
    options.time_field = "t".into();
    options.policies = Policies::Matched(vec![config.policies[1].clone()]);
    let line = r#"{"t": 9, "user": "u"}"#;
    let (trace, _, _) = run(&options, line.as_bytes()).expect("a trace");
    assert_eq!(
        trace,
        format!(
            "{{\"t_ms\":9,\"policy\":\"all\",\"key\":\"{}\",\"cost\":1}}\n",
            key_of("u")
        )
    );
    options.policies = Policies::Matched(config.policies.clone());
    let error = run(&options, line.as_bytes()).expect_err("no method");
    assert_eq!(
        error.to_string(),
        "line 1: no field \"method\" (a policy's match reads it)"
    );
    let with_request = r#"{"t": 9, "user": "u", "method": "post", "path": "/login/../login"}"#;
    let (trace, _, _) = run(&options, with_request.as_bytes()).expect("a trace");
    assert!(
        trace.starts_with("{\"t_ms\":9,\"checks\":[{\"policy\":\"login\""),
        "{trace}"
    );
}

#[test]
fn an_nginx_field_the_log_format_lacks_is_refused_before_reading() {
    let options = named(LogFormat::NginxCombined, "header:X-Tenant");
    let error = run(&options, NGINX_LINE.as_bytes()).expect_err("no such field");
    assert_eq!(
        error.to_string(),
        "nginx's combined format has no field \"http_x_tenant\": log it (`\"$http_x_tenant\"` after combined's fields in the log_format) and name it in --nginx-fields"
    );
    let mut twice = named(LogFormat::NginxCombined, "field:remote_addr");
    twice.nginx_fields = vec!["status".into()];
    assert_eq!(
        run(&twice, b"").expect_err("named twice").to_string(),
        "--nginx-fields: \"status\" is named twice (combined's fields are remote_addr, remote_user, time_local, request, status, body_bytes_sent, http_referer, http_user_agent)"
    );
    let mut tenant = named(LogFormat::NginxCombined, "header:X-Tenant");
    tenant.nginx_fields = vec!["http_x_tenant".into()];
    let line = format!("{NGINX_LINE} \"acme\"\n");
    let (trace, _, _) = run(&tenant, line.as_bytes()).expect("a trace");
    assert!(trace.contains(&key_of("acme")), "{trace}");
}
