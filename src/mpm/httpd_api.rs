//! The httpd rworker runs in, against the one whose headers it was built with.
//!
//! httpd keeps its module ABI within 2.4 (module magic number major 20120211) and adds
//! states, query codes and struct fields in minor bumps; when it loads a module it checks
//! only the major. A module built against newer headers than the running httpd's would
//! load and then use what this httpd does not have (with 2.4.63's headers it writes
//! `process_score.wait_io`, past the end of an older httpd's slot, into the next slot's
//! pid). So pre_config compares the two module magic numbers first and refuses to start
//! on an older httpd, naming both.

pub use crate::ffi::httpd::HttpdApi;

/// The error line that refuses to start, or None when rworker built against `built` may run
/// in `running`: the same major, and a minor at least the build's (a newer httpd only adds).
pub fn refusal(built: &HttpdApi, running: &HttpdApi) -> Option<String> {
    if built.major == running.major && running.minor >= built.minor {
        return None;
    }
    let why = if built.major != running.major {
        "a different module API"
    } else {
        "an older httpd that lacks interfaces the build uses"
    };
    Some(format!(
        "RW00060: rworker was built against {built} but runs in {running}, {why}; \
         rebuild rworker against this httpd's headers (APXS=<its apxs> cargo build --release, \
         see docs/build.md)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(minor: i32, release: &str) -> HttpdApi {
        HttpdApi {
            major: 20120211,
            minor,
            release: release.into(),
        }
    }

    #[test]
    fn same_httpd_runs() {
        assert_eq!(refusal(&api(142, "2.4.71"), &api(142, "2.4.71")), None);
    }

    #[test]
    fn newer_httpd_runs() {
        assert_eq!(refusal(&api(129, "2.4.58"), &api(142, "2.4.71")), None);
        assert_eq!(refusal(&api(121, "2.4.52"), &api(134, "2.4.62")), None);
    }

    #[test]
    fn older_httpd_is_refused_naming_both() {
        let line = refusal(&api(142, "2.4.71"), &api(129, "2.4.58")).expect("refused");
        assert!(line.starts_with("RW00060: "), "{line}");
        assert!(
            line.contains("built against httpd 2.4.71 (module magic number 20120211.142)"),
            "{line}"
        );
        assert!(
            line.contains("runs in httpd 2.4.58 (module magic number 20120211.129)"),
            "{line}"
        );
        assert!(line.contains("APXS="), "{line}");
    }

    #[test]
    fn one_minor_older_is_refused() {
        // 2.4.63-dev's .136 added process_score.wait_io: a .136 build must not run in .135.
        assert!(refusal(&api(136, "2.4.63"), &api(135, "2.4.63")).is_some());
    }

    #[test]
    fn another_major_is_refused() {
        let mut other = api(142, "2.5.0");
        other.major = 20211221;
        let line = refusal(&api(142, "2.4.71"), &other).expect("refused");
        assert!(line.contains("a different module API"), "{line}");
    }
}
