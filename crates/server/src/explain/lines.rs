//! `explain`'s text set out in short lines: a reviewer reads it in a
//! terminal or a diff, so no line runs past [`WIDTH`] characters (a word
//! longer than that, a path or a key, keeps its own line whole).

/// The longest line `explain` prints, in characters.
pub const WIDTH: usize = 100;

/// `text` with each line longer than [`WIDTH`] broken at its spaces, the
/// rest of it 4 spaces deeper than the line starts, so a wrapped field
/// reads apart from the next field and from a list's next item. An
/// operator keeps its operands on its line (`100 + ⌊5 × T / 1s⌋`).
pub(super) fn wrap(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        wrap_line(line, &mut out);
    }
    out
}

fn wrap_line(line: &str, out: &mut String) {
    if line.chars().count() <= WIDTH {
        out.push_str(line);
        return;
    }
    let indent = line.len() - line.trim_start_matches(' ').len();
    let mut width = indent;
    out.push_str(&line[..indent]);
    let mut first = true;
    for word in terms(&line[indent..]) {
        let len = word.chars().count();
        if first {
            first = false;
        } else if width + 1 + len > WIDTH {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', indent + 4));
            width = indent + 4;
        } else {
            out.push(' ');
            width += 1;
        }
        out.push_str(&word);
        width += len;
    }
}

/// An operator, which no line starts or ends with.
const OPERATORS: [&str; 5] = ["+", "−", "×", "/", "="];

/// The words of `text`, each operator joined to the words either side.
fn terms(text: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    let mut glue = false;
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let operator = OPERATORS.contains(&word);
        match terms.last_mut() {
            Some(last) if glue || operator => {
                last.push(' ');
                last.push_str(word);
            }
            _ => terms.push(word.to_owned()),
        }
        glue = operator;
    }
    terms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_breaks_at_spaces_and_continues_deeper() {
        let word = "x".repeat(30);
        let line = format!("  key: {word} {word} {word} {word}");
        assert_eq!(
            wrap(&format!("short\n{line}\n")),
            format!("short\n  key: {word} {word} {word}\n      {word}\n")
        );
        let long = "y".repeat(120);
        assert_eq!(
            wrap(&format!("  a {long} b")),
            format!("  a\n      {long}\n      b")
        );
    }
}
