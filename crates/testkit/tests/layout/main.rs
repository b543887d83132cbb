//! Guards on the repository's shape, run by `cargo test`: no source or
//! test file over 700 lines, no source or test function over 120, no cycle
//! between the server's top-level modules. Each reads the files from disk;
//! a failure names every offender and says how to fix it.
//!
//! Tests are held to both limits like `src`: a long scenario reads better
//! as named phases than as one body.
//!
//! What was already too long, or already a cycle, when a guard came in is
//! listed (files and cycles below, functions in `long_functions.txt`
//! beside this file) and tolerated until fixed. Each list only shrinks: an
//! entry that no longer applies fails its guard until it is deleted, so
//! nothing fixed can come back unnoticed.

mod functions;
mod lexer;
mod modules;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use modules::{Graph, Seen};

const MAX_FILE_LINES: usize = 700;
const MAX_FUNCTION_LINES: usize = 120;

/// Source or test files over [`MAX_FILE_LINES`] when the guard came in,
/// with their length then; each is being split by concern. A listed file
/// may shrink but not grow; once within the limit (or gone) its entry must
/// go. This list must end empty.
const LONG_FILES: &[(&str, usize)] = &[];

/// Functions over [`MAX_FUNCTION_LINES`] when the guard came in, in a file
/// beside this one: one `path::name  lines` a line.
const LONG_FUNCTIONS: &str = "long_functions.txt";

/// Cycles between the server's top-level modules that are being removed,
/// written as the guard prints them. Any other cycle fails; so does an entry
/// here once its cycle is gone: delete it. This list must end empty.
const KNOWN_CYCLES: &[&str] = &[];

#[test]
fn no_source_or_test_file_is_over_700_lines() {
    let root = workspace_root();
    let mut failures = Vec::new();
    let mut seen = BTreeSet::new();
    for file in source_files(&root).into_iter().chain(test_files(&root)) {
        let lines = read(&root, &file).lines().count();
        let tolerated = LONG_FILES.iter().find(|(path, _)| *path == file);
        if let Some((_, listed)) = tolerated {
            seen.insert(file.clone());
            if lines > *listed {
                failures.push(format!(
                    "{file} is {lines} lines, more than the {listed} LONG_FILES tolerates: \
                     split it by concern into files of at most {MAX_FILE_LINES} lines, \
                     or at least bring it back to {listed}"
                ));
            } else if lines <= MAX_FILE_LINES {
                failures.push(format!(
                    "{file} is {lines} lines, within {MAX_FILE_LINES}: \
                     delete its entry from LONG_FILES in {}",
                    this_file()
                ));
            }
        } else if lines > MAX_FILE_LINES {
            failures.push(format!(
                "{file} is {lines} lines, over {MAX_FILE_LINES}: \
                 split it by concern into files of at most {MAX_FILE_LINES} lines"
            ));
        }
    }
    for (path, _) in LONG_FILES.iter().filter(|(path, _)| !seen.contains(*path)) {
        failures.push(format!(
            "{path} is listed in LONG_FILES but no longer exists: delete its entry from {}",
            this_file()
        ));
    }
    report(&failures);
}

