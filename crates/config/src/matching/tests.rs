use super::*;

#[test]
fn patterns_match_whole_segments() {
    let p = PathPattern::parse("/orders/{id}").expect("valid");
    assert!(p.matches("/orders/42"));
    assert!(!p.matches("/orders/42/items"));
    assert!(!p.matches("/orders/"));
    assert!(!p.matches("/orders"));
    let rest = PathPattern::parse("/static/{*file}").expect("valid");
    assert!(rest.matches("/static/a/b.css"));
    assert!(rest.matches("/static/"));
    assert!(!rest.matches("/other/a"));
    let root = PathPattern::parse("/").expect("valid");
    assert!(root.matches("/"));
    assert!(!root.matches("/a"));
}

#[test]
fn bad_patterns_are_refused() {
    assert!(PathPattern::parse("orders").is_err());
    assert!(PathPattern::parse("/a/{*rest}/b").is_err());
    assert!(PathPattern::parse("/a/x{id}").is_err());
    assert!(PathPattern::parse("/a/{}").is_err());
}

#[test]
fn hosts_match_exactly_or_by_subdomain() {
    let m = Matcher {
        host: Some("*.example.com".into()),
        ..Matcher::default()
    };
    assert!(m.matches("GET", "/", "api.example.com"));
    assert!(m.matches("GET", "/", "api.example.com:8443"));
    assert!(!m.matches("GET", "/", "example.com"));
    assert!(!m.matches("GET", "/", "evilexample.com"));
    let exact = Matcher {
        host: Some("api.example.com".into()),
        methods: Some(vec!["POST".into()]),
        ..Matcher::default()
    };
    assert!(exact.matches("post", "/", "API.example.com"));
    assert!(!exact.matches("GET", "/", "api.example.com"));
}

#[test]
fn a_fully_qualified_host_is_the_same_host() {
    let exact = Matcher {
        host: Some("api.example.com".into()),
        ..Matcher::default()
    };
    assert!(exact.matches("GET", "/", "api.example.com."));
    assert!(exact.matches("GET", "/", "API.example.com.:8443"));
    assert!(!exact.matches("GET", "/", "api.example.com.."));
    let wild = Matcher {
        host: Some("*.example.com".into()),
        ..Matcher::default()
    };
    assert!(wild.matches("GET", "/", "api.example.com."));
    assert!(!wild.matches("GET", "/", "example.com."));
    assert!(!wild.matches("GET", "/", "é.example.coé"));
}

fn with_path(pattern: &str) -> Matcher {
    Matcher {
        path: Some(PathPattern::parse(pattern).expect("valid")),
        ..Matcher::default()
    }
}

fn with_prefix(prefix: &str) -> Matcher {
    Matcher {
        path_prefix: Some(prefix.into()),
        ..Matcher::default()
    }
}

#[test]
fn paths_are_case_sensitive_and_slash_strict_by_default() {
    let login = with_path("/login");
    assert!(login.matches("GET", "/login", ""));
    assert!(!login.matches("GET", "/LOGIN", ""));
    assert!(!login.matches("GET", "/login/", ""));
    let api = with_prefix("/api/");
    assert!(api.matches("GET", "/api/x", ""));
    assert!(!api.matches("GET", "/API/x", ""));
    assert!(!api.matches("GET", "/api", ""));
    assert_eq!(login.canonical_path("/LOGIN/"), "/LOGIN/");
    assert!(matches!(login.canonical_path("/LOGIN/"), Cow::Borrowed(_)));
}

#[test]
fn case_insensitive_compares_literals_and_prefixes_in_any_case() {
    let login = Matcher {
        case_insensitive: true,
        ..with_path("/Login/{id}")
    };
    assert!(login.matches("GET", "/login/Ab", ""));
    assert!(login.matches("GET", "/LOGIN/ab", ""));
    assert!(!login.matches("GET", "/logout/ab", ""));
    assert!(!login.matches("GET", "/login/ab/", ""));
    let api = Matcher {
        case_insensitive: true,
        ..with_prefix("/api/")
    };
    assert!(api.matches("GET", "/API/orders", ""));
    assert!(api.matches("GET", "/Api/", ""));
    assert!(!api.matches("GET", "/apx/", ""));
    assert!(!api.matches("GET", "/ap", ""));
    // Non-ASCII letters are compared as they are.
    let cafe = Matcher {
        case_insensitive: true,
        ..with_path("/café")
    };
    assert!(cafe.matches("GET", "/CAFé", ""));
    assert!(!cafe.matches("GET", "/CAFÉ", ""));
}

