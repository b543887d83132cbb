//! Where a node of the config document is: a [`NodePath`] (keys and list
//! indexes, as the validation code knows them) resolved to a line and
//! column of the text. The text is read again with the YAML parser
//! serde-saphyr itself uses, so positions are the parser's own, never a
//! guess from scanning lines.
//!
//! A path points at the *key* of the field it ends on (`max_headers:`), or
//! at the item it ends on in a list (`- name: …` points at `name`, a flow
//! item at its `{`). A path through an alias (`*base`) stops at the alias:
//! the fault is in what this place uses, and the anchored definition may
//! serve other places too. A key that is not written (merged in with
//! `<<`) points at the `<<` key; any other missing step stops at the last
//! node found.

use serde_saphyr::granit_parser::{Event, Marker, Parser};

/// A place in the text: 1-based line and column (in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The line, from 1.
    pub line: usize,
    /// The column in characters, from 1.
    pub column: usize,
}

impl Position {
    fn of(marker: &Marker) -> Self {
        Self {
            line: marker.line(),
            column: marker.col() + 1,
        }
    }
}

/// One step into the document: a mapping's key or a list's index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The value under this key of a mapping.
    Key(String),
    /// The item at this index (from 0) of a list.
    Index(usize),
}

impl From<&str> for Step {
    fn from(key: &str) -> Self {
        Step::Key(key.to_owned())
    }
}

impl From<&String> for Step {
    fn from(key: &String) -> Self {
        Step::Key(key.clone())
    }
}

impl From<String> for Step {
    fn from(key: String) -> Self {
        Step::Key(key)
    }
}

impl From<usize> for Step {
    fn from(index: usize) -> Self {
        Step::Index(index)
    }
}

/// A node's place in the document, independent of how it is written:
/// `["policies", 3, "refill", "per"]`. Build one with [`node_path!`](crate::node_path).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodePath(pub Vec<Step>);

impl NodePath {
    /// This path with `step` after it.
    #[must_use]
    pub fn then(mut self, step: impl Into<Step>) -> Self {
        self.0.push(step.into());
        self
    }

    /// This path with a field as written in a message after it: `refill.per`
    /// or `identity[2].api_key` (dots between keys, `[n]` for an index).
    #[must_use]
    pub fn then_field(mut self, field: &str) -> Self {
        for part in field.split('.') {
            let (key, mut indexes) = match part.find('[') {
                Some(at) => (&part[..at], &part[at..]),
                None => (part, ""),
            };
            if !key.is_empty() {
                self.0.push(Step::Key(key.to_owned()));
            }
            while let Some(rest) = indexes.strip_prefix('[') {
                let Some((n, after)) = rest.split_once(']') else {
                    break;
                };
                let Ok(n) = n.parse() else { break };
                self.0.push(Step::Index(n));
                indexes = after;
            }
        }
        self
    }
}

/// A [`NodePath`] from keys and indexes: `node_path!["policies", i, "name"]`.
#[macro_export]
macro_rules! node_path {
    ($($step:expr),* $(,)?) => {
        $crate::NodePath(vec![$($crate::Step::from($step)),*])
    };
}

/// A node of the document and where it starts.
#[derive(Debug)]
struct Node {
    at: Position,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Scalar(String),
    List(Vec<Node>),
    /// Entries as written: the key's text and where it starts, the value.
    Map(Vec<(String, Position, Node)>),
    Alias,
}

/// A value written in the text whose characters a snippet must not show
/// (a password, a URL holding credentials): from `start` up to `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Secret {
    /// Where the value starts: line from 1, column from 0.
    pub start: (usize, usize),
    /// Where it ends (exclusive), as `start`.
    pub end: (usize, usize),
}

/// The document read for positions: built once per error, at the edge
/// where the text is known.
#[derive(Debug)]
pub struct Locator {
    root: Option<Node>,
    secrets: Vec<Secret>,
}

/// A collection being read, with the key its value will go under.
enum Open {
    List(Position, Vec<Node>),
    Map(
        Position,
        Vec<(String, Position, Node)>,
        Option<(String, Position)>,
    ),
}

