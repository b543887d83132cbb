//! The guides as the tests read them: docs/guides/*.md, and their fenced
//! blocks with the words after the language (`file=PATH`, `run=STACK`,
//! `output`) that say what each block is.

use std::path::{Path, PathBuf};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One guide: its name (the file's stem) and its text.
pub struct Guide {
    pub name: String,
    pub text: String,
}

/// Every `docs/guides/*.md`, sorted by name.
pub fn guides() -> Vec<Guide> {
    let dir = root().join("docs/guides");
    let mut found: Vec<Guide> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .map(|path| Guide {
            name: path
                .file_stem()
                .expect("a file name")
                .to_string_lossy()
                .into_owned(),
            text: std::fs::read_to_string(&path).expect("read a guide"),
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

pub fn guide(name: &str) -> Guide {
    guides()
        .into_iter()
        .find(|g| g.name == name)
        .unwrap_or_else(|| panic!("docs/guides/{name}.md is missing"))
}

/// A fenced block: its info words after the language, its text, and the
/// line its fence opens on.
#[derive(Debug, Clone)]
pub struct Block {
    pub words: Vec<String>,
    pub text: String,
    pub line: usize,
}

impl Block {
    /// The value of `key=VALUE` among the info words.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.words
            .iter()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
    }

    pub fn has(&self, word: &str) -> bool {
        self.words.iter().any(|w| w == word)
    }
}

/// The ``` blocks of `text`, in order.
pub fn blocks(text: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut open: Option<Block> = None;
    for (index, line) in text.lines().enumerate() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => {
                open = Some(Block {
                    words: info.split_whitespace().skip(1).map(str::to_owned).collect(),
                    text: String::new(),
                    line: index + 1,
                });
            }
            (Some(_), Some("")) => found.extend(open.take()),
            (Some(block), _) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "a block is never closed");
    found
}

/// Each `run=` block of `guide`, with the `output` block that follows it.
pub fn runs(guide: &Guide) -> Vec<(Block, String)> {
    let all = blocks(&guide.text);
    let mut found = Vec::new();
    for (at, block) in all.iter().enumerate() {
        if block.attr("run").is_none() {
            continue;
        }
        let output = all
            .get(at + 1)
            .filter(|next| next.has("output"))
            .unwrap_or_else(|| {
                panic!(
                    "docs/guides/{}.md:{}: a run block is followed by its output block",
                    guide.name, block.line
                )
            });
        found.push((block.clone(), output.text.clone()));
    }
    found
}