#[test]
fn trailing_slash_ignore_matches_with_or_without_it() {
    let login = Matcher {
        trailing_slash: TrailingSlash::Ignore,
        ..with_path("/login")
    };
    assert!(login.matches("GET", "/login", ""));
    assert!(login.matches("GET", "/login/", ""));
    assert!(!login.matches("GET", "/login//", ""));
    let slashed = Matcher {
        trailing_slash: TrailingSlash::Ignore,
        ..with_path("/login/")
    };
    assert!(slashed.matches("GET", "/login", ""));
    assert!(slashed.matches("GET", "/login/", ""));
    let order = Matcher {
        trailing_slash: TrailingSlash::Ignore,
        ..with_path("/orders/{id}")
    };
    assert!(order.matches("GET", "/orders/42/", ""));
    assert!(!order.matches("GET", "/orders/", ""));
    let root = Matcher {
        trailing_slash: TrailingSlash::Ignore,
        ..with_path("/")
    };
    assert!(root.matches("GET", "/", ""));
    assert!(!root.matches("GET", "/a", ""));
    let api = Matcher {
        trailing_slash: TrailingSlash::Ignore,
        ..with_prefix("/api/")
    };
    assert!(api.matches("GET", "/api", ""));
    assert!(api.matches("GET", "/api/", ""));
    assert!(api.matches("GET", "/api/x", ""));
    assert!(!api.matches("GET", "/apix", ""));
    let both = Matcher {
        trailing_slash: TrailingSlash::Ignore,
        case_insensitive: true,
        ..with_prefix("/api/")
    };
    assert!(both.matches("GET", "/API", ""));
}

#[test]
fn the_canonical_path_is_one_bucket_for_spellings_matched_alike() {
    let m = Matcher {
        case_insensitive: true,
        trailing_slash: TrailingSlash::Ignore,
        ..with_path("/login")
    };
    for spelling in ["/login", "/LOGIN", "/LoGiN/", "/login/"] {
        assert_eq!(m.canonical_path(spelling), "/login", "{spelling}");
    }
    assert_eq!(m.canonical_path("/"), "/");
    assert!(matches!(
        m.canonical_path("/login/"),
        Cow::Borrowed("/login")
    ));
    let cased = Matcher {
        case_insensitive: true,
        ..Matcher::default()
    };
    assert_eq!(cased.canonical_path("/A/B/"), "/a/b/");
    let slash = Matcher {
        trailing_slash: TrailingSlash::Ignore,
        ..Matcher::default()
    };
    assert_eq!(slash.canonical_path("/A/B/"), "/A/B");
}

#[test]
fn a_get_limit_takes_head_and_nothing_else_takes_what_it_does_not_name() {
    let reads = Matcher {
        methods: Some(vec!["GET".into()]),
        ..Matcher::default()
    };
    assert!(reads.matches("GET", "/", ""));
    assert!(reads.matches("HEAD", "/", ""));
    assert!(reads.matches("head", "/", ""));
    assert!(!reads.matches("POST", "/", ""));
    let heads = Matcher {
        methods: Some(vec!["HEAD".into()]),
        ..Matcher::default()
    };
    assert!(heads.matches("HEAD", "/", ""));
    assert!(!heads.matches("GET", "/", ""));
    let writes = Matcher {
        methods: Some(vec!["POST".into()]),
        ..Matcher::default()
    };
    assert!(!writes.matches("HEAD", "/", ""));
}

