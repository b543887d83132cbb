//! Every getting-started guide under docs/guides/ is run as written: each
//! file a guide quotes (a fence `file=PATH`) is that file of the
//! repository, byte for byte, and each shell block it runs (`run=STACK`)
//! prints what the guide's next block (`output`) says, against the real
//! programs serving those files on free ports (stacks.rs). A guide the
//! suite does not know how to run fails it.

#[path = "../support/proxy_stack.rs"]
mod proxy_stack;
#[path = "../support/mod.rs"]
mod support;

mod blocks;
mod envoy;
mod stacks;

use blocks::{blocks, guide, guides, root, runs};
use stacks::Stack;

/// Each guide, and where its files are run: here (`run=` blocks), or by
/// the test named.
const GUIDES: [(&str, &str); 6] = [
    ("caddy", "run blocks"),
    ("embedding", "crates/tower/tests/quickstart.rs"),
    ("envoy", "run blocks"),
    ("nginx", "run blocks"),
    ("redis", "run blocks"),
    ("regions", "run blocks"),
];

#[test]
fn every_guide_is_run_and_quotes_its_files_as_they_are() {
    let names: Vec<String> = guides().into_iter().map(|g| g.name).collect();
    let known: Vec<&str> = GUIDES.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, known, "a guide the suite does not know how to run");
    let mut failures = Vec::new();
    for (name, runner) in GUIDES {
        let guide = guide(name);
        let quoted: Vec<_> = blocks(&guide.text)
            .into_iter()
            .filter_map(|b| Some((b.attr("file")?.to_owned(), b)))
            .collect();
        if quoted.is_empty() {
            failures.push(format!("{name}: quotes no file"));
        }
        for (path, block) in &quoted {
            match std::fs::read_to_string(root().join(path)) {
                Ok(text) if text == block.text => {}
                Ok(_) => failures.push(format!(
                    "docs/guides/{name}.md:{}: differs from {path}",
                    block.line
                )),
                Err(e) => failures.push(format!("{name}: {path}: {e}")),
            }
        }
        if runner == "run blocks" {
            if runs(&guide).is_empty() {
                failures.push(format!("{name}: runs nothing"));
            }
        } else {
            let test = std::fs::read_to_string(root().join(runner)).expect("the runner");
            for (path, _) in &quoted {
                let file = path.rsplit('/').next().expect("a name");
                if !test.contains(file) {
                    failures.push(format!("{name}: {runner} does not run {path}"));
                }
            }
        }
    }
    assert_eq!(failures, Vec::<String>::new());
}

/// The README's quick start: its run command serves a config that exists,
/// each `curl` of its next block prints what the `#` line after it says,
/// and its test command is the one .ci/run calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_quick_start_runs_as_written() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("the README");
    let blocks = blocks(&readme);
    let serve = "cargo run --release -p tollgate -- serve --config ";
    let at = blocks
        .iter()
        .position(|b| b.text.starts_with(serve))
        .expect("the README's run command");
    let config = blocks[at].text[serve.len()..].trim().to_owned();
    assert!(
        !config.contains(' '),
        "the run command adds nothing: {config}"
    );
    let (mut script, mut expected) = (String::new(), String::new());
    for line in blocks[at + 1].text.lines() {
        match line.strip_prefix("# ") {
            Some(output) => expected.push_str(&format!("{output}\n")),
            None => script.push_str(&format!("{line}; echo\n")),
        }
    }
    let stack = Stack::serving(&config);
    let printed = tokio::task::spawn_blocking(move || stack.run(&script))
        .await
        .expect("the block ran");
    assert_eq!(printed, expected);

    let ci = std::fs::read_to_string(root().join(".ci/run")).expect(".ci/run");
    assert!(ci.lines().any(|line| line == "bash scripts/test"), "{ci}");
    assert!(blocks.iter().any(|b| b.text == "bash scripts/test\n"));
}

/// Every file under examples/walkthrough/ is quoted by a guide, so none
/// is there that no reader sees.
#[test]
fn every_walkthrough_file_is_in_a_guide() {
    let quoted: Vec<String> = guides()
        .iter()
        .flat_map(|g| blocks(&g.text))
        .filter_map(|b| b.attr("file").map(str::to_owned))
        .collect();
    let mut pending = vec![root().join("examples/walkthrough")];
    let mut missing = Vec::new();
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read a directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let relative = path
                .strip_prefix(root())
                .expect("below the root")
                .display()
                .to_string();
            if !quoted.contains(&relative) {
                missing.push(relative);
            }
        }
    }
    missing.sort();
    assert_eq!(missing, Vec::<String>::new());
}

/// Each run block of guide `name` against a fresh stack: its output as
/// the guide says. A block with `stop=tollgate` runs with tollgate stopped.
async fn run_guide(name: &str) {
    let guide = guide(name);
    for (block, expected) in runs(&guide) {
        let stack_name = block.attr("run").expect("a run block");
        let mut stack = Stack::named(stack_name, &guide).await;
        if block.attr("stop") == Some("tollgate") {
            stack.stop_tollgate();
        }
        let script = block.text.clone();
        let (stack, printed) = tokio::task::spawn_blocking(move || {
            let printed = stack.run(&script);
            (stack, printed)
        })
        .await
        .expect("the block ran");
        drop(stack);
        assert_eq!(
            printed, expected,
            "docs/guides/{name}.md:{}: the block printed otherwise",
            block.line
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nginx_guide_runs_as_written() {
    run_guide("nginx").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caddy_guide_runs_as_written() {
    run_guide("caddy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_envoy_guide_runs_as_written() {
    run_guide("envoy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_guide_runs_as_written() {
    run_guide("redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_regions_guide_runs_as_written() {
    run_guide("regions").await;
}
