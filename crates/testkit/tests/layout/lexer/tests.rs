use super::*;

fn texts(source: &str) -> Vec<String> {
    tokenize(source)
        .expect("tokenizes")
        .into_iter()
        .map(|t| t.text)
        .collect()
}

fn kinds(source: &str) -> Vec<Kind> {
    tokenize(source)
        .expect("tokenizes")
        .into_iter()
        .map(|t| t.kind)
        .collect()
}

#[test]
fn comments_are_dropped_nested_block_comments_included() {
    let source = "a // b { c\n/* d /* e } */ f { */ g /** h */ i //! j\n k";
    assert_eq!(texts(source), ["a", "g", "i", "k"]);
}

#[test]
fn a_brace_or_quote_inside_a_string_is_part_of_the_string() {
    let source = r#"a "{ \" } // /*" b"#;
    assert_eq!(texts(source), ["a", r#""{ \" } // /*""#, "b"]);
}

#[test]
fn a_string_ending_in_an_escaped_backslash_ends_there() {
    assert_eq!(texts(r#""\\" { "#), [r#""\\""#, "{"]);
}

#[test]
fn raw_strings_end_only_at_a_quote_with_as_many_hashes() {
    let source = r###"a r#"x "} { "# b r"\" c br##"y "# z"## d"###;
    assert_eq!(
        texts(source),
        [
            "a",
            r##"r#"x "} { "#"##,
            "b",
            r#"r"\""#,
            "c",
            r###"br##"y "# z"##"###,
            "d"
        ]
    );
}

#[test]
fn byte_and_c_strings_are_literals() {
    assert_eq!(
        kinds(r##"b"{" c"}" cr#"{"#"##),
        [Kind::Literal, Kind::Literal, Kind::Literal]
    );
}

#[test]
fn char_literals_hold_braces_quotes_and_escapes() {
    let kinds = kinds(r#"'{' '}' '\'' '\\' '\u{7D}' b'{' '\n' '\x7B' '"'"#);
    assert!(kinds.iter().all(|k| *k == Kind::Literal), "{kinds:?}");
    assert_eq!(texts("x('{') y"), ["x", "(", "'{'", ")", "y"]);
}

#[test]
fn lifetimes_and_labels_are_not_char_literals() {
    let source = "fn f<'a>(x: &'a str) -> &'static str { 'outer: loop { break 'outer; } }";
    let tokens = tokenize(source).expect("tokenizes");
    let lifetimes: Vec<&str> = tokens
        .iter()
        .filter(|t| t.kind == Kind::Lifetime)
        .map(|t| t.text.as_str())
        .collect();
    assert_eq!(lifetimes, ["'a", "'a", "'static", "'outer", "'outer"]);
    let braces = tokens.iter().filter(|t| t.is_punct("{") || t.is_punct("}"));
    assert_eq!(braces.count(), 4);
}

#[test]
fn a_lifetime_next_to_a_char_literal_stays_a_lifetime() {
    assert_eq!(
        kinds("&'a x == 'b'"),
        [
            Kind::Punct,
            Kind::Lifetime,
            Kind::Ident,
            Kind::Punct,
            Kind::Punct,
            Kind::Literal
        ]
    );
}

#[test]
fn raw_identifiers_are_identifiers() {
    let tokens = tokenize("r#match r#fn rx").expect("tokenizes");
    assert!(tokens.iter().all(|t| t.kind == Kind::Ident));
    assert_eq!(texts("r#match r#fn rx"), ["match", "fn", "rx"]);
}

#[test]
fn paths_and_arrows_are_one_token() {
    assert_eq!(
        texts("crate::a -> b => c: d"),
        ["crate", "::", "a", "->", "b", "=>", "c", ":", "d"]
    );
}

#[test]
fn numbers_are_literals_and_ranges_are_not_numbers() {
    assert_eq!(
        texts("1.5e3 0x1F_u8 1..2"),
        ["1.5e3", "0x1F_u8", "1", ".", ".", "2"]
    );
}

#[test]
fn lines_are_counted_through_multi_line_comments_and_strings() {
    let source = "a\n/* \n */ b \"\n\n\" c\nr#\"\n\"# d";
    let lines: Vec<(String, usize)> = tokenize(source)
        .expect("tokenizes")
        .into_iter()
        .map(|t| (t.text, t.line))
        .collect();
    assert_eq!(lines[0], ("a".to_owned(), 1));
    assert_eq!(lines[1], ("b".to_owned(), 3));
    assert_eq!(lines[3], ("c".to_owned(), 5));
    assert_eq!(lines[5], ("d".to_owned(), 7));
}

#[test]
fn an_unterminated_comment_or_literal_is_an_error_not_a_guess() {
    for (source, what) in [
        ("a /* b /* c */", "block comment"),
        ("a \"b", "string literal"),
        ("r#\"a\"", "raw string literal"),
        ("'\\n", "char literal"),
    ] {
        let error = tokenize(source).expect_err(source);
        assert_eq!(error.what, what, "{source}");
    }
}