#[test]
fn format_suffix_ignore_takes_a_path_with_a_format_for_the_path() {
    let login = Matcher {
        format_suffix: FormatSuffix::Ignore,
        ..with_path("/login")
    };
    for spelling in ["/login", "/login.json", "/login.xml", "/login.HTML5"] {
        assert!(login.matches("POST", spelling, ""), "{spelling}");
        assert_eq!(login.canonical_path(spelling), "/login", "{spelling}");
    }
    for other in [
        "/login.",
        "/login.json.xml",
        "/login.js-on",
        "/login.abcdefghijk",
        "/login/.json",
        "/login.json/",
        "/logins.json",
    ] {
        assert!(!login.matches("POST", other, ""), "{other}");
    }
    // Strict by default: the suffix makes another path.
    assert!(!with_path("/login").matches("POST", "/login.json", ""));
    // With the other options: any case, a trailing slash after the suffix.
    let all = Matcher {
        format_suffix: FormatSuffix::Ignore,
        case_insensitive: true,
        trailing_slash: TrailingSlash::Ignore,
        ..with_path("/login")
    };
    for spelling in ["/LOGIN.json", "/Login.JSON/", "/login/", "/login.xml"] {
        assert!(all.matches("POST", spelling, ""), "{spelling}");
        assert_eq!(all.canonical_path(spelling), "/login", "{spelling}");
    }
    // A pattern whose last segment is a literal with a dot still matches as written.
    let robots = Matcher {
        format_suffix: FormatSuffix::Ignore,
        ..with_path("/robots.txt")
    };
    assert!(robots.matches("GET", "/robots.txt", ""));
    assert!(robots.matches("GET", "/robots.txt.gz", ""));
    // A prefix takes the stem of its own path.
    let api = Matcher {
        format_suffix: FormatSuffix::Ignore,
        trailing_slash: TrailingSlash::Ignore,
        ..with_prefix("/api/")
    };
    assert!(api.matches("GET", "/api.json", ""));
    assert!(!api.matches("GET", "/apix.json", ""));
}

#[test]
fn path_parameters_take_any_case_and_a_trailing_slash_when_asked() {
    let search = Matcher {
        methods: Some(vec!["GET".into()]),
        case_insensitive: true,
        trailing_slash: TrailingSlash::Ignore,
        format_suffix: FormatSuffix::Ignore,
        ..with_path("/api/search/{index}")
    };
    for spelling in [
        "/api/search/x",
        "/API/search/x",
        "/api/SEARCH/x/",
        "/api/search/x.json",
    ] {
        assert!(search.matches("GET", spelling, ""), "{spelling}");
        assert!(search.matches("HEAD", spelling, ""), "{spelling}");
    }
    assert!(!search.matches("GET", "/api/search/", ""));
    assert!(!search.matches("GET", "/api/search/x/y", ""));
    assert_eq!(search.canonical_path("/API/Search/X/"), "/api/search/x");
}

#[test]
fn respellings_name_each_spelling_a_match_leaves_out_and_its_option() {
    let shown = |m: &Matcher| -> Vec<(String, &str)> {
        m.respellings()
            .into_iter()
            .map(|r| (r.example, r.option))
            .collect()
    };
    assert_eq!(
        shown(&with_path("/login")),
        [
            ("/LOGIN".to_owned(), "case_insensitive: true"),
            ("/login/".to_owned(), "trailing_slash: ignore"),
            ("/login.json".to_owned(), "format_suffix: ignore"),
        ]
    );
    assert_eq!(
        shown(&with_path("/api/search/{index}")),
        [
            ("/API/SEARCH/{INDEX}".to_owned(), "case_insensitive: true"),
            ("/api/search/{index}/".to_owned(), "trailing_slash: ignore"),
        ]
    );
    assert_eq!(
        shown(&with_prefix("/api/")),
        [
            ("/API/".to_owned(), "case_insensitive: true"),
            ("/api".to_owned(), "trailing_slash: ignore"),
        ]
    );
    let hardened = Matcher {
        case_insensitive: true,
        trailing_slash: TrailingSlash::Ignore,
        format_suffix: FormatSuffix::Ignore,
        ..with_path("/login")
    };
    assert_eq!(shown(&hardened), []);
    let exports = Matcher {
        case_insensitive: true,
        ..with_prefix("/api/exports")
    };
    assert_eq!(shown(&exports), []);
    assert_eq!(shown(&with_path("/static/{*file}")).len(), 1);
    assert_eq!(shown(&Matcher::default()), []);
}
