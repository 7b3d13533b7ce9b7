//! Where the rworker module under test was built.

use std::path::{Path, PathBuf};

/// The module's file name as cargo writes it (`mod_mpm_rworker` is a cdylib).
pub const FILE_NAME: &str = "libmod_mpm_rworker.so";

/// `RWORKER_SO` if set (it must exist), else the release build, else the debug build, under
/// `CARGO_TARGET_DIR` and the workspace's `target/`. An error that says how to build it when
/// none exists.
pub fn find_rworker_so() -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var("RWORKER_SO") {
        let p = PathBuf::from(p);
        if !p.is_file() {
            return Err(format!("RWORKER_SO={} does not exist", p.display()));
        }
        return Ok(p);
    }
    let mut target_dirs = Vec::new();
    if let Ok(t) = std::env::var("CARGO_TARGET_DIR") {
        target_dirs.push(PathBuf::from(t));
    }
    // This crate sits in the workspace root's `testkit/`.
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    target_dirs.push(here.parent().unwrap_or(here).join("target"));
    let mut tried = Vec::new();
    for dir in &target_dirs {
        for profile in ["release", "debug"] {
            let p = dir.join(profile).join(FILE_NAME);
            if p.is_file() {
                return Ok(p);
            }
            tried.push(p.display().to_string());
        }
    }
    Err(format!(
        "mod_mpm_rworker.so not found (tried {}); build it first: cargo build --release \
         (or set RWORKER_SO)",
        tried.join(", ")
    ))
}
