//! Forking children into scoreboard slots, and what the parent does when one exits:
//! free its slot, note sickness or fatality, and replace it at once where the stock
//! worker does (a child killed by a signal; a start-up child not yet replaced).

use std::os::raw::c_int;
use std::time::Duration;

use crate::ffi::httpd::{self, ChildStatus};
use crate::ffi::log::level;
use crate::ffi::process::{self, Exited, Forked};
use crate::ffi::scoreboard::{self, status};
use crate::ffi::thread;
use crate::mpm::child;
use crate::mpm::parent::Parent;
use crate::mpm::{listen, settings};
use crate::sys;

/// Signalled deaths respawned at once before falling back to maintenance pacing.
const MAX_SIGNAL_RESPAWNS: c_int = 3;

impl Parent {
    /// Forks up to `number` children into free slots (start-up, and 1-for-1
    /// replacements while children are still owed).
    pub(super) fn startup_children(&mut self, number: c_int) {
        let mut left = number;
        let limit = settings::get().daemons_limit;
        let nb = listen::buckets().num_buckets() as c_int;
        let mut i = 0;
        while left > 0 && i < limit {
            if scoreboard::process(i).pid == 0 {
                if self.make_child(i, i % nb).is_none() {
                    break;
                }
                left -= 1;
            }
            i += 1;
        }
    }

    /// Forks a child into `slot`, serving `bucket`'s listeners. Returns the pid, or None
    /// when fork failed (logged; the parent then waits 10 s as the stock MPM does).
    pub(super) fn make_child(&mut self, slot: c_int, bucket: c_int) -> Option<sys::pid_t> {
        let r = self.r;
        r.set_max_daemons_limit(r.max_daemons_limit().max(slot + 1));
        let pid = match process::fork(self.token) {
            Forked::Child => child::main(self.token, self.pconf, slot, bucket),
            Forked::Parent(pid) => pid,
            Forked::Failed(errno) => {
                crate::mpm_log!(
                    level::ERR,
                    errno,
                    "AH00283: fork: Unable to fork new process"
                );
                // Avoids hammering a system that is out of processes.
                thread::sleep(Duration::from_secs(10));
                return None;
            }
        };
        let my_gen = r.my_generation();
        let held = scoreboard::process(slot);
        if held.pid != 0 {
            // The slot still belongs to a quiescing child of an older generation: keep
            // reaping it as an extra process.
            httpd::run_child_status(held.pid, held.generation, slot, ChildStatus::LostSlot);
            process::register_extra_process(self.token, held.pid, held.generation);
        }
        scoreboard::claim_slot(slot, pid, my_gen, bucket);
        httpd::run_child_status(pid, my_gen, slot, ChildStatus::Started);
        Some(pid)
    }

    /// A child exited (reaped by `wait_or_timeout`).
    pub(super) fn child_exited(&mut self, mut e: Exited) {
        let r = self.r;
        let processed = e.process_status();
        let slot = e.slot();
        if processed == sys::APEXIT_CHILDFATAL as c_int {
            if slot.map_or(true, |s| {
                scoreboard::process(s).generation == r.my_generation()
            }) {
                // A child of this generation cannot run: stop the server.
                r.set_shutdown_pending(1);
                self.child_fatal = true;
                return;
            }
            crate::mpm_log!(
                level::WARNING,
                0,
                "AH00290: Ignoring fatal error in child of previous generation (pid {}).",
                e.pid()
            );
            r.set_sick_child_detected(1);
        } else if processed == sys::APEXIT_CHILDSICK as c_int {
            r.set_sick_child_detected(1);
        }

        if let Some(slot) = slot {
            let st = settings::get();
            for t in 0..st.thread_limit {
                scoreboard::set_thread_status(slot, t, status::DEAD);
            }
            let bucket = scoreboard::process(slot).bucket;
            process::note_child_gone(slot);
            let nb = listen::buckets().num_buckets() as c_int;
            if processed == sys::APEXIT_CHILDSICK as c_int {
                r.set_spawn_rate((bucket.max(0) % nb) as usize, 1);
            } else if e.by_signal()
                && slot < st.daemons_limit
                && r.signal_deaths_in_a_row() < MAX_SIGNAL_RESPAWNS
                && processed == 0
            {
                // Killed (kill -9, OOM killer, crash): replace it now rather than at the
                // next maintenance cycle, but not in a loop.
                r.set_signal_deaths_in_a_row(r.signal_deaths_in_a_row() + 1);
                self.make_child(slot, slot % nb);
            } else if self.remaining > 0 && slot < st.daemons_limit {
                self.make_child(slot, slot % nb);
                self.remaining -= 1;
            }
            return;
        }
        if let Some(old_gen) = process::unregister_extra_process(self.token, e.pid()) {
            httpd::run_child_status(e.pid(), old_gen, -1, ChildStatus::Exited);
        } else if e.other_child_alert() {
            // a piped logger or other registered child: handled by its owner
        } else if r.was_graceful() != 0 {
            crate::mpm_log!(
                level::WARNING,
                0,
                "AH00291: long lost child came home! (pid {})",
                e.pid()
            );
        }
    }
}