impl Locator {
    /// Reads `text`'s first document; text the parser refuses gives a
    /// locator that finds nothing (such text never reaches validation).
    pub fn new(text: &str) -> Self {
        let mut stack: Vec<Open> = Vec::new();
        let mut secrets = Vec::new();
        let mut root = None;
        for event in Parser::new_from_str(text) {
            let Ok((event, span)) = event else {
                return Self {
                    root: None,
                    secrets,
                };
            };
            let at = Position::of(&span.start);
            let node = match event {
                Event::MappingStart(..) => {
                    stack.push(Open::Map(at, Vec::new(), None));
                    continue;
                }
                Event::SequenceStart(..) => {
                    stack.push(Open::List(at, Vec::new()));
                    continue;
                }
                Event::MappingEnd | Event::SequenceEnd => match stack.pop() {
                    Some(Open::Map(at, entries, _)) => Node {
                        at,
                        kind: Kind::Map(entries),
                    },
                    Some(Open::List(at, items)) => Node {
                        at,
                        kind: Kind::List(items),
                    },
                    None => continue,
                },
                Event::Scalar(value, ..) => {
                    let under = match stack.last() {
                        Some(Open::Map(_, _, Some((key, _)))) => Some(key.as_str()),
                        _ => None,
                    };
                    if is_secret(under, &value) {
                        secrets.push(Secret {
                            start: (span.start.line(), span.start.col()),
                            end: (span.end.line(), span.end.col()),
                        });
                    }
                    Node {
                        at,
                        kind: Kind::Scalar(value.into_owned()),
                    }
                }
                Event::Alias(_) => Node {
                    at,
                    kind: Kind::Alias,
                },
                Event::DocumentEnd if root.is_some() => break,
                _ => continue,
            };
            match stack.last_mut() {
                Some(Open::List(_, items)) => items.push(node),
                Some(Open::Map(_, entries, pending)) => match pending.take() {
                    Some((key, key_at)) => entries.push((key, key_at, node)),
                    None => {
                        // A key: scalar keys by their text; others match nothing.
                        let text = match node.kind {
                            Kind::Scalar(text) => text,
                            _ => String::new(),
                        };
                        *pending = Some((text, node.at));
                    }
                },
                None => root = Some(node),
            }
        }
        Self { root, secrets }
    }

    /// Where the node at `path` is written, as the module says; `None` for
    /// the document itself or a path whose first step is not there.
    pub fn find(&self, path: &NodePath) -> Option<Position> {
        let mut node = self.root.as_ref()?;
        let mut found = None;
        for step in &path.0 {
            let next = match (&node.kind, step) {
                (Kind::Map(entries), Step::Key(key)) => {
                    match entries.iter().find(|(k, _, _)| k == key) {
                        Some((_, key_at, value)) => Some((*key_at, value)),
                        None => {
                            let merge = entries.iter().find(|(k, _, _)| k == "<<");
                            return merge.map(|(_, at, _)| *at).or(found);
                        }
                    }
                }
                (Kind::List(items), Step::Index(i)) => items.get(*i).map(|item| (item.at, item)),
                _ => None,
            };
            let Some((at, value)) = next else { break };
            found = Some(at);
            node = value;
            if matches!(node.kind, Kind::Alias) {
                return Some(node.at);
            }
        }
        found
    }

    /// The index in `policies` of the policy named `name` (the first, if
    /// two share it).
    pub fn policy_index(&self, name: &str) -> Option<usize> {
        let Some(Node {
            kind: Kind::Map(top),
            ..
        }) = &self.root
        else {
            return None;
        };
        let (_, _, list) = top.iter().find(|(k, _, _)| k == "policies")?;
        let Kind::List(items) = &list.kind else {
            return None;
        };
        items.iter().position(|item| match &item.kind {
            Kind::Map(fields) => fields
                .iter()
                .any(|(k, _, v)| k == "name" && matches!(&v.kind, Kind::Scalar(s) if s == name)),
            _ => false,
        })
    }

    /// The values a snippet of this text must not show.
    pub fn secrets(&self) -> &[Secret] {
        &self.secrets
    }
}

/// Whether a scalar under `key` holds a credential: a password, or a URL
/// with a user part or a password in its query (as the store redacts them).
fn is_secret(key: Option<&str>, value: &str) -> bool {
    key == Some("password")
        || value.split_once("://").is_some_and(|(_, rest)| {
            rest.contains('@') || rest.contains("pass=") || rest.contains("password=")
        })
}

#[cfg(test)]
mod tests;
