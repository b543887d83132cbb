use super::*;

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