#[test]
fn no_function_is_over_120_lines() {
    let root = workspace_root();
    let list_path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/layout")
        .join(LONG_FUNCTIONS);
    let list_name = relative(&root, &list_path);
    let listed = match allow_list(&read(&root, &list_name)) {
        Ok(listed) => listed,
        Err(error) => panic!("{list_name}: {error}"),
    };
    let mut failures = Vec::new();
    let mut found = BTreeSet::new();
    for file in source_files(&root).into_iter().chain(test_files(&root)) {
        for f in functions::functions(&tokens(&root, &file)) {
            let key = format!("{file}::{}", f.name);
            match listed.get(&key) {
                Some(&allowed) => {
                    found.insert(key.clone());
                    if f.lines > allowed {
                        failures.push(format!(
                            "{file}:{} `{}` is {} lines, more than the {allowed} {list_name} \
                             allows: split it into functions of at most {MAX_FUNCTION_LINES} \
                             lines, or at least bring it back to {allowed}",
                            f.line, f.name, f.lines
                        ));
                    } else if f.lines <= MAX_FUNCTION_LINES {
                        failures.push(format!(
                            "{file}:{} `{}` is {} lines, within {MAX_FUNCTION_LINES}: \
                             delete the line `{key}` from {list_name}",
                            f.line, f.name, f.lines
                        ));
                    }
                }
                None if f.lines > MAX_FUNCTION_LINES => failures.push(format!(
                    "{file}:{} `{}` is {} lines, over {MAX_FUNCTION_LINES}: split it into \
                     functions of at most {MAX_FUNCTION_LINES} lines (or, if it is listed \
                     in {list_name} under an old path or name, update that line to `{key}`)",
                    f.line, f.name, f.lines
                )),
                None => {}
            }
        }
    }
    for key in listed.keys().filter(|key| !found.contains(*key)) {
        failures.push(format!(
            "`{key}` is listed in {list_name} but no longer exists: delete its line \
             (or, if it moved or was renamed, change the line to its new path and name)"
        ));
    }
    report(&failures);
}

#[test]
fn the_servers_top_level_modules_form_no_cycle() {
    let root = workspace_root();
    let graph = module_graph(&root, "crates/server/src");
    let mut failures = Vec::new();
    let mut found = BTreeSet::new();
    for tangle in modules::tangles(&graph) {
        let cycles = modules::cycles(&graph, &tangle);
        if cycles.len() >= modules::MAX_CYCLES {
            failures.push(format!(
                "modules {} all reach each other, through {} cycles or more: \
                 make the dependencies go one way (see the layers in crates/server/src/lib.rs)",
                tangle.join(", "),
                modules::MAX_CYCLES
            ));
        }
        for cycle in cycles {
            let text = modules::cycle_text(&cycle);
            found.insert(text.clone());
            if !KNOWN_CYCLES.contains(&text.as_str()) {
                failures.push(format!(
                    "cycle {text}: make the dependency go one way (move what both need \
                     to the lower module, or pass it in); the edges:\n{}",
                    edges_text(&graph, &cycle)
                ));
            }
        }
    }
    for known in KNOWN_CYCLES.iter().filter(|known| !found.contains(**known)) {
        failures.push(format!(
            "cycle {known} is gone: delete it from KNOWN_CYCLES in {}",
            this_file()
        ));
    }
    report(&failures);
}

/// Each edge of `cycle` and the first line that makes it.
fn edges_text(graph: &Graph, cycle: &[String]) -> String {
    let mut lines = Vec::new();
    for (i, from) in cycle.iter().enumerate() {
        let to = &cycle[(i + 1) % cycle.len()];
        let seen = &graph[from][to];
        lines.push(format!("    {from} -> {to}: {}:{}", seen.file, seen.line));
    }
    lines.join("\n")
}

/// The top-level modules of the crate whose sources are `src` (files and
/// folders directly under it, `lib.rs` and `main.rs` aside: they are the
/// roots) and which names which. A name re-exported by `lib.rs` counts as
/// its module's.
fn module_graph(root: &Path, src: &str) -> Graph {
    let mut graph = Graph::new();
    let files: Vec<String> = source_files(root)
        .into_iter()
        .filter(|f| f.starts_with(&format!("{src}/")))
        .collect();
    let module_of = |file: &str| -> Option<String> {
        let inside = &file[src.len() + 1..];
        let first = inside.split('/').next().unwrap_or(inside);
        let name = first.strip_suffix(".rs").unwrap_or(first);
        (!matches!(inside, "lib.rs" | "main.rs")).then(|| name.to_owned())
    };
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(f)).collect();
    let reexports = reexports(&tokens(root, &format!("{src}/lib.rs")), &modules);
    for file in &files {
        let Some(from) = module_of(file) else {
            continue;
        };
        let inside = &file[src.len() + 1..];
        let depth = inside.matches('/').count() + usize::from(!inside.ends_with("/mod.rs"));
        for (name, line) in modules::root_names(&tokens(root, file), depth) {
            let to = if modules.contains(&name) {
                name
            } else if let Some(module) = reexports.get(&name) {
                module.clone()
            } else {
                continue;
            };
            if to != from {
                let seen = Seen {
                    file: file.clone(),
                    line,
                };
                graph
                    .entry(from.clone())
                    .or_default()
                    .entry(to)
                    .or_insert(seen);
            }
        }
    }
    graph
}

