//! Static checks of the MPM module and of httpd's view of it, without serving requests
//! (contract §6 "Static checks").

mod common;

use common::*;
use std::process::Command;

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The module symbol is the only exported data symbol: nothing of Rust's std or of the C
/// shim leaks into httpd's RTLD_GLOBAL namespace as data.
#[test]
fn module_symbol_is_the_only_exported_data_symbol() {
    if skip_unless_rworker("module_symbol_is_the_only_exported_data_symbol") {
        return;
    }
    let so = Mpm::Rworker.so_path();
    let nm = run("nm", &["-D", "--defined-only", so.to_str().unwrap()]);
    let data: Vec<&str> = nm
        .lines()
        .filter(|l| {
            let f: Vec<_> = l.split_whitespace().collect();
            f.len() == 3 && matches!(f[1], "D" | "B" | "R" | "V" | "G" | "S")
        })
        .collect();
    let names: Vec<&str> = data
        .iter()
        .map(|l| l.split_whitespace().nth(2).unwrap())
        .collect();
    assert_eq!(
        names,
        ["mpm_rworker_module"],
        "exported data symbols of {}:\n{}",
        so.display(),
        data.join("\n")
    );
}

/// `ap_set_listentcpdeferaccept` (ListenTCPDeferAccept) is a Debian patch's: the module
/// references it weakly, so a build on Debian still loads into an upstream httpd, which does
/// not export it (docs/build.md).
#[test]
fn debian_only_symbol_is_referenced_weakly() {
    if skip_unless_rworker("debian_only_symbol_is_referenced_weakly") {
        return;
    }
    let so = Mpm::Rworker.so_path();
    let nm = run("nm", &["-D", "--undefined-only", so.to_str().unwrap()]);
    for l in nm.lines() {
        let f: Vec<_> = l.split_whitespace().collect();
        if f.last() == Some(&"ap_set_listentcpdeferaccept") {
            assert_eq!(f[0], "w", "a strong reference in {}: {l}", so.display());
        }
    }
}

/// The module is linked `-z nodelete`, so httpd's dlclose between config passes never unmaps
/// it (contract §0 items 3 and 4).
#[test]
fn module_is_linked_nodelete() {
    if skip_unless_rworker("module_is_linked_nodelete") {
        return;
    }
    let so = Mpm::Rworker.so_path();
    let dynamic = run("readelf", &["-d", so.to_str().unwrap()]);
    let flags1 = dynamic.lines().find(|l| l.contains("(FLAGS_1)"));
    assert!(
        flags1.is_some_and(|l| l.contains("NODELETE")),
        "{}: no NODELETE in FLAGS_1; dynamic section:\n{dynamic}",
        so.display()
    );
}

#[test]
fn config_test_says_syntax_ok() {
    let s = Server::new(ServerOpts::default());
    let out = s.ctl(&["-t"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("Syntax OK"),
        "apache2 -t ({}):\n{text}",
        out.status
    );
    // The default test config needs no adjustment: nothing to warn about.
    assert!(
        !text.contains("AH0"),
        "apache2 -t printed warnings:\n{text}"
    );
}

#[test]
fn version_reports_mpm_name_and_model() {
    let s = Server::new(ServerOpts::default());
    let out = s.ctl(&["-V"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "apache2 -V: {}\n{text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let value = |key: &str| -> String {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|| panic!("no {key:?} in apache2 -V:\n{text}"))
    };
    assert_eq!(value("Server MPM:"), s.mpm.name());
    assert_eq!(value("threaded:"), "yes (fixed thread count)");
    assert_eq!(value("forked:"), "yes (variable process count)");
}

/// `apache2 -M` lists the module as shared, under its symbol name.
#[test]
fn module_list_shows_mpm_as_shared() {
    let s = Server::new(ServerOpts::default());
    let out = s.ctl(&["-M"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "apache2 -M: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let want = format!("{} (shared)", s.mpm.module_symbol());
    assert!(
        text.lines().any(|l| l.trim() == want),
        "no {want:?} in apache2 -M:\n{text}"
    );
}

/// ThreadsPerChild above ThreadLimit is reported and clamped, as the stock worker does
/// (AH00320: "ThreadsPerChild of 100 exceeds ThreadLimit of 64, decreasing to match").
#[test]
fn threads_per_child_above_thread_limit_warns() {
    let s = Server::new(
        ServerOpts::default()
            .threads_per_child(100)
            .max_request_workers(128),
    );
    let out = s.ctl(&["-t"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("Syntax OK"),
        "apache2 -t ({}):\n{text}",
        out.status
    );
    assert!(
        text.contains("ThreadsPerChild of 100 exceeds ThreadLimit of 64"),
        "no ThreadsPerChild/ThreadLimit warning from apache2 -t:\n{text}"
    );
}

/// mpm_event's AsyncRequestWorkerFactor, from a configuration ported from event: taken as
/// event takes it (a positive number, else a syntax error with event's message), with a
/// notice that it does nothing here (RW00050), so the server starts. Stock worker: unknown.
#[test]
fn async_request_worker_factor_from_event_is_accepted_with_a_notice() {
    if Mpm::under_test() != Mpm::Rworker {
        eprintln!("skipped: rworker's handling of an event directive");
        return;
    }
    let check = |value: &str| {
        let s =
            Server::new(ServerOpts::default().line(format!("AsyncRequestWorkerFactor {value}")));
        let out = s.ctl(&["-t"]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let (ok, text) = check("2");
    assert!(
        ok && text.contains("Syntax OK"),
        "AsyncRequestWorkerFactor 2:\n{text}"
    );
    assert!(
        text.contains("RW00050"),
        "no notice that it has no effect:\n{text}"
    );
    let (ok, text) = check("0");
    assert!(
        !ok && text.contains("AsyncRequestWorkerFactor argument must be a positive number"),
        "AsyncRequestWorkerFactor 0:\n{text}"
    );
}

/// The README stays a first read: the default's story first, at most 250 lines (history
/// goes to docs/history.md, figures to bench/). It grew past the bar once unnoticed.
#[test]
fn readme_is_at_most_250_lines() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let lines = readme.lines().count();
    assert!(lines <= 250, "README.md has {lines} lines (at most 250)");
}
