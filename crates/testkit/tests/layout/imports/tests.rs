use super::*;
use crate::lexer::tokenize;

fn children(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// The imports of `source` in `module`, each `a::b` from the crate root.
fn paths(source: &str, module: &[&str], kids: &[&str]) -> Vec<String> {
    let module: ModPath = module.iter().map(|m| (*m).to_owned()).collect();
    scan(
        &tokenize(source).expect("tokenizes"),
        &module,
        &children(kids),
    )
    .imports
    .into_iter()
    .map(|import| import.path.join("::"))
    .collect()
}

#[test]
fn crate_paths_in_uses_and_code_are_imports() {
    let source = "
use crate::config::{Policy, Store};
fn f() -> crate::limiter::Decision { crate::metrics::count(); }
pub(crate) struct S;
";
    assert_eq!(
        paths(source, &["a"], &[]),
        [
            "config::Policy",
            "config::Store",
            "limiter::Decision",
            "metrics::count"
        ]
    );
}

#[test]
fn a_group_imports_each_item_nested_groups_and_self_included() {
    let source = "use crate::{a::X, b, c::{self, e::F}, ServeError as E};";
    assert_eq!(
        paths(source, &[], &[]),
        ["a::X", "b", "c", "c::e::F", "ServeError"]
    );
}

#[test]
fn super_climbs_from_the_files_module_and_self_stays_in_it() {
    let source = "use super::scope; use super::super::live; use self::x::Y;";
    assert_eq!(
        paths(source, &["a", "b"], &["x"]),
        ["a::scope", "live", "a::b::x::Y"]
    );
    assert!(paths("use super::super::x;", &["a"], &[]).is_empty());
    assert!(paths("pub(super) fn f() {}", &["a"], &[]).is_empty());
}

#[test]
fn an_inline_module_adds_a_level_for_super() {
    let source = "
use super::a;
mod tests {
    use super::*;
    use super::super::b;
}
use super::c;
";
    assert_eq!(paths(source, &["m"], &[]), ["a", "b", "c"]);
}

#[test]
fn a_child_module_named_alone_is_an_import_and_another_crate_is_not() {
    let source = "use link::Link; use redis::aio; use std::sync::Arc;";
    assert_eq!(paths(source, &["redis"], &["link"]), ["redis::link::Link"]);
}

#[test]
fn comments_and_strings_import_nothing() {
    let source = r#"
//! See crate::config.
/// [`crate::scope::Scope`]
const S: &str = "crate::live";
// use crate::http;
"#;
    assert!(paths(source, &["a"], &[]).is_empty());
}

#[test]
fn only_a_paths_first_segment_can_be_the_crate() {
    assert_eq!(paths("$crate::a::b; x::crate::c", &[], &[]), ["a::b"]);
}

fn krate(files: &[(&[&str], &str)]) -> Crate {
    let modules: Vec<ModPath> = files
        .iter()
        .map(|(m, _)| m.iter().map(|s| (*s).to_owned()).collect())
        .collect();
    let mut krate = Crate {
        files: BTreeMap::new(),
    };
    for (module, (_, source)) in modules.iter().zip(files) {
        let kids: BTreeSet<String> = modules
            .iter()
            .filter(|m| m.len() == module.len() + 1 && m.starts_with(module))
            .filter_map(|m| m.last().cloned())
            .collect();
        let scanned = scan(&tokenize(source).expect("tokenizes"), module, &kids);
        krate.files.insert(module.clone(), scanned);
    }
    krate
}

fn path(text: &str) -> ModPath {
    text.split("::").map(str::to_owned).collect()
}

#[test]
fn a_reexported_name_resolves_to_the_module_that_holds_it() {
    let krate = krate(&[
        (
            &[],
            "mod check; mod request_id; pub use request_id::{Retry as R};",
        ),
        (&["check"], "pub struct Check;"),
        (&["request_id"], "pub struct Retry;"),
        (&["redis"], "use link::Link; pub use self::link::Lane;"),
        (&["redis", "link"], "pub struct Link;"),
    ]);
    assert_eq!(krate.resolve(&path("R")), ["request_id"]);
    assert_eq!(krate.resolve(&path("check::Check")), ["check"]);
    assert_eq!(krate.resolve(&path("redis::Link")), ["redis", "link"]);
    assert_eq!(krate.resolve(&path("redis::Lane::new")), ["redis", "link"]);
    assert_eq!(krate.resolve(&path("Unknown")), Vec::<String>::new());
}

#[test]
fn a_use_that_names_itself_ends_where_it_is() {
    let krate = krate(&[(&[], "use crate::X; use crate::Y as Z; use crate::Z as Y;")]);
    assert_eq!(krate.resolve(&path("X")), Vec::<String>::new());
    assert_eq!(krate.resolve(&path("Y")), Vec::<String>::new());
}

#[test]
fn files_map_to_modules() {
    assert_eq!(module_of("lib.rs"), Vec::<String>::new());
    assert_eq!(module_of("redis/mod.rs"), ["redis"]);
    assert_eq!(module_of("redis/link.rs"), ["redis", "link"]);
    assert_eq!(module_of("memory.rs"), ["memory"]);
}
