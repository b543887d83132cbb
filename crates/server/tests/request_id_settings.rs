//! A policy's request-id settings as a config states them
//! (`retry_window`, `retry_ids`, `client_request_ids`,
//! `server.request_id_header`): parsed with exact faults, warned about by
//! `validate`, and stated by `explain` (docs/request-ids.md).

mod support;

use serde_json::json;
use tollgate::ServeConfig;

#[test]
fn retry_settings_are_validated_with_their_fault() {
    let with = |extra: &str| {
        ServeConfig::parse(
            &format!(
                "policies:\n  - name: p\n    algorithm: fixed_window\n    limit: 5\n    window: 1m\n{extra}"
            ),
            |_| None,
        )
        .map(|c| c.policies[0].retry)
        .map_err(|e| e.to_string())
    };
    assert_eq!(
        with("").expect("valid").map(|r| (r.window_ms, r.max_ids)),
        Some((60_000, 64))
    );
    assert_eq!(
        with("    retry_window: 10m\n    retry_ids: 8\n")
            .expect("valid")
            .map(|r| (r.window_ms, r.max_ids)),
        Some((600_000, 8))
    );
    assert_eq!(with("    retry_window: \"off\"\n"), Ok(None));
    for (extra, fault) in [
        ("    retry_window: 500ms\n", "retry_window"),
        ("    retry_window: 2d\n", "retry_window"),
        ("    retry_window: 5\n", "retry_window"),
        ("    retry_ids: 0\n", "retry_ids"),
        ("    retry_ids: 5000\n", "retry_ids"),
        ("    retry_window: \"off\"\n    retry_ids: 4\n", "retry_ids"),
    ] {
        let error = with(extra).expect_err(extra);
        assert!(error.contains(fault), "{extra:?}: {error}");
    }
    let header = ServeConfig::parse(
        "server:\n  request_id_header: \"bad header\"\npolicies:\n  - {name: p, algorithm: fixed_window, limit: 5, window: 1m}\n",
        |_| None,
    )
    .expect_err("a bad header name");
    assert!(header.to_string().contains("request_id_header"), "{header}");
}

/// `p`'s request-id settings under `extra` policy fields: the window (None:
/// off) and whether client ids count, or the config's fault.
fn id_settings(extra: &str) -> Result<(Option<u64>, bool), String> {
    ServeConfig::parse(
        &format!(
            "policies:\n  - name: p\n    algorithm: fixed_window\n    limit: 5\n    window: 1m\n{extra}"
        ),
        |_| None,
    )
    .map(|c| {
        let p = &c.policies[0];
        (p.retry.map(|r| r.window_ms), p.client_request_ids)
    })
    .map_err(|e| e.to_string())
}

/// YAML 1.1 reads a bare `off` as the boolean false: `off`, `"off"` and
/// `false` all keep no ids; `on` and `true` name no window.
#[test]
fn retry_window_off_is_read_however_yaml_spells_it() {
    for off in ["off", "\"off\"", "false", "Off", "no"] {
        let extra = format!("    retry_window: {off}\n");
        assert_eq!(id_settings(&extra), Ok((None, false)), "{off}");
    }
    for on in ["on", "true", "yes"] {
        assert_eq!(
            id_settings(&format!("    retry_window: {on}\n")),
            Err("policy \"p\": retry_window: on (true) names no window: give a duration such as \"60s\", or off".to_owned()),
            "{on}"
        );
    }
    assert_eq!(
        id_settings("    retry_window: off\n    retry_ids: 4\n"),
        Err(
            "policy \"p\": retry_ids: is set, but retry_window is off: request ids are not kept"
                .to_owned()
        )
    );
    assert_eq!(
        id_settings("    retry_window: \"Off\"\n"),
        Err("policy \"p\": retry_window: \"Off\" is not a duration: expected <integer><unit> with unit one of ms, s, m, h, d (e.g. \"1s\", \"500ms\")".to_owned())
    );
}

/// Client ids (`server.request_id_header`) replay a policy's admissions
/// only when it says `client_request_ids: true`; never when ids are off.
#[test]
fn client_request_ids_are_off_unless_a_policy_asks() {
    assert_eq!(id_settings(""), Ok((Some(60_000), false)));
    assert_eq!(
        id_settings("    client_request_ids: true\n"),
        Ok((Some(60_000), true))
    );
    assert_eq!(
        id_settings("    retry_window: off\n    client_request_ids: true\n"),
        Err("policy \"p\": client_request_ids: is true, but retry_window is off: request ids are not kept".to_owned())
    );
    assert_eq!(
        id_settings("    client_request_ids: yes please\n"),
        Err(
            "policy \"p\": client_request_ids: must be true or false, got string \"yes please\""
                .to_owned()
        )
    );
}

/// `validate` names each policy that lets a client's own id replay its
/// admissions, and settings that do nothing.
#[test]
fn validate_warns_of_policies_that_take_client_ids() {
    let warnings = |server: &str, extra: &str| {
        ServeConfig::parse(
            &format!(
                "{server}policies:\n  - {{name: login, algorithm: fixed_window, limit: 5, window: 10m}}\n  - {{name: exports, algorithm: fixed_window, limit: 5, window: 1h{extra}}}\n"
            ),
            |_| None,
        )
        .expect("valid")
        .warnings()
    };
    let named = "server: {request_id_header: Idempotency-Key}\n";
    assert_eq!(
        warnings(named, ", client_request_ids: true"),
        [
            "policy exports: client_request_ids: true lets the id a client chooses in idempotency-key replay its admissions: a client reusing one id is admitted up to 3 more times a charge within retry_window; keep it to policies whose application answers a repeated id from its own record (docs/request-ids.md)"
        ]
    );
    assert_eq!(
        warnings(named, ""),
        [
            "server.request_id_header is idempotency-key, but no policy sets client_request_ids: true: the ids clients send in it replay nothing (docs/request-ids.md)"
        ]
    );
    assert_eq!(
        warnings("", ", client_request_ids: true"),
        [
            "policy exports: client_request_ids: true does nothing: server.request_id_header names no header"
        ]
    );
    assert_eq!(warnings("", ""), Vec::<String>::new());
}

/// `tollgate explain` says which policies let a client's own id replay
/// their admissions, and how often.
#[test]
fn explain_names_the_policies_that_take_client_ids() {
    let dir = tempfile::tempdir().expect("dir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(
        &config,
        "server: {request_id_header: Idempotency-Key}\npolicies:\n  - {name: login, algorithm: fixed_window, limit: 5, window: 10m}\n  - {name: exports, algorithm: fixed_window, limit: 5, window: 1h, client_request_ids: true}\n",
    )
    .expect("write");
    let explained = support::explain_json(&config, &[]);
    let ids: Vec<&str> = explained["policies"]
        .as_array()
        .expect("policies")
        .iter()
        .map(|p| p["scope"]["request_ids"].as_str().expect("request_ids"))
        .collect();
    let flags: Vec<&serde_json::Value> = explained["policies"]
        .as_array()
        .expect("policies")
        .iter()
        .map(|p| &p["client_request_ids"])
        .collect();
    assert_eq!(flags, [&serde_json::Value::Null, &json!(true)]);
    assert_eq!(
        ids,
        [
            "a retry inside 1m of its admission is charged once; at most 64 ids per identity, each counted as a key toward max_keys.",
            "a retry inside 1m of its admission is charged once; at most 64 ids per identity, each counted as a key toward max_keys. Ids a client chooses (server.request_id_header) count too (client_request_ids: true), at most 3 replays a charge.",
        ]
    );
}
