//! A Rust tokenizer just good enough for the layout guards: it knows where
//! comments, strings, raw strings and char literals begin and end, so that
//! a brace or a `crate::` inside one is never taken for code. It does not
//! check that the source is valid Rust (the compiler does); it only refuses
//! to guess when a comment or literal never ends.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An identifier or keyword (a raw identifier without its `r#`).
    Ident,
    /// `::`, `->`, `=>` or any other single character.
    Punct,
    /// A string, byte string, C string (raw or not), char, byte or number.
    Literal,
    /// A lifetime or a loop label, with its `'`.
    Lifetime,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub kind: Kind,
    pub text: String,
    /// 1-based line of the token's first character.
    pub line: usize,
}

impl Token {
    pub fn is(&self, kind: Kind, text: &str) -> bool {
        self.kind == kind && self.text == text
    }

    pub fn is_punct(&self, text: &str) -> bool {
        self.is(Kind::Punct, text)
    }

    pub fn is_ident(&self, text: &str) -> bool {
        self.is(Kind::Ident, text)
    }
}

/// Why a source could not be tokenized: where the unterminated comment or
/// literal starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LexError {
    pub line: usize,
    pub what: &'static str,
}

/// The tokens of `source`, comments dropped.
pub fn tokenize(source: &str) -> Result<Vec<Token>, LexError> {
    let mut lexer = Lexer {
        chars: source.chars().collect(),
        at: 0,
        line: 1,
        tokens: Vec::new(),
    };
    lexer.run()?;
    Ok(lexer.tokens)
}

struct Lexer {
    chars: Vec<char>,
    at: usize,
    line: usize,
    tokens: Vec<Token>,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    /// Moves past one character, counting lines.
    fn bump(&mut self) {
        if self.peek(0) == Some('\n') {
            self.line += 1;
        }
        self.at += 1;
    }

    fn push(&mut self, kind: Kind, start: usize, line: usize) {
        let text = self.chars[start..self.at].iter().collect();
        self.tokens.push(Token { kind, text, line });
    }

