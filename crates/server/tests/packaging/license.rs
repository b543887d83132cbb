//! LICENSE is the text of the license Cargo.toml names.

use crate::files::read;

#[test]
fn the_license_file_is_the_one_cargo_toml_names() {
    let manifest = read("Cargo.toml");
    assert!(
        manifest.contains("license = \"Apache-2.0\""),
        "the workspace license changed: ship its text as LICENSE"
    );
    let license = read("LICENSE");
    assert!(license.contains("Apache License") && license.contains("Version 2.0, January 2004"));
    assert!(
        license.contains("END OF TERMS AND CONDITIONS"),
        "the whole text"
    );
}
