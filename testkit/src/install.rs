//! Which httpd the tests run: its binary and the directory of its own modules, Debian's
//! unless the environment names another (an upstream httpd installed into a prefix, for
//! `scripts/other-httpd.sh`):
//!
//! - `RWORKER_TEST_APACHE2`: the httpd binary (default `/usr/sbin/apache2`);
//! - `RWORKER_TEST_MODULES`: its module directory, where mod_mime.so and the stock MPMs
//!   are (default `/usr/lib/apache2/modules`).
//!
//! Debian compiles some modules into the binary (mod_unixd, which gives User and Group);
//! an upstream build with `--enable-mods-shared=most` has them as modules.
//! [`load_module_lines`] writes a `LoadModule` line for each module the binary lacks.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// Debian's httpd binary, the default.
pub const DEBIAN_APACHE2: &str = "/usr/sbin/apache2";
/// Debian's module directory, the default.
pub const DEBIAN_MODULES: &str = "/usr/lib/apache2/modules";

/// The httpd binary: `RWORKER_TEST_APACHE2`, else Debian's.
pub fn apache2() -> PathBuf {
    env_path("RWORKER_TEST_APACHE2", DEBIAN_APACHE2)
}

/// httpd's module directory: `RWORKER_TEST_MODULES`, else Debian's.
pub fn stock_modules() -> PathBuf {
    env_path("RWORKER_TEST_MODULES", DEBIAN_MODULES)
}

/// The path of stock module `mod_<name>.so` (as `mpm_event`).
pub fn stock_module(name: &str) -> PathBuf {
    stock_modules().join(format!("mod_{name}.so"))
}

fn env_path(var: &str, default: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(default),
    }
}

/// The modules compiled into the httpd binary (`httpd -l`: `mod_unixd.c` gives `unixd`;
/// `core.c`, `http_core.c` and the built-in MPM too). Asked once per process; empty if
/// the binary cannot be run (its start then fails with its own error).
pub fn compiled_in() -> &'static BTreeSet<String> {
    static LIST: OnceLock<BTreeSet<String>> = OnceLock::new();
    LIST.get_or_init(|| {
        Command::new(apache2())
            .arg("-l")
            .output()
            .map(|o| parse_compiled_in(&String::from_utf8_lossy(&o.stdout)))
            .unwrap_or_default()
    })
}

/// The module names in `httpd -l`'s output.
pub fn parse_compiled_in(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_suffix(".c"))
        .map(|m| m.strip_prefix("mod_").unwrap_or(m).to_string())
        .collect()
}

/// `LoadModule <name>_module <dir>/mod_<name>.so` for each of `names` that is not compiled
/// in, one per line (each ending with a newline).
pub fn load_module_lines(names: &[&str]) -> String {
    lines_for(names, compiled_in())
}

fn lines_for(names: &[&str], compiled_in: &BTreeSet<String>) -> String {
    names
        .iter()
        .filter(|m| !compiled_in.contains(**m))
        .map(|m| format!("LoadModule {m}_module {}\n", stock_module(m).display()))
        .collect()
}

/// The modules every private server of the tests needs beside its MPM: User and Group
/// (`unixd`), `Require` (`authz_core`), TypesConfig (`mime`), server-status (`status`) and
/// DirectoryIndex (`dir`).
pub const BASE_MODULES: &[&str] = &["unixd", "authz_core", "mime", "status", "dir"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiled_in_names_from_debian_and_upstream() {
        let debian = "Compiled in modules:\n  core.c\n  mod_so.c\n  mod_watchdog.c\n  \
                      http_core.c\n  mod_log_config.c\n  mod_logio.c\n  mod_version.c\n  \
                      mod_unixd.c\n";
        let d = parse_compiled_in(debian);
        assert!(d.contains("unixd") && d.contains("so") && d.contains("core"));
        assert!(!d.contains("mime"));
        let upstream = "Compiled in modules:\n  core.c\n  mod_so.c\n  http_core.c\n";
        assert!(!parse_compiled_in(upstream).contains("unixd"));
    }

    #[test]
    fn lines_only_for_what_is_missing() {
        let d = parse_compiled_in("  core.c\n  mod_unixd.c\n");
        let text = lines_for(&["unixd", "mime"], &d);
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.starts_with("LoadModule mime_module "), "{text}");
        assert!(text.trim_end().ends_with("/mod_mime.so"), "{text}");
    }
}
