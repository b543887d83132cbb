use super::*;
use crate::lexer::tokenize;

const POLICY: &str = "
/// Docs.
#[derive(Debug)]
pub enum Limits {
    /// A bucket.
    TokenBucket(Rate),
    #[doc = \"x\"]
    Gcra(Rate),
    FixedWindow(Window),
}
";

fn enums() -> Vec<(&'static str, Vec<String>)> {
    let tokens = tokenize(POLICY).expect("tokenizes");
    vec![("Limits", variants(&tokens, "Limits"))]
}

/// The lines of the matches of `source` that name every variant.
fn lines(source: &str) -> Vec<usize> {
    let tokens = tokenize(source).expect("tokenizes");
    sites(&tokens, &enums())
        .into_iter()
        .map(|s| s.line)
        .collect()
}

#[test]
fn an_enums_variants_are_read_past_docs_attributes_and_fields() {
    assert_eq!(enums()[0].1, ["TokenBucket", "Gcra", "FixedWindow"]);
}

#[test]
fn a_match_naming_every_variant_counts_however_its_arms_are_written() {
    let source = "
fn a(l: &Limits) -> u64 {
    match l {
        Limits::TokenBucket(r) | tollgate_core::Limits::Gcra(r) => {
            r.capacity()
        }
        Limits::FixedWindow(w) if w.limit() > 1 => if x { 1 } else { 2 }
        Limits::FixedWindow(w) => w.limit(),
    }
}
fn b(l: &Limits) -> u64 {
    match (l, s) {
        (Limits::TokenBucket(_), State::A) => 1,
        (Limits::Gcra(_), _) | (Limits::FixedWindow(_), _) => 2,
        _ => 3,
    }
}
";
    assert_eq!(lines(source), [3, 12]);
}

#[test]
fn a_match_missing_a_variant_or_naming_it_outside_a_pattern_does_not_count() {
    let source = "
fn a(l: &Limits) -> Limits {
    match l {
        Limits::TokenBucket(r) => Limits::Gcra(*r),
        _ => Limits::FixedWindow(w),
    }
}
fn b(l: &Limits) -> bool {
    // match l { Limits::TokenBucket(_) | Limits::Gcra(_) | Limits::FixedWindow(_) => 1 }
    let s = \"match l { Limits::TokenBucket(_) | Limits::Gcra(_) | Limits::FixedWindow(_) => 1 }\";
    matches!(l, Limits::TokenBucket(_) | Limits::Gcra(_) | Limits::FixedWindow(_))
}
";
    assert_eq!(lines(source), Vec::<usize>::new());
}

#[test]
fn a_match_inside_an_arm_is_a_match_of_its_own() {
    let source = "
fn a(l: &Limits, on: bool) -> u64 {
    match on {
        true => match l {
            Limits::TokenBucket(_) | Limits::Gcra(_) => 1,
            Limits::FixedWindow(_) => 2,
        },
        false => 0,
    }
}
";
    assert_eq!(lines(source), [4]);
}

#[test]
fn the_checklist_is_the_sub_items_that_open_with_a_path() {
    let design = "
### Where a change goes
- **An algorithm**: these, a test keeps the list:
  - `crates/core/src/policy.rs`: its variant;
  - `crates/http/src/ratelimit_fields.rs`: its q and w.

  And with no match: crates/store/lua/<name>.lua.
- **A store**: `crates/store/src/contract.rs`
  - `crates/store/src/memory.rs`: not the algorithm's.
";
    let listed = checklist(design).expect("a checklist");
    assert_eq!(
        listed.into_iter().collect::<Vec<_>>(),
        [
            "crates/core/src/policy.rs",
            "crates/http/src/ratelimit_fields.rs"
        ]
    );
    assert!(checklist("- **A store**: x").is_err());
}
