//! `tollgate trace`'s command line: what it refuses before reading a line
//! (no identity key, no policies, a flag for another format), a log read
//! from a file, and its exit status with skipped lines. What it makes of
//! real proxies' logs is held in nginx/access_log.rs and
//! envoy_access_log.rs; its parsing in the library's own tests.

mod support;

use support::tollgate_fed;

const KEY: &str = "an identity key of thirty-two bytes or more";

/// `tollgate trace ARGS...` with `env`, fed `stdin`: exit code, stdout,
/// stderr.
fn trace(args: &[&str], env: &[(&str, &str)], stdin: &str) -> (Option<i32>, String, String) {
    let args: Vec<&str> = ["trace"].iter().chain(args).copied().collect();
    tollgate_fed(&args, env.iter().copied(), stdin.as_bytes())
}

const LINE: &str = "{\"t\": 1767225600000, \"user\": \"alice\"}\n";

/// Flags past the format's, the environment, and what is said on stderr.
type Refusal = (
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
    &'static str,
);

#[test]
fn nothing_is_made_without_the_identity_key_or_the_policies() {
    let jsonl = [
        "--from",
        "jsonl",
        "--time-field",
        "t",
        "--identity",
        "field:user",
    ];
    let refusals: [Refusal; 6] = [
        (
            &[],
            &[],
            "tollgate: name the policies: --policy NAME, or --config FILE to match them\n",
        ),
        (
            &["--policy", "api"],
            &[],
            "tollgate: the trace's keys are the identities' keyed hash, as server.trace writes them, so the environment variable TOLLGATE_IDENTITY_KEY must hold the identity key\n",
        ),
        (
            &["--policy", "api"],
            &[("TOLLGATE_IDENTITY_KEY", "too short")],
            "tollgate: config: the identity hashing key in TOLLGATE_IDENTITY_KEY is 9 bytes: it needs at least 32 bytes of entropy (e.g. `openssl rand -hex 32`)\n",
        ),
        (
            &["--policy", "api", "--nginx-fields", "host"],
            &[("TOLLGATE_IDENTITY_KEY", KEY)],
            "tollgate: --nginx-fields is for --from nginx-combined\n",
        ),
        (
            &[
                "--config",
                "../../examples/traces/api-sliding-log.yaml",
                "--cost",
                "2",
            ],
            &[("TOLLGATE_IDENTITY_KEY", KEY)],
            "tollgate: --cost is for --policy without --config: a config's policies cost what their `cost` says\n",
        ),
        (
            &[
                "--config",
                "../../examples/traces/api-sliding-log.yaml",
                "--policy",
                "nope",
            ],
            &[("TOLLGATE_IDENTITY_KEY", KEY)],
            "tollgate: ../../examples/traces/api-sliding-log.yaml: no policy \"nope\"\n",
        ),
    ];
    for (args, env, refusal) in refusals {
        let all: Vec<&str> = jsonl.iter().chain(args).copied().collect();
        let (code, out, err) = trace(&all, env, LINE);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (Some(2), "", refusal),
            "{args:?}"
        );
    }
    let (code, _, err) = trace(
        &[
            "--from",
            "jsonl",
            "--identity",
            "field:user",
            "--policy",
            "api",
        ],
        &[("TOLLGATE_IDENTITY_KEY", KEY)],
        LINE,
    );
    assert_eq!(
        (code, err.as_str()),
        (
            Some(2),
            "tollgate: --from jsonl needs --time-field NAME (the field holding the time)\n"
        )
    );
}

#[test]
fn a_log_file_is_read_and_skipped_lines_exit_3() {
    let dir = tempfile::tempdir().expect("dir");
    let log = dir.path().join("log.jsonl");
    std::fs::write(&log, format!("{LINE}{{\"t\": 5}}\n{LINE}")).expect("write the log");
    let args = [
        "--from",
        "jsonl",
        "--time-field",
        "t",
        "--identity",
        "field:user",
        "--config",
        "../../examples/traces/api-sliding-log.yaml",
        "--on-bad-line",
        "skip",
        log.to_str().expect("a UTF-8 path"),
    ];
    let (code, out, err) = trace(&args, &[("TOLLGATE_IDENTITY_KEY", KEY)], "");
    assert_eq!(code, Some(3), "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(!out.contains("alice"), "{out}");
    assert_eq!(
        err,
        "tollgate: line 2: the identity, field \"user\", is absent (skipped)\n\
         tollgate: 3 lines read, 2 events written, 0 matched no policy, 1 bad lines skipped, 0 earlier than the line before (written at its time)\n"
    );
    // Without --on-bad-line skip the same log stops at line 2.
    let fail: Vec<&str> = args
        .iter()
        .copied()
        .filter(|a| !["--on-bad-line", "skip"].contains(a))
        .collect();
    let (code, out, err) = trace(&fail, &[("TOLLGATE_IDENTITY_KEY", KEY)], "");
    assert_eq!(code, Some(2));
    assert_eq!(out.lines().count(), 1, "{out}");
    assert_eq!(
        err,
        "tollgate: line 2: the identity, field \"user\", is absent\n"
    );
}
