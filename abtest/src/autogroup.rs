//! The kernel's autogroup scheduling (`/proc/sys/kernel/sched_autogroup_enabled`), turned off
//! for the duration of a run unless `--autogroup keep`.
//!
//! With autogroup on, CPU time is shared fairly between *sessions* first, then between the
//! threads of each session. `apache2 -k start` calls setsid(2), so every server under test is
//! one session and the load client (wrk, in the harness's session) another: on a machine
//! whose CPUs both share, the client may take up to half of them whatever the server's thread
//! count. Which of the two ends up starved is decided early in a run and then holds: measured
//! at keep-alive c=400 with 150 workers on 2 CPUs, fresh servers of the same build came out
//! either client-bound (rworker-park p99 25-35 ms, 17-24k req/s) or server-bound (p99
//! 0.11-0.54 s, 25-35k req/s, 45-80 runnable threads, per-process mmap_lock convoys on the
//! 1-byte file's mmap/munmap), 5 of 7 server-bound for rworker-park and 1 of 7 for event.
//! With autogroup off every thread competes alike and the same cell gave p99 30-35 ms in 5 of
//! 5 runs. A production server's clients are on other machines, so neither regime is the one
//! an administrator sees; the flat one at least repeats.

use crate::error::Context;
use crate::Result;
use std::path::{Path, PathBuf};

/// The kernel's switch.
pub const SYSCTL: &str = "/proc/sys/kernel/sched_autogroup_enabled";

/// What the harness did to the switch, for the report.
#[derive(Debug)]
pub enum Autogroup {
    /// It was on (at this path); it is off until this value is dropped (or a signal ends
    /// the run: see [`crate::shutdown::add_restore`]).
    TurnedOff(PathBuf),
    /// Left alone: absent, already off, or `--autogroup keep`; the text says which.
    Left(String),
}

impl Autogroup {
    /// Turns autogroup off if it is on (`keep`: leave it as it is). A switch that is on but
    /// cannot be written (not root) is an error: the run would not measure what it claims.
    pub fn prepare(keep: bool) -> Result<Autogroup> {
        Self::prepare_at(Path::new(SYSCTL), keep)
    }

    fn prepare_at(path: &Path, keep: bool) -> Result<Autogroup> {
        let Ok(now) = std::fs::read_to_string(path) else {
            return Ok(Autogroup::Left(format!("{} absent", path.display())));
        };
        let now = now.trim().to_string();
        if keep || now != "1" {
            return Ok(Autogroup::Left(format!(
                "{} = {now}{}",
                path.display(),
                if keep { " (--autogroup keep)" } else { "" }
            )));
        }
        std::fs::write(path, "0").context(|| {
            format!(
                "turn autogroup scheduling off ({} = 0; run as root, or pass --autogroup keep)",
                path.display()
            )
        })?;
        crate::shutdown::add_restore(path.to_path_buf(), "1".into());
        Ok(Autogroup::TurnedOff(path.to_path_buf()))
    }

    /// One line for the report's machine section.
    pub fn describe(&self) -> String {
        match self {
            Autogroup::TurnedOff(p) => {
                format!(
                    "{}: was 1, set to 0 for this run (restored at the end)",
                    p.display()
                )
            }
            Autogroup::Left(s) => s.clone(),
        }
    }
}

impl Drop for Autogroup {
    fn drop(&mut self) {
        if let Autogroup::TurnedOff(p) = self {
            crate::shutdown::restore_now(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_switch_or_keep_is_left_alone() {
        let dir = std::env::temp_dir().join(format!("rworker-ab-ag-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing");
        assert!(matches!(
            Autogroup::prepare_at(&missing, false).unwrap(),
            Autogroup::Left(_)
        ));
        let f = dir.join("switch");
        std::fs::write(&f, "1\n").unwrap();
        let kept = Autogroup::prepare_at(&f, true).unwrap();
        assert!(kept.describe().contains("keep"), "{}", kept.describe());
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "1\n");
        std::fs::write(&f, "0\n").unwrap();
        assert!(matches!(
            Autogroup::prepare_at(&f, false).unwrap(),
            Autogroup::Left(_)
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_switch_that_is_on_is_off_for_the_run_and_on_again_after() {
        let dir = std::env::temp_dir().join(format!("rworker-ab-ag2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("switch");
        std::fs::write(&f, "1\n").unwrap();
        let off = Autogroup::prepare_at(&f, false).unwrap();
        assert!(matches!(off, Autogroup::TurnedOff(_)));
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "0");
        drop(off);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "1");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
