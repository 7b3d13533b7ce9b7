//! Reading httpd's error log: the level of a line, and whether it tells of a crash.

/// The level of an httpd error log line (`[date] [module:level] ...`), if it has that form.
pub fn log_level(line: &str) -> Option<&str> {
    let rest = line.strip_prefix('[')?;
    let rest = &rest[rest.find("] [")? + 3..];
    let tag = &rest[..rest.find(']')?];
    Some(tag.rsplit(':').next().unwrap_or(tag))
}

/// What marks a crash line: a child killed by a signal other than the ones the parent itself
/// sends (AH00050–AH00052 "exit signal"), a segfault (httpd's words and the kernel's) or an
/// abort, a Rust panic message written to the inherited stderr, a resource shortage before any
/// child started (AH02325), or anything logged at crit, alert or emerg.
const CRASH_MARKS: &[&str] = &[
    "exit signal",
    "Segmentation fault",
    "segfault",
    "possible coredump",
    "panicked",
    "Aborted",
    "AH02325",
    ":crit]",
    ":alert]",
    ":emerg]",
];

/// Whether this error log line tells of a crash (see [`CRASH_MARKS`]).
pub fn is_crash_line(line: &str) -> bool {
    CRASH_MARKS.iter().any(|m| line.contains(m))
}

/// The crash lines of an error log's text.
pub fn crash_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| is_crash_line(l))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_lines_are_recognised() {
        for crash in [
            "[Sun Nov 30 01:00:00.000000 2025] [core:notice] [pid 12:tid 34] AH00052: \
             child pid 99 exit signal Segmentation fault (11)",
            "[core:notice] [pid 1] AH00051: child pid 7 exit signal Aborted (6), possible coredump in /tmp",
            "[mpm_rworker:crit] [pid 1] worker panicked at src/x.rs:1",
            "thread 'worker' panicked at src/mpm/worker.rs:10:5:",
            "kernel: apache2[123]: segfault at 0 ip 0 sp 0 error 4",
            "[mpm_rworker:alert] [pid 1] AH02325: could not create worker threads",
            "[core:emerg] [pid 1] AH00020: Configuration Failed, exiting",
            "[mpm_rworker:alert] [pid 1] RW00099: something alerting",
        ] {
            assert!(is_crash_line(crash), "{crash}");
        }
        for ok in [
            "[mpm_worker:notice] [pid 1] AH00292: Apache/2.4 configured -- resuming",
            "[mpm_worker:error] [pid 1] AH00286: server reached MaxRequestWorkers",
            "[mpm_rworker:warn] [pid 1] RW00004: shedding a child",
        ] {
            assert!(!is_crash_line(ok), "{ok}");
        }
        let log = "a\n[x:crit] b\nc exit signal\n";
        assert_eq!(crash_lines(log), vec!["[x:crit] b", "c exit signal"]);
    }

    #[test]
    fn levels() {
        let l = "[Sun Nov 30 01:00:00.000000 2025] [mpm_rworker:warn] [pid 1] RW00004: x";
        assert_eq!(log_level(l), Some("warn"));
        assert_eq!(log_level("[Sun Nov 30] [notice] [pid 1] x"), Some("notice"));
        assert_eq!(log_level("thread 'x' panicked"), None);
    }
}
