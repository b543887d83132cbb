//! Guards on the repository's shape, run by `cargo test`: no source, test,
//! bench or example file over 700 lines, no function there over 120, and in
//! every crate's `src` no module cycle at any level (children of one module
//! taking from each other in a circle) and no file circle (files taking
//! from each other in a circle, through `crate::`/`super::` paths and
//! re-exports). Each reads the files from disk; a failure names every
//! offender and says how to fix it.
//!
//! A fourth guard keeps docs/design.md's checklist for a new algorithm
//! equal to the files whose `match`es name every algorithm
//! (algorithm_matches.rs).
//!
//! Tests are held to both limits like `src`: a long scenario reads better
//! as named phases than as one body.
//!
//! What was already too long, or already a cycle, when a guard came in is
//! listed (files below, functions in `long_functions.txt` and cycles in
//! `known_cycles.txt` beside this file) and tolerated until fixed. Each list only shrinks: an
//! entry that no longer applies fails its guard until it is deleted, so
//! nothing fixed can come back unnoticed.

mod algorithm_matches;
mod functions;
mod imports;
mod lexer;
mod modules;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use imports::ModPath;
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

/// Module cycles and file circles being removed, in a file beside this
/// one: one a line, written as the guard prints them.
const KNOWN_CYCLES: &str = "known_cycles.txt";

