use proptest::prelude::*;

use super::*;

fn ok(target: &str) -> String {
    match normalize(target) {
        Ok(path) => path.into_owned(),
        Err(fault) => panic!("{target:?} was refused: {fault}"),
    }
}

fn fault(target: &str) -> PathFault {
    match normalize(target) {
        Ok(path) => panic!("{target:?} was accepted as {path:?}"),
        Err(fault) => fault,
    }
}

#[test]
fn plain_paths_are_borrowed_unchanged() {
    for path in [
        "/",
        "/login",
        "/login/",
        "/api/v1/orders/42",
        "/.well-known/acme",
        "/a/..b/c.",
        "/a\\..\\b",
        "/é",
    ] {
        assert!(
            matches!(normalize(path), Ok(Cow::Borrowed(p)) if p == path),
            "{path:?}"
        );
    }
}

#[test]
fn the_query_and_fragment_are_cut_at_the_first_raw_mark() {
    assert!(matches!(
        normalize("/login?a=1"),
        Ok(Cow::Borrowed("/login"))
    ));
    assert_eq!(ok("/login?a=/../"), "/login");
    assert_eq!(ok("/login#frag"), "/login");
    assert_eq!(ok("/login#a?b"), "/login");
    assert_eq!(ok("/a/../login?x=%zz"), "/login");
    assert_eq!(ok("/?x"), "/");
}

#[test]
fn repeated_slashes_are_merged() {
    assert_eq!(ok("//login"), "/login");
    assert_eq!(ok("///login//"), "/login/");
    assert_eq!(ok("/a//b///c"), "/a/b/c");
    assert_eq!(ok("//"), "/");
}

#[test]
fn dot_segments_are_resolved() {
    assert_eq!(ok("/./login"), "/login");
    assert_eq!(ok("/api/../login"), "/login");
    assert_eq!(ok("/a/b/./c/../d"), "/a/b/d");
    assert_eq!(ok("/a/."), "/a/");
    assert_eq!(ok("/a/b/.."), "/a/");
    assert_eq!(ok("/a/.."), "/");
    assert_eq!(ok("/."), "/");
}

#[test]
fn climbing_above_the_root_is_a_fault() {
    assert_eq!(fault("/.."), PathFault::AboveRoot);
    assert_eq!(fault("/a/b/../../.."), PathFault::AboveRoot);
    assert_eq!(fault("/../login"), PathFault::AboveRoot);
    assert_eq!(fault("/%2e%2e/login"), PathFault::AboveRoot);
    assert_eq!(
        PathFault::AboveRoot.to_string(),
        "the path climbs above the root with `..`"
    );
}

#[test]
fn every_escape_is_decoded_once() {
    assert_eq!(ok("/%6Cogin"), "/login");
    assert_eq!(ok("/%6c%6F%67%69%6E"), "/login");
    assert_eq!(ok("/%25"), "/%");
    assert_eq!(ok("/%252e%252e/"), "/%2e%2e/");
    assert_eq!(ok("/%C3%A9"), "/é");
    assert_eq!(ok("/a%3Fb"), "/a?b");
}

#[test]
fn decoded_slashes_and_dots_take_part_in_resolution() {
    assert_eq!(ok("/api/%2e%2e/login"), "/login");
    assert_eq!(ok("/api%2F..%2Flogin"), "/login");
    assert_eq!(ok("/%2F%2Flogin"), "/login");
    assert_eq!(ok("/%2E/login"), "/login");
}

#[test]
fn bad_escapes_nul_and_non_utf8_are_faults() {
    assert_eq!(fault("/login%G1"), PathFault::MalformedEscape { at: 6 });
    assert_eq!(fault("/%4"), PathFault::MalformedEscape { at: 1 });
    assert_eq!(fault("/a%"), PathFault::MalformedEscape { at: 2 });
    assert_eq!(
        fault("http://h/x/%zz"),
        PathFault::MalformedEscape { at: 11 }
    );
    assert_eq!(
        PathFault::MalformedEscape { at: 7 }.to_string(),
        "the path has a malformed percent-escape at byte 7"
    );
    assert_eq!(fault("/%00"), PathFault::Nul);
    assert_eq!(fault("/a\0b"), PathFault::Nul);
    assert_eq!(fault("/%FF"), PathFault::NotUtf8);
    assert_eq!(fault("/%C3"), PathFault::NotUtf8);
    assert_eq!(PathFault::Nul.to_string(), "the path decodes to a NUL byte");
    assert_eq!(
        PathFault::NotUtf8.to_string(),
        "the path is not UTF-8 once percent-decoded"
    );
}

#[test]
fn parameters_are_cut_from_every_segment() {
    assert_eq!(ok("/login;x"), "/login");
    assert_eq!(ok("/login;a=b/"), "/login/");
    assert_eq!(ok("/login;jsessionid=x"), "/login");
    assert_eq!(ok("/a;b/c"), "/a/c");
    assert_eq!(ok("/login%3Bx"), "/login");
    assert_eq!(ok("/;x/login"), "/login");
    assert_eq!(ok("/a/..;x/login"), "/login");
}

