//! A client of `/v1/check` alone (`tollgate-http` as it comes, without
//! `request`) compiles the HTTP contract and nothing of a door: no config
//! crate, no store, no Redis client, no TLS.

use std::path::Path;
use std::process::Command;

#[test]
fn the_default_build_depends_on_no_config_store_redis_or_tls_crate() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = Command::new(cargo)
        .current_dir(&workspace)
        .args(["tree", "-p", "tollgate-http", "-e", "normal", "--locked"])
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "cargo tree failed: {stderr}");
    let tree = String::from_utf8_lossy(&output.stdout);
    assert!(
        tree.lines().any(|l| l.contains("tollgate-core")),
        "the tree names the core it is built on:\n{tree}"
    );
    let named: Vec<&str> = tree
        .lines()
        .filter(|line| {
            [
                "tollgate-config",
                "tollgate-store",
                "tollgate-limiter",
                "redis",
                "native-tls",
                "openssl",
            ]
            .iter()
            .any(|name| line.contains(name))
        })
        .collect();
    assert_eq!(named, Vec::<&str>::new(), "the whole tree:\n{tree}");
}