    fn run(&mut self) -> Result<(), LexError> {
        while let Some(c) = self.peek(0) {
            let (start, line) = (self.at, self.line);
            match c {
                _ if c.is_whitespace() => self.bump(),
                '/' if self.peek(1) == Some('/') => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.bump();
                    }
                }
                '/' if self.peek(1) == Some('*') => self.block_comment()?,
                '"' => {
                    self.string(line)?;
                    self.push(Kind::Literal, start, line);
                }
                '\'' => self.quote(start, line)?,
                _ if c == '_' || c.is_alphabetic() => self.word(start, line)?,
                _ if c.is_ascii_digit() => {
                    self.bump();
                    while self
                        .peek(0)
                        .is_some_and(|c| c == '_' || c.is_alphanumeric())
                        || (self.peek(0) == Some('.')
                            && self.peek(1).is_some_and(|c| c.is_ascii_digit()))
                    {
                        self.bump();
                    }
                    self.push(Kind::Literal, start, line);
                }
                _ => {
                    let pair = [Some(c), self.peek(1)];
                    let two = matches!(
                        pair,
                        [Some(':'), Some(':')] | [Some('-'), Some('>')] | [Some('='), Some('>')]
                    );
                    self.bump();
                    if two {
                        self.bump();
                    }
                    self.push(Kind::Punct, start, line);
                }
            }
        }
        Ok(())
    }

    /// `/* … */`, which nests.
    fn block_comment(&mut self) -> Result<(), LexError> {
        let line = self.line;
        let mut depth = 0usize;
        loop {
            match (self.peek(0), self.peek(1)) {
                (Some('/'), Some('*')) => {
                    depth += 1;
                    self.bump();
                    self.bump();
                }
                (Some('*'), Some('/')) => {
                    depth -= 1;
                    self.bump();
                    self.bump();
                    if depth == 0 {
                        return Ok(());
                    }
                }
                (Some(_), _) => self.bump(),
                (None, _) => {
                    return Err(LexError {
                        line,
                        what: "block comment",
                    });
                }
            }
        }
    }

    /// A `"…"` string from its opening quote, escapes skipped.
    fn string(&mut self, line: usize) -> Result<(), LexError> {
        self.bump();
        loop {
            match self.peek(0) {
                Some('"') => {
                    self.bump();
                    return Ok(());
                }
                Some('\\') => {
                    self.bump();
                    self.bump();
                }
                Some(_) => self.bump(),
                None => {
                    return Err(LexError {
                        line,
                        what: "string literal",
                    });
                }
            }
        }
    }

    /// A raw string from its first `#` or `"`: no escapes, it ends at a
    /// `"` followed by as many `#` as it opened with.
    fn raw_string(&mut self, line: usize) -> Result<(), LexError> {
        let mut hashes = 0;
        while self.peek(0) == Some('#') {
            hashes += 1;
            self.bump();
        }
        self.bump(); // the opening quote
        loop {
            match self.peek(0) {
                Some('"') if (1..=hashes).all(|i| self.peek(i) == Some('#')) => {
                    for _ in 0..=hashes {
                        self.bump();
                    }
                    return Ok(());
                }
                Some(_) => self.bump(),
                None => {
                    return Err(LexError {
                        line,
                        what: "raw string literal",
                    });
                }
            }
        }
    }

    /// From a `'`: a char literal (`'x'`, `'\n'`, `'\u{1F600}'`, `'\''`)
    /// or a lifetime or label (`'a`, `'static`, `'outer:`).
    fn quote(&mut self, start: usize, line: usize) -> Result<(), LexError> {
        let escaped = self.peek(1) == Some('\\');
        if escaped || self.peek(2) == Some('\'') {
            self.char_literal(line)?;
            self.push(Kind::Literal, start, line);
        } else {
            self.bump();
            while self
                .peek(0)
                .is_some_and(|c| c == '_' || c.is_alphanumeric())
            {
                self.bump();
            }
            self.push(Kind::Lifetime, start, line);
        }
        Ok(())
    }

    /// A char or byte literal from its opening `'`.
    fn char_literal(&mut self, line: usize) -> Result<(), LexError> {
        self.bump();
        if self.peek(0) == Some('\\') {
            self.bump();
        }
        self.bump(); // the char, or the escape's first
        loop {
            match self.peek(0) {
                Some('\'') => {
                    self.bump();
                    return Ok(());
                }
                Some('\n') | None => {
                    return Err(LexError {
                        line,
                        what: "char literal",
                    });
                }
                Some(_) => self.bump(),
            }
        }
    }

    /// An identifier, or the prefix of a literal (`b"…"`, `r#"…"#`,
    /// `br"…"`, `c"…"`, `b'x'`) or of a raw identifier (`r#match`).
    fn word(&mut self, start: usize, line: usize) -> Result<(), LexError> {
        while self
            .peek(0)
            .is_some_and(|c| c == '_' || c.is_alphanumeric())
        {
            self.bump();
        }
        let word: String = self.chars[start..self.at].iter().collect();
        let raw = matches!(word.as_str(), "r" | "br" | "cr");
        let next = (self.peek(0), self.peek(1));
        match next {
            (Some('"'), _) if raw => {
                self.raw_string(line)?;
                self.push(Kind::Literal, start, line);
            }
            (Some('#'), Some('"' | '#')) if raw => {
                self.raw_string(line)?;
                self.push(Kind::Literal, start, line);
            }
            (Some('"'), _) if matches!(word.as_str(), "b" | "c") => {
                self.string(line)?;
                self.push(Kind::Literal, start, line);
            }
            (Some('\''), _) if word == "b" => {
                self.char_literal(line)?;
                self.push(Kind::Literal, start, line);
            }
            (Some('#'), Some(c)) if word == "r" && (c == '_' || c.is_alphabetic()) => {
                self.bump();
                let name_start = self.at;
                while self
                    .peek(0)
                    .is_some_and(|c| c == '_' || c.is_alphanumeric())
                {
                    self.bump();
                }
                self.push(Kind::Ident, name_start, line);
            }
            _ => self.push(Kind::Ident, start, line),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