/// What `lib.rs` re-exports from a module (`pub use error::ServeError;`):
/// each name, or its alias, and the module.
fn reexports(lib: &[lexer::Token], modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    let mut i = 0;
    while i < lib.len() {
        if lib[i].is_ident("use") && lib.get(i + 1).is_some_and(|t| modules.contains(&t.text)) {
            let module = lib[i + 1].text.clone();
            let end = (i..lib.len())
                .find(|&k| lib[k].is_punct(";"))
                .unwrap_or(lib.len());
            // The last name of each path, or its alias: what `crate::` sees.
            for k in i + 2..end {
                let next = lib.get(k + 1);
                let last = next.is_some_and(|t| [",", "}", ";"].iter().any(|p| t.is_punct(p)));
                if lib[k].kind == lexer::Kind::Ident && last && lib[k].text != "self" {
                    names.insert(lib[k].text.clone(), module.clone());
                }
            }
            i = end;
        }
        i += 1;
    }
    names
}

/// The `path::name  lines` entries of the allow-list; `#` starts a comment
/// line.
fn allow_list(text: &str) -> Result<BTreeMap<String, usize>, String> {
    let mut listed = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [key, lines] = fields[..] else {
            return Err(format!("line {}: expected `path::name  lines`", n + 1));
        };
        let Ok(lines) = lines.parse() else {
            return Err(format!("line {}: {lines:?} is not a line count", n + 1));
        };
        if listed.insert(key.to_owned(), lines).is_some() {
            return Err(format!("line {}: {key} is listed twice", n + 1));
        }
    }
    Ok(listed)
}

/// Fails with every failure, one a paragraph.
fn report(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "\n{} problem(s):\n\n{}\n",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The directory whose `Cargo.toml` declares the workspace.
fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .ancestors()
        .find(|dir| {
            fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]"))
        })
        .unwrap_or_else(|| panic!("no workspace Cargo.toml above {}", manifest_dir.display()))
        .to_owned()
}

/// Every `crates/*/src/**/*.rs`, relative to `root` with `/`, sorted.
fn source_files(root: &Path) -> Vec<String> {
    crate_files(root, "src")
}

/// Every `crates/*/tests/**/*.rs` (integration tests and their support
/// code), relative to `root` with `/`, sorted.
fn test_files(root: &Path) -> Vec<String> {
    crate_files(root, "tests")
}

/// Every `crates/*/{folder}/**/*.rs`, relative to `root` with `/`, sorted.
fn crate_files(root: &Path, folder: &str) -> Vec<String> {
    let mut files = Vec::new();
    for krate in read_dir(&root.join("crates")) {
        let dir = krate.join(folder);
        if dir.is_dir() {
            collect_rust_files(&dir, &mut files);
        }
    }
    let mut files: Vec<String> = files.iter().map(|f| relative(root, f)).collect();
    files.sort();
    files
}

fn collect_rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for path in read_dir(dir) {
        if path.is_dir() {
            collect_rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

fn read_dir(dir: &Path) -> Vec<PathBuf> {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    entries
        .map(|entry| {
            entry
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .path()
        })
        .collect()
}

fn relative(root: &Path, path: &Path) -> String {
    let inside = path.strip_prefix(root).unwrap_or(path);
    let parts: Vec<String> = inside
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}

fn read(root: &Path, file: &str) -> String {
    fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn tokens(root: &Path, file: &str) -> Vec<lexer::Token> {
    lexer::tokenize(&read(root, file)).unwrap_or_else(|e| {
        panic!(
            "{file}:{}: the layout guards' tokenizer found an unterminated {} \
             (if the file compiles, fix crates/testkit/tests/layout/lexer.rs)",
            e.line, e.what
        )
    })
}

/// This file, as failures name it.
fn this_file() -> &'static str {
    "crates/testkit/tests/layout/main.rs"
}