#[test]
fn absolute_form_targets_lose_scheme_and_authority() {
    assert_eq!(ok("http://Host/login?x"), "/login");
    assert_eq!(ok("HTTPS://host:8443//login"), "/login");
    assert_eq!(ok("http://host"), "/");
    assert_eq!(ok("http://host?x=/a"), "/");
    assert_eq!(ok("http://user@host/a/./b"), "/a/b");
}

#[test]
fn targets_without_a_path_are_faults() {
    for target in ["", "*", "login", "host/login", "1http://h/x", "http:/x"] {
        assert_eq!(fault(target), PathFault::NotAbsolute, "{target:?}");
    }
    assert_eq!(
        PathFault::NotAbsolute.to_string(),
        "the path must start with '/'"
    );
}

#[test]
fn case_trailing_slashes_and_backslashes_are_kept() {
    assert_eq!(ok("/LOGIN/"), "/LOGIN/");
    assert_eq!(ok("/a/%2E%2E\\b"), "/a/..\\b");
    assert_eq!(ok("/a\\..\\b/./c"), "/a\\..\\b/c");
}

/// Paths as clients write them: segments, dots, slashes, escapes, params.
fn path_like() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "/", "//", ".", "..", "a", "B", "é", ";", ";x=1", "%", "%2", "%2e", "%2E", "%2F", "%25",
        "%3B", "%41", "%C3%A9", "%FF", "%00", "?", "#", "\\", "~",
    ]);
    prop::collection::vec(piece, 0..12).prop_map(|pieces| format!("/{}", pieces.concat()))
}

/// A path of plain characters, no escapes and nothing cut.
fn plain_path() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "/", "//", ".", "..", "a", "B", "é", ";", ";x", "\\", "-", "~", "日",
    ]);
    prop::collection::vec(piece, 0..12).prop_map(|pieces| format!("/{}", pieces.concat()))
}

/// `path` with the characters `mask` picks percent-encoded (all bytes of
/// a character or none, in either case of hex digit), the first kept.
fn encode_some(path: &str, mask: &[bool], upper: bool) -> String {
    let mut out = String::new();
    for (i, c) in path.chars().enumerate() {
        if i > 0 && mask.get(i % mask.len().max(1)).copied().unwrap_or(false) {
            let mut buf = [0; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                if upper {
                    out.push_str(&format!("%{b:02X}"));
                } else {
                    out.push_str(&format!("%{b:02x}"));
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn has_escape(path: &str) -> bool {
    path.as_bytes()
        .windows(3)
        .any(|w| w[0] == b'%' && w[1].is_ascii_hexdigit() && w[2].is_ascii_hexdigit())
}

proptest! {
    #[test]
    fn never_panics_on_any_string(target in any::<String>()) {
        let _ = normalize(&target);
    }

    #[test]
    fn output_is_a_resolved_path(target in path_like()) {
        if let Ok(path) = normalize(&target) {
            prop_assert!(path.starts_with('/'), "{path:?}");
            prop_assert!(!path.contains("//"), "{path:?}");
            prop_assert!(!path.contains(';'), "{path:?}");
            prop_assert!(!path.contains('\0'), "{path:?}");
            prop_assert!(
                path.split('/').all(|s| s != "." && s != ".."),
                "{path:?}"
            );
        }
    }

    /// Normalizing again changes nothing, unless decoding exposed a `%`,
    /// `?` or `#` (from `%25`, `%3F`, `%23`): those are path data now, and
    /// a second pass would read them as syntax — which is why one pass
    /// decodes exactly once.
    #[test]
    fn normalizing_is_idempotent_on_its_output(target in path_like()) {
        if let Ok(path) = normalize(&target)
            && !path.contains(['%', '?', '#'])
        {
            prop_assert_eq!(normalize(&path), Ok(path.clone()));
        }
    }

    /// The bypass the module exists to stop: however a client escapes a
    /// path, it is charged as the same path.
    #[test]
    fn escaping_any_characters_changes_nothing(
        path in plain_path(),
        mask in prop::collection::vec(any::<bool>(), 1..16),
        upper in any::<bool>(),
    ) {
        let encoded = encode_some(&path, &mask, upper);
        prop_assert_eq!(normalize(&encoded), normalize(&path), "{}", encoded);
    }

    /// A `%XX` in the output was a `%25XX` in the input: nothing is
    /// decoded twice.
    #[test]
    fn escapes_in_the_output_came_from_escaped_percents(target in path_like()) {
        if let Ok(path) = normalize(&target)
            && has_escape(&path)
        {
            prop_assert!(target.to_ascii_uppercase().contains("%25"), "{target:?} → {path:?}");
        }
    }

    #[test]
    fn paths_needing_nothing_are_not_copied(path in plain_path()) {
        let clean = !path.contains(';')
            && !path.contains("//")
            && path.split('/').skip(1).all(|s| s != "." && s != "..");
        prop_assert_eq!(clean, matches!(normalize(&path), Ok(Cow::Borrowed(_))), "{}", path);
    }
}