#[test]
fn no_source_or_test_file_is_over_700_lines() {
    let root = workspace_root();
    let mut failures = Vec::new();
    let mut seen = BTreeSet::new();
    for file in checked_files(&root) {
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
    for file in checked_files(&root) {
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
fn no_crate_has_a_module_cycle_or_a_file_circle() {
    let root = workspace_root();
    let list_path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/layout")
        .join(KNOWN_CYCLES);
    let list_name = relative(&root, &list_path);
    let known: BTreeSet<String> = read(&root, &list_name)
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let mut guard = CycleGuard {
        known: &known,
        found: BTreeSet::new(),
        failures: Vec::new(),
    };
    for src in crate_sources(&root) {
        let (files, krate) = load_crate(&root, &src);
        let (levels, circles) = import_graphs(&files, &krate);
        for (level, graph) in &levels {
            let at = if level.is_empty() {
                src.clone()
            } else {
                format!("{src}/{}", level.join("/"))
            };
            guard.check(graph, &format!("module cycle in {at}:"));
        }
        guard.check(&circles, &format!("file circle in {src}:"));
    }
    let mut failures = guard.failures;
    for gone in known.iter().filter(|known| !guard.found.contains(*known)) {
        failures.push(format!(
            "{gone} is gone: delete its line from {list_name} (this list only shrinks)"
        ));
    }
    report(&failures);
}

#[test]
fn the_checklist_for_a_new_algorithm_lists_every_match_on_one() {
    let root = workspace_root();
    let policy = "crates/core/src/policy.rs";
    let policy_tokens = tokens(&root, policy);
    let enums: Vec<(&'static str, Vec<String>)> = algorithm_matches::ENUMS
        .into_iter()
        .map(|name| (name, algorithm_matches::variants(&policy_tokens, name)))
        .collect();
    for (name, variants) in &enums {
        assert!(!variants.is_empty(), "{policy}: no `enum {name}` found");
    }
    let design = "docs/design.md";
    let listed = algorithm_matches::checklist(&read(&root, design))
        .unwrap_or_else(|e| panic!("{design}, where a change goes: {e}"));
    let mut found = BTreeMap::new();
    for file in checked_files(&root) {
        if let Some(site) = algorithm_matches::sites(&tokens(&root, &file), &enums).first() {
            found.insert(file, site.clone());
        }
    }
    let mut failures = Vec::new();
    for (file, site) in found.iter().filter(|(file, _)| !listed.contains(*file)) {
        failures.push(format!(
            "{file}:{} matches on every `{}` variant, but {design}'s checklist for a new \
             algorithm (\"An algorithm\" under \"Where a change goes\") does not list it: \
             add a sub-item `` - `{file}`: what the algorithm decides there ``, or, if it \
             asks what another place asks too, make that a method on `Limits` in {policy} \
             and call it",
            site.line, site.names
        ));
    }
    for file in listed.iter().filter(|file| !found.contains_key(*file)) {
        failures.push(format!(
            "{design}'s checklist for a new algorithm lists {file}, but no `match` there \
             names every `Limits` or `Algorithm` variant: delete its sub-item (say in the \
             item's prose if the algorithm still touches it another way)"
        ));
    }
    report(&failures);
}

/// The cycles found so far, and what fails.
struct CycleGuard<'a> {
    known: &'a BTreeSet<String>,
    found: BTreeSet<String>,
    failures: Vec<String>,
}

impl CycleGuard<'_> {
    /// Fails each cycle of `graph` not known, each written after `label`.
    fn check(&mut self, graph: &Graph, label: &str) {
        for tangle in modules::tangles(graph) {
            let cycles = modules::cycles(graph, &tangle);
            if cycles.len() >= modules::MAX_CYCLES {
                self.failures.push(format!(
                    "{label} {} all reach each other, through {} cycles or more: \
                     make the dependencies go one way",
                    tangle.join(", "),
                    modules::MAX_CYCLES
                ));
            }
            for cycle in cycles {
                let text = format!("{label} {}", modules::cycle_text(&cycle));
                self.found.insert(text.clone());
                if !self.known.contains(&text) {
                    self.failures.push(format!(
                        "{text}: make the dependency go one way (move what both need \
                         down into a module both use, or pass it in); the edges:\n{}",
                        edges_text(graph, &cycle)
                    ));
                }
            }
        }
    }
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

/// Every `crates/*/src` with a `lib.rs` or `main.rs`, sorted.
fn crate_sources(root: &Path) -> Vec<String> {
    let mut sources: Vec<String> = read_dir(&root.join("crates"))
        .into_iter()
        .map(|krate| krate.join("src"))
        .filter(|src| src.join("lib.rs").is_file() || src.join("main.rs").is_file())
        .map(|src| relative(root, &src))
        .collect();
    sources.sort();
    sources
}

/// The crate whose sources are `src`, by module, with each module's file.
/// With a `lib.rs` the library is the crate: `main.rs` and `bin/` are
/// crates of their own that reach the library by its name.
fn load_crate(root: &Path, src: &str) -> (BTreeMap<ModPath, String>, imports::Crate) {
    let has_lib = root.join(src).join("lib.rs").is_file();
    let files: BTreeMap<ModPath, String> = source_files(root)
        .into_iter()
        .filter_map(|file| {
            let inside = file.strip_prefix(&format!("{src}/"))?.to_owned();
            let binary = inside == "main.rs" || inside.starts_with("bin/");
            (!(has_lib && binary)).then(|| (imports::module_of(&inside), file))
        })
        .collect();
    let mut krate = imports::Crate {
        files: BTreeMap::new(),
    };
    for (module, file) in &files {
        let children: BTreeSet<String> = files
            .keys()
            .filter(|m| m.len() == module.len() + 1 && m.starts_with(module))
            .filter_map(|m| m.last().cloned())
            .collect();
        let scanned = imports::scan(&tokens(root, file), module, &children);
        krate.files.insert(module.clone(), scanned);
    }
    (files, krate)
}

/// The crate's import graphs: at each module with children, which child
/// takes from which (through any file inside it); and which file takes from
/// which. A module and the modules inside it are one: a child taking from
/// its parent (`super::X`) or a parent from its child is no edge.
fn import_graphs(
    files: &BTreeMap<ModPath, String>,
    krate: &imports::Crate,
) -> (BTreeMap<ModPath, Graph>, Graph) {
    let mut levels: BTreeMap<ModPath, Graph> = BTreeMap::new();
    let mut circles = Graph::new();
    for (from, scanned) in &krate.files {
        for import in &scanned.imports {
            let to = krate.resolve(&import.path);
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue;
            }
            let seen = Seen {
                file: files[from].clone(),
                line: import.line,
            };
            levels
                .entry(from[..common].to_vec())
                .or_default()
                .entry(from[common].clone())
                .or_default()
                .entry(to[common].clone())
                .or_insert_with(|| seen.clone());
            let short = |m: &ModPath| {
                files[m]
                    .rsplit_once("/src/")
                    .map_or("", |(_, f)| f)
                    .to_owned()
            };
            circles
                .entry(short(from))
                .or_default()
                .entry(short(&to))
                .or_insert(seen);
        }
    }
    (levels, circles)
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

/// Every file the size rules hold: each crate's sources, tests (and their
/// support code), benches and examples.
fn checked_files(root: &Path) -> Vec<String> {
    ["src", "tests", "benches", "examples"]
        .into_iter()
        .flat_map(|folder| crate_files(root, folder))
        .collect()
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
