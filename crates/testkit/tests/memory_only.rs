//! A memory-only limiter (`tollgate-limiter` without its default `redis`
//! feature) compiles no Redis client and no TLS: its normal dependency tree
//! names neither, nor OpenSSL.

use std::path::Path;
use std::process::Command;

#[test]
fn a_memory_only_limiter_depends_on_no_redis_tls_or_openssl_crate() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = Command::new(cargo)
        .current_dir(&workspace)
        .args([
            "tree",
            "-p",
            "tollgate-limiter",
            "--no-default-features",
            "-e",
            "normal",
            "--locked",
        ])
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "cargo tree failed: {stderr}");
    let tree = String::from_utf8_lossy(&output.stdout);
    assert!(
        tree.lines().any(|l| l.contains("tollgate-store")),
        "the tree names the store it is built on:\n{tree}"
    );
    let named: Vec<&str> = tree
        .lines()
        .filter(|line| {
            ["redis", "native-tls", "openssl"]
                .iter()
                .any(|name| line.contains(name))
        })
        .collect();
    assert_eq!(named, Vec::<&str>::new(), "the whole tree:\n{tree}");
}
