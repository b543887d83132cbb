//! Writes the example traces (traces.rs) into a directory, as
//! scripts/example-traces does for examples/traces/:
//!
//!   cargo run -p tollgate --example example_traces -- examples/traces

use std::path::PathBuf;

mod traces;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir] = args.as_slice() else {
        return Err("usage: example_traces DIR".into());
    };
    let dir = PathBuf::from(dir);
    for (name, text) in traces::all() {
        let path = dir.join(format!("{name}.jsonl"));
        std::fs::write(&path, &text)?;
        println!("{} ({} events)", path.display(), text.lines().count());
    }
    Ok(())
}
