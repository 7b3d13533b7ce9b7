//! Forking children into scoreboard slots, and what the parent does when one exits:
//! free its slot, note sickness or fatality, and replace it at once where a child is
//! owed (one killed by a signal; after a graceful restart, the new generation's
//! children that found no free slot yet; one that retired on its own while its bucket
//! is short of idle threads).

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
    /// Forks up to `number` children into free slots, lowest first, anywhere in the
    /// scoreboard (start-up; after a graceful restart, above the old generation's
    /// children). Returns how many were forked.
    pub(super) fn startup_children(&mut self, number: c_int) -> c_int {
        let mut forked = 0;
        let nb = listen::buckets().num_buckets() as c_int;
        for i in 0..scoreboard::slots() {
            if forked >= number {
                break;
            }
            if scoreboard::process(i).pid == 0 {
                if self.make_child(i, i % nb).is_none() {
                    break;
                }
                forked += 1;
            }
        }
        forked
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

    /// A child exited (reaped by `wait_for_child`).
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
            let current = scoreboard::process(slot).generation == r.my_generation();
            for t in 0..st.thread_limit {
                scoreboard::set_thread_status(slot, t, status::DEAD);
            }
            let bucket = scoreboard::process(slot).bucket;
            process::note_child_gone(slot);
            let nb = listen::buckets().num_buckets() as c_int;
            if processed == sys::APEXIT_CHILDSICK as c_int {
                r.set_spawn_rate((bucket.max(0) % nb) as usize, 1);
            } else if e.by_signal()
                && current
                && r.signal_deaths_in_a_row() < MAX_SIGNAL_RESPAWNS
                && processed == 0
            {
                // Killed (kill -9, OOM killer, crash): replace it now rather than at the
                // next maintenance cycle, but not in a loop.
                r.set_signal_deaths_in_a_row(r.signal_deaths_in_a_row() + 1);
                self.make_child(slot, slot % nb);
            } else if self.owed_children() > 0 {
                // An old child left after a graceful restart: its slot takes a new one now.
                self.make_child(slot, slot % nb);
            } else if current && processed == 0 && !e.by_signal() {
                self.replace_retired(e.pid(), bucket);
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
