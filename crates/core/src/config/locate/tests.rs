use super::*;

fn at(line: usize, column: usize) -> Option<Position> {
    Some(Position { line, column })
}

#[test]
fn a_path_points_at_the_key_of_the_field_it_ends_on() {
    let text = "server:\n  max_headers: 4\npolicies:\n  - name: a\n    refill:\n      per: 10x\n";
    let locator = Locator::new(text);
    assert_eq!(locator.find(&node_path!["server"]), at(1, 1));
    assert_eq!(locator.find(&node_path!["server", "max_headers"]), at(2, 3));
    assert_eq!(
        locator.find(&node_path!["policies", 0, "refill", "per"]),
        at(6, 7)
    );
    // A list item is pointed at where it starts: its first key.
    assert_eq!(locator.find(&node_path!["policies", 0]), at(4, 5));
    // The document itself is no one place.
    assert_eq!(locator.find(&NodePath::default()), None);
}

#[test]
fn quoted_keys_are_found_by_their_text_and_pointed_at_their_quote() {
    let text = "\"server\":\n  'max_headers': 4\n";
    let locator = Locator::new(text);
    assert_eq!(locator.find(&node_path!["server", "max_headers"]), at(2, 3));
}

#[test]
fn flow_mappings_and_lists_are_read_like_block_ones() {
    let text = "server: {max_headers: 4}\npolicies: [{name: a, refill: {tokens: 1, per: 10x}}, {name: b}]\n";
    let locator = Locator::new(text);
    assert_eq!(
        locator.find(&node_path!["server", "max_headers"]),
        at(1, 10)
    );
    assert_eq!(
        locator.find(&node_path!["policies", 0, "refill", "per"]),
        at(2, 42)
    );
    // A flow item starts at its brace.
    assert_eq!(locator.find(&node_path!["policies", 1]), at(2, 54));
    assert_eq!(locator.policy_index("b"), Some(1));
}

#[test]
fn sequences_of_mappings_find_the_policy_by_name() {
    let text = "policies:\n  - name: a\n    limit: 1\n  - name: b\n    limit: 2\n  - name: c\n    limit: 3\n";
    let locator = Locator::new(text);
    assert_eq!(locator.policy_index("c"), Some(2));
    assert_eq!(locator.policy_index("nope"), None);
    let path = node_path!["policies", 2].then_field("limit");
    assert_eq!(locator.find(&path), at(7, 5));
}

#[test]
fn a_path_through_an_alias_stops_at_the_alias() {
    let text = "policies:\n  - name: a\n    refill: &slow {tokens: 1, per: 10x}\n  - name: b\n    refill: *slow\n";
    let locator = Locator::new(text);
    // Written in place: the key inside the anchored definition.
    assert_eq!(
        locator.find(&node_path!["policies", 0, "refill", "per"]),
        at(3, 31)
    );
    // Used through the alias: the alias, where policy b takes it.
    assert_eq!(
        locator.find(&node_path!["policies", 1, "refill", "per"]),
        at(5, 13)
    );
}

#[test]
fn a_key_merged_in_points_at_the_merge_key() {
    let text = "base: &base {limit: 1}\npolicies:\n  - name: a\n    <<: *base\n";
    let locator = Locator::new(text);
    assert_eq!(locator.find(&node_path!["policies", 0, "limit"]), at(4, 5));
}

#[test]
fn comments_and_blank_lines_move_nothing() {
    let text = "# the server\nserver:\n\n  # how many\n  max_headers: 4 # too few\n";
    let locator = Locator::new(text);
    assert_eq!(locator.find(&node_path!["server", "max_headers"]), at(5, 3));
}

#[test]
fn a_missing_step_stops_at_the_last_node_found() {
    let text = "server:\n  max_headers: 4\n";
    let locator = Locator::new(text);
    assert_eq!(
        locator.find(&node_path!["server", "nope", "deeper"]),
        at(1, 1)
    );
    assert_eq!(locator.find(&node_path!["nope"]), None);
    // An index into a mapping, or a key into a list, is not there either.
    assert_eq!(locator.find(&node_path!["server", 0]), at(1, 1));
}

#[test]
fn a_field_as_written_becomes_a_path() {
    assert_eq!(
        NodePath::default().then_field("identity[2].api_key"),
        node_path!["identity", 2, "api_key"]
    );
    assert_eq!(
        NodePath::default().then_field("refill.per"),
        node_path!["refill", "per"]
    );
    assert_eq!(NodePath::default().then_field("x[oops"), node_path!["x"]);
}

#[test]
fn passwords_and_urls_with_credentials_are_secrets() {
    let text =
        "store:\n  redis: {url: \"redis://u:pw@h:1\", password: hunter2, prefix: redis://plain}\n";
    let locator = Locator::new(text);
    let spans: Vec<Secret> = locator.secrets().to_vec();
    assert_eq!(
        spans,
        [
            Secret {
                start: (2, 15),
                end: (2, 33)
            },
            Secret {
                start: (2, 45),
                end: (2, 52)
            },
        ]
    );
}

#[test]
fn text_the_parser_refuses_finds_nothing() {
    let locator = Locator::new("server: [\n");
    assert_eq!(locator.find(&node_path!["server"]), None);
}
