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

/// The credentials in text the parser refused, found line by line (a
/// syntax error's snippet has no parsed document to ask): the value of a
/// `password:` key, and a URL holding a user part or a password in its
/// query, each to the end of its token.
pub fn line_secrets(text: &str) -> Vec<Secret> {
    let mut secrets = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let chars: Vec<char> = line.chars().collect();
        let number = index + 1;
        if let Some(start) = password_value(&chars) {
            secrets.push(Secret {
                start: (number, start),
                end: (number, chars.len()),
            });
            continue;
        }
        let mut from = 0;
        while let Some((start, end)) = credential_url(&chars, from) {
            secrets.push(Secret {
                start: (number, start),
                end: (number, end),
            });
            from = end;
        }
    }
    secrets
}

/// Where the value of a `password:` key on this line starts, if it has one.
fn password_value(chars: &[char]) -> Option<usize> {
    let text: String = chars.iter().collect();
    let indent = text.len() - text.trim_start_matches([' ', '\t', '-', '{', ',']).len();
    let rest = text.get(indent..)?;
    let rest = rest
        .strip_prefix("password")
        .or_else(|| rest.strip_prefix("\"password\""))?;
    let after_key = rest.trim_start();
    let value = after_key.strip_prefix(':')?.trim_start();
    (!value.is_empty()).then(|| chars.len() - value.chars().count())
}

/// The next URL at or after `from` whose text holds credentials: its token.
fn credential_url(chars: &[char], from: usize) -> Option<(usize, usize)> {
    let ends =
        |c: &char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | '{' | '}' | '[' | ']');
    let mut at = from;
    while at + 3 <= chars.len() {
        if chars[at..at + 3] != [':', '/', '/'] {
            at += 1;
            continue;
        }
        let start = chars[..at]
            .iter()
            .rposition(ends)
            .map_or(0, |i| i + 1)
            .max(from);
        let end = chars[at..]
            .iter()
            .position(ends)
            .map_or(chars.len(), |i| at + i);
        let token: String = chars[start..end].iter().collect();
        let rest = token.split_once("://").map_or("", |(_, r)| r);
        if rest.contains('@') || rest.contains("pass=") || rest.contains("password=") {
            return Some((start, end));
        }
        at = end;
    }
    None
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
