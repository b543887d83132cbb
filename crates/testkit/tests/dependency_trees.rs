//! What a build that leaves a door out compiles, read from `cargo tree`:
//! a memory-only limiter (`tollgate-limiter` without its default `redis`
//! feature) names no Redis client, TLS or OpenSSL, and neither does a
//! memory-only tower layer (`tollgate-tower` without `redis`); a client of `/v1/check`
//! alone (`tollgate-http` as it comes, without `request`) compiles the HTTP
//! contract and nothing of a door: no config crate, store, limiter, Redis
//! client or TLS; the binary draws its pictures (`replay --plot`) as SVG
//! with no font or image library.

use std::path::Path;
use std::process::Command;

/// `cargo tree` of the normal dependencies, with `args` naming the
/// package and its features.
fn tree(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = Command::new(cargo)
        .current_dir(&workspace)
        .arg("tree")
        .args(args)
        .args(["-e", "normal", "--locked"])
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "cargo tree failed: {stderr}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The lines of `tree` that name any of `crates`.
fn naming<'t>(tree: &'t str, crates: &[&str]) -> Vec<&'t str> {
    tree.lines()
        .filter(|line| crates.iter().any(|name| line.contains(name)))
        .collect()
}

/// `package` without its default features: its tree names `built_on`
/// (the tree was read) and none of `left_out`.
fn memory_only(package: &str, built_on: &str, left_out: &[&str]) {
    let tree = tree(&["-p", package, "--no-default-features"]);
    assert!(
        tree.lines().any(|l| l.contains(built_on)),
        "the tree names {built_on}, which {package} is built on:\n{tree}"
    );
    let named = naming(&tree, left_out);
    assert_eq!(named, Vec::<&str>::new(), "the whole tree:\n{tree}");
}

#[test]
fn a_memory_only_limiter_depends_on_no_redis_tls_or_openssl_crate() {
    memory_only(
        "tollgate-limiter",
        "tollgate-store",
        &["redis", "native-tls", "openssl"],
    );
}

#[test]
fn a_memory_only_tower_layer_depends_on_no_redis_tls_or_openssl_crate() {
    memory_only(
        "tollgate-tower",
        "tollgate-limiter",
        &["redis", "native-tls", "openssl", "rustls"],
    );
}

#[test]
fn the_http_contract_alone_depends_on_no_config_store_redis_or_tls_crate() {
    let tree = tree(&["-p", "tollgate-http"]);
    assert!(
        tree.lines().any(|l| l.contains("tollgate-core")),
        "the tree names the core it is built on:\n{tree}"
    );
    let door = [
        "tollgate-config",
        "tollgate-store",
        "tollgate-limiter",
        "redis",
        "native-tls",
        "openssl",
    ];
    let named = naming(&tree, &door);
    assert_eq!(named, Vec::<&str>::new(), "the whole tree:\n{tree}");
}

#[test]
fn the_pictures_are_drawn_as_svg_without_a_font_or_image_library() {
    let tree = tree(&["-p", "tollgate"]);
    assert!(
        tree.lines().any(|l| l.contains("plotters-svg v")),
        "`replay --plot` draws with plotters' SVG backend:\n{tree}"
    );
    let named = naming(
        &tree,
        &[
            "font-kit v",
            "ttf-parser v",
            "ab_glyph v",
            "plotters-bitmap v",
            " image v",
            "freetype",
            "fontconfig",
        ],
    );
    assert_eq!(named, Vec::<&str>::new(), "the whole tree:\n{tree}");
}
