use super::*;
use crate::config::locate::Locator;

#[test]
fn a_caret_after_a_hidden_value_stays_under_its_column() {
    let text = "store:\n  redis: {url: \"redis://u:pw@h:1\", timeout: 0ms}\n";
    let locator = Locator::new(text);
    // `timeout`, past the URL drawn shorter than it is written.
    let at = Position {
        line: 2,
        column: 36,
    };
    assert_eq!(
        render(text, "t.yaml", at, "why", locator.secrets()),
        " --> t.yaml:2:36\n  |\n1 | store:\n2 |   redis: {url: <redacted>, timeout: 0ms}\n  |                            ^ why"
    );
}

#[test]
fn a_tab_before_the_column_is_drawn_as_four_spaces() {
    let text = "a:\n\tb: 1\n";
    let at = Position { line: 2, column: 2 };
    assert_eq!(
        render(text, "t.yaml", at, "why", &[]),
        " --> t.yaml:2:2\n  |\n1 | a:\n2 |     b: 1\n  |     ^ why"
    );
}

#[test]
fn credentials_in_text_the_parser_refused_are_found_line_by_line() {
    let text = "store:\n  redis: {url: \"redis://u:pw@h:1\", x: 1}\n  password: hunter2 hunter3\n  - password:s3cret\nsentinel: [redis://a:b@h:2, redis://h:3?password=x]\nplain: redis://h:1\n";
    let secrets = line_secrets(text);
    let shown: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(i, line)| draw(line, i + 1, 1, &secrets).0)
        .collect();
    assert_eq!(
        shown,
        [
            "store:",
            "  redis: {url: \"<redacted>\", x: 1}",
            "  password: <redacted>",
            "  - password:<redacted>",
            "sentinel: [<redacted>, <redacted>]",
            "plain: redis://h:1",
        ]
    );
}
