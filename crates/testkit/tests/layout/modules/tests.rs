use super::*;
use crate::lexer::tokenize;

fn names(source: &str, depth: usize) -> Vec<String> {
    root_names(&tokenize(source).expect("tokenizes"), depth)
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

#[test]
fn crate_paths_name_their_first_segment() {
    let source = "
use crate::config::{Policy, Store};
fn f() -> crate::limiter::Decision { crate::metrics::count(); }
pub(crate) struct S;
";
    assert_eq!(names(source, 1), ["config", "limiter", "metrics"]);
}

#[test]
fn a_crate_group_names_each_item_nested_groups_included() {
    let source = "use crate::{a::X, b, c::{d, e::F}, self as root, ServeError};";
    assert_eq!(names(source, 1), ["a", "b", "c", "ServeError"]);
}

#[test]
fn super_names_a_module_only_when_it_climbs_to_the_crate_root() {
    let source = "use super::scope; use super::super::live;";
    assert_eq!(names(source, 1), ["scope"]);
    assert_eq!(names(source, 2), ["live"]);
    assert!(names("pub(super) fn f() {}", 1).is_empty());
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
    assert_eq!(names(source, 1), ["a", "b", "c"]);
}

#[test]
fn comments_and_strings_name_nothing() {
    let source = r#"
//! See crate::config.
/// [`crate::scope::Scope`]
const S: &str = "crate::live";
// use crate::http;
"#;
    assert!(names(source, 1).is_empty());
}

#[test]
fn only_a_paths_first_segment_can_be_the_crate() {
    assert_eq!(names("$crate::a::b; x::crate::c", 1), ["a"]);
}

fn graph(edges: &[(&str, &str)]) -> Graph {
    let mut graph = Graph::new();
    for (from, to) in edges {
        let seen = Seen {
            file: format!("{from}.rs"),
            line: 1,
        };
        graph
            .entry((*from).to_owned())
            .or_default()
            .insert((*to).to_owned(), seen);
    }
    graph
}

#[test]
fn tangles_are_the_components_that_reach_themselves() {
    let g = graph(&[
        ("config", "scope"),
        ("scope", "config"),
        ("http", "app"),
        ("app", "limiter"),
        ("limiter", "live"),
        ("live", "limiter"),
        ("live", "config"),
    ]);
    assert_eq!(
        tangles(&g),
        [vec!["config", "scope"], vec!["limiter", "live"]]
    );
}

#[test]
fn every_elementary_cycle_of_a_tangle_is_listed_once_starting_at_its_smallest_module() {
    let g = graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "b"), ("b", "a")]);
    let tangle = tangles(&g).remove(0);
    let texts: Vec<String> = cycles(&g, &tangle).iter().map(|c| cycle_text(c)).collect();
    assert_eq!(texts, ["a -> b -> a", "a -> b -> c -> a", "b -> c -> b"]);
}
