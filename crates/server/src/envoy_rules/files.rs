//! The files behind the rules: `envoy_ratelimit_configs` names files and
//! directories (a directory contributes its `*.yaml` and `*.yml`), each
//! file holds one domain. Their content hash tells a reload whether they
//! changed; `stamp_into` lets the file watcher notice an edit.

use std::path::{Path, PathBuf};

use tollgate_core::PolicySet;

use super::{EnvoyRules, RulesError};

/// The most descriptor files one config may name (directories expanded).
pub const MAX_FILES: usize = 1_000;

impl EnvoyRules {
    /// Loads every file named (a directory contributes its `*.yaml` and
    /// `*.yml` files, sorted, dotfiles skipped). `policies` are tollgate's own,
    /// for `tollgate: {policy: NAME}`.
    pub fn load(paths: &[PathBuf], policies: &PolicySet) -> Result<Self, RulesError> {
        let files = expand(paths)?;
        let mut rules = EnvoyRules::default();
        let mut hasher = blake3::Hasher::new();
        for file in &files {
            let shown = file.display().to_string();
            let text = std::fs::read_to_string(file).map_err(|e| RulesError::File {
                file: shown.clone(),
                reason: format!("cannot read: {e}"),
            })?;
            hasher.update(shown.as_bytes());
            hasher.update(&[0]);
            hasher.update(text.as_bytes());
            hasher.update(&[0]);
            rules.load_text(&shown, &text, policies)?;
        }
        rules.files = files;
        rules.content_hash = hasher.finalize().to_hex()[..16].to_owned();
        Ok(rules)
    }
}

/// Files named by `envoy_ratelimit_configs`, directories expanded.
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, RulesError> {
    let mut files = Vec::new();
    for path in paths {
        let shown = path.display().to_string();
        let meta = std::fs::metadata(path).map_err(|e| RulesError::File {
            file: shown.clone(),
            reason: format!("cannot read: {e}"),
        })?;
        if meta.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| RulesError::File {
                    file: shown.clone(),
                    reason: format!("cannot list: {e}"),
                })?
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|p| is_config_file(p))
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(path.clone());
        }
        if files.len() > MAX_FILES {
            return Err(RulesError::File {
                file: shown,
                reason: format!("more than {MAX_FILES} config files"),
            });
        }
    }
    Ok(files)
}

fn is_config_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    !name.starts_with('.') && path.is_file() && (name.ends_with(".yaml") || name.ends_with(".yml"))
}

/// A hash of the files `paths` name now, to notice edits (a file watcher).
pub fn stamp_into(hasher: &mut blake3::Hasher, paths: &[PathBuf]) {
    let Ok(files) = expand(paths) else {
        hasher.update(b"unreadable");
        return;
    };
    for file in files {
        hasher.update(file.as_os_str().as_encoded_bytes());
        if let Ok(bytes) = std::fs::read(&file) {
            hasher.update(&bytes);
        }
    }
}
