//! The lines around a place in the config, drawn as serde-saphyr draws a
//! syntax error's (two lines either side, a caret under the column, tabs
//! as four spaces), so a semantic error and a syntax error look alike.
//! Values that hold credentials are shown as `<redacted>`.

use super::locate::{Position, Secret};

/// How many lines before and after the pointed one are shown.
const CONTEXT_LINES: usize = 2;
/// What a tab is drawn as, as serde-saphyr's renderer draws it.
const TAB: &str = "    ";
/// What a credential is drawn as.
const REDACTED: &str = "<redacted>";

/// ` --> source:line:column`, then the lines around `at` with `label`
/// under a caret at its column. No trailing newline.
pub fn render(text: &str, source: &str, at: Position, label: &str, secrets: &[Secret]) -> String {
    let text = text.strip_prefix('\u{FEFF}').unwrap_or(text);
    let lines: Vec<&str> = text.lines().collect();
    let first = at.line.saturating_sub(CONTEXT_LINES).max(1);
    let last = (at.line + CONTEXT_LINES).min(lines.len());
    let width = last.max(at.line).to_string().len();
    let gutter = format!("{:width$} |", "");
    let mut out = vec![
        format!("{:width$}--> {source}:{}:{}", "", at.line, at.column),
        gutter.clone(),
    ];
    let mut last_was_caret = false;
    for number in first..=last {
        let (shown, caret) = draw(lines[number - 1], number, at.column, secrets);
        out.push(format!("{number:>width$} | {shown}").trim_end().to_owned());
        last_was_caret = number == at.line;
        if last_was_caret {
            out.push(format!("{gutter} {:caret$}^ {label}", ""));
        }
    }
    if !last_was_caret {
        out.push(gutter);
    }
    out.join("\n")
}

/// Line `number` as drawn, and the drawn column (from 0) of `column`.
fn draw(line: &str, number: usize, column: usize, secrets: &[Secret]) -> (String, usize) {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let hidden = |col: usize| {
        secrets
            .iter()
            .find(|s| s.start <= (number, col) && (number, col) < s.end)
    };
    let mut shown = String::new();
    let mut caret = None;
    for (col, c) in line.chars().enumerate() {
        if col + 1 == column {
            caret = Some(shown.chars().count());
        }
        match hidden(col) {
            // The whole value is drawn once, where it starts (or where
            // this line of it starts).
            Some(secret) if secret.start == (number, col) || col == 0 => shown.push_str(REDACTED),
            Some(_) => {}
            None if c == '\t' => shown.push_str(TAB),
            None => shown.push(c),
        }
    }
    let caret = caret.unwrap_or_else(|| shown.chars().count());
    (shown, caret)
}

#[cfg(test)]
mod tests;
