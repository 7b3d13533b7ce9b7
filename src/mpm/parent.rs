//! The parent process: the `mpm` hook's main loop, forking children into scoreboard
//! slots, reaping them, idle-server maintenance (spawn towards MinSpareThreads, shed
//! above MaxSpareThreads through the pipe of death) and the stop / restart /
//! graceful / graceful-stop paths (worker.c `worker_run`, `server_main_loop`,
//! `perform_idle_server_maintenance`, `make_child`).
//!
//! The parent is single-threaded on the MPM's side; unixd's signal handlers only set
//! flags in the retained data, which this loop reads within a second.

use std::os::raw::c_int;
use std::ptr;

use crate::apr::log::level;
use crate::mpm::child;
use crate::mpm::config::{settings, settings_mut};
use crate::mpm::module::generation;
use crate::mpm::retained::{self, Retained};
use crate::mpm::scoreboard::{self, status};
use crate::sys;

/// Upper bound of children forked in one maintenance cycle, over all buckets.
const MAX_SPAWN_RATE: c_int = 32;
/// Maintenance cycles (seconds) a full scoreboard must persist before AH00288 is an error.
const SCOREBOARD_FULL_CYCLES: c_int = 10;
/// Signalled deaths respawned at once before falling back to maintenance pacing.
const MAX_SIGNAL_RESPAWNS: c_int = 3;

fn pending(r: &Retained) -> (bool, bool) {
    let m = r.mpm();
    // SAFETY: volatile reads of flags written by unixd's signal handlers.
    unsafe {
        (
            ptr::read_volatile(&m.shutdown_pending) != 0,
            ptr::read_volatile(&m.restart_pending) != 0,
        )
    }
}

/// The `mpm` hook: runs one generation. Returns OK to have httpd re-read the
/// configuration and call again (restart), DONE to exit, anything else is fatal.
///
/// # Safety
/// Called by httpd's main loop in the parent with the generation's live pconf and server.
pub unsafe extern "C" fn run(
    pconf: *mut sys::apr_pool_t,
    _plog: *mut sys::apr_pool_t,
    s: *mut sys::server_rec,
) -> c_int {
    // SAFETY: the parent is single-threaded on the MPM side; pre_config and open_logs
    // set up the retained data and the generation before httpd calls us.
    unsafe { run_generation(pconf, s) }
}

unsafe fn run_generation(pconf: *mut sys::apr_pool_t, s: *mut sys::server_rec) -> c_int {
    let r = unsafe { retained::get_or_create() };
    let m = r.mpm();
    let one_process = settings().one_process;

    // SAFETY: exported httpd globals and functions, called from the parent's main thread.
    unsafe {
        // Handlers first: `apachectl -k …` finds our pid in the pidfile, so a signal can
        // only arrive after the pidfile is written, and must find unixd's handlers there.
        sys::ap_unixd_mpm_set_signals(pconf, one_process as c_int);
        sys::ap_log_pid(pconf, sys::ap_pid_fname);
        if m.was_graceful == 0 {
            if sys::ap_run_pre_mpm((*(*s).process).pool, sys::ap_scoreboard_e_SB_SHARED)
                != sys::OK as c_int
            {
                m.mpm_state = sys::AP_MPMQ_STOPPING as c_int;
                return sys::DONE;
            }
            // Fresh scoreboard: nobody holds a slot yet.
            r.max_daemons_limit = -1;
        }
        scoreboard::global().running_generation = m.my_generation;
    }

    // Limits that depend on the listener buckets (known after open_logs).
    let nb = generation().num_buckets.max(1);
    {
        // SAFETY: single-threaded parent.
        let st = unsafe { settings_mut() };
        if st.daemons_limit < nb {
            st.daemons_limit = nb;
        }
        if st.daemons_to_start < nb {
            st.daemons_to_start = nb;
        }
        if st.min_spare_threads < st.threads_per_child * (nb - 1) + nb {
            st.min_spare_threads = st.threads_per_child * (nb - 1) + nb;
        }
        if st.max_spare_threads < st.min_spare_threads + (st.threads_per_child + 1) * nb {
            st.max_spare_threads = st.min_spare_threads + (st.threads_per_child + 1) * nb;
        }
    }
    r.ensure_spawn_rates(nb);
    let st = *settings();
    let mut remaining = st.daemons_to_start.min(st.daemons_limit);

    if one_process {
        // SAFETY: -X: serve from this process; child::main never returns.
        unsafe {
            m.mpm_state = sys::AP_MPMQ_RUNNING as c_int;
            child::main(0, 0);
        }
    }

    if m.was_graceful != 0 {
        // Old children still drain: grow slowly until they are gone.
        r.hold_off_on_exponential_spawning = 10;
    }
    let was_graceful = m.was_graceful != 0;
    let mut parent = Parent {
        r,
        remaining: 0,
        child_fatal: false,
    };
    if !was_graceful {
        parent.startup_children(remaining);
        remaining = 0;
    }
    parent.remaining = remaining;

    // SAFETY: plain httpd logging helpers with live pointers.
    unsafe {
        let desc = std::ffi::CStr::from_ptr(sys::ap_get_server_description()).to_string_lossy();
        crate::mpm_log!(
            level::NOTICE,
            0,
            "AH00292: {desc} configured -- resuming normal operations"
        );
        let built = std::ffi::CStr::from_ptr(sys::ap_get_server_built()).to_string_lossy();
        crate::mpm_log!(level::INFO, 0, "AH00293: Server built: {built}");
        sys::ap_log_command_line(pconf, s);
        sys::ap_log_mpm_common(s);
        crate::mpm_log!(
            level::DEBUG,
            0,
            "AH00294: Accept mutex: {} (rworker: {:?} queue, {} listener bucket(s), ThreadsPerChild {}, MaxRequestWorkers {})",
            if generation().use_accept_mutex { "mpm-accept" } else { "none" },
            st.queue,
            nb,
            st.threads_per_child,
            st.max_workers
        );
    }
    m.mpm_state = sys::AP_MPMQ_RUNNING as c_int;

    parent.main_loop(pconf, s);
    m.mpm_state = sys::AP_MPMQ_STOPPING as c_int;

    if pending(parent.r).0 {
        return parent.stop(pconf);
    }

    // Restart (graceful or not).
    m.my_generation += 1;
    scoreboard::global().running_generation = m.my_generation;
    // SAFETY: volatile read of a flag written by a signal handler.
    if unsafe { ptr::read_volatile(&m.is_ungraceful) } != 0 {
        parent.signal_children(sys::ap_podx_restart_t_AP_MPM_PODX_RESTART);
        // SAFETY: the core's reaping helper with our callback.
        unsafe { sys::ap_reclaim_child_processes(1, Some(note_child_killed)) };
        crate::mpm_log!(
            level::NOTICE,
            0,
            "AH00298: SIGHUP received.  Attempting to restart"
        );
    } else {
        crate::mpm_log!(
            level::NOTICE,
            0,
            "AH00297: SIGUSR1 received.  Doing graceful restart"
        );
        parent.signal_children(sys::ap_podx_restart_t_AP_MPM_PODX_GRACEFUL);
    }
    // A stop that arrived while we reaped would be wiped with pconf (unixd clears the
    // flags when the generation's pool goes): honour it now instead of losing it.
    if pending(parent.r).0 {
        return parent.stop(pconf);
    }
    sys::OK as c_int
}

/// Reaping callback for the core (`ap_reclaim_child_processes` and friends): a child
/// is gone, so free its slot and tell the child_status hook.
unsafe extern "C" fn note_child_killed(slot: c_int, pid: sys::pid_t, gen: sys::ap_generation_t) {
    // SAFETY: called by the core in the parent with a valid slot or -1.
    unsafe {
        if slot >= 0 {
            let ps = scoreboard::process(slot);
            sys::ap_run_child_status(
                sys::ap_server_conf,
                ps.pid,
                ps.generation,
                slot,
                sys::mpm_child_status_MPM_CHILD_EXITED,
            );
            ps.pid = 0;
            ps.quiescing = 0;
        } else {
            sys::ap_run_child_status(
                sys::ap_server_conf,
                pid,
                gen,
                -1,
                sys::mpm_child_status_MPM_CHILD_EXITED,
            );
        }
    }
}

/// The parent's loop state for one generation.
struct Parent {
    r: &'static mut Retained,
    /// Children still to fork at start-up (1-for-1 replacements are made while > 0).
    remaining: c_int,
    /// A child reported APEXIT_CHILDFATAL: the server is going down.
    child_fatal: bool,
}

impl Parent {
    /// `-k stop` (SIGTERM) or `-k graceful-stop` (SIGWINCH): wind the children down and
    /// return DONE. Graceful: stop listening, let in-flight requests finish for up to
    /// GracefulShutdownTimeout (0 = no limit), then stop whatever is left.
    fn stop(&mut self, pconf: *mut sys::apr_pool_t) -> c_int {
        let m = self.r.mpm();
        // SAFETY: volatile read of a flag written by a signal handler.
        let ungraceful = unsafe { ptr::read_volatile(&m.is_ungraceful) } != 0;
        if ungraceful {
            self.signal_children(sys::ap_podx_restart_t_AP_MPM_PODX_RESTART);
            // SAFETY: reaping via the core with our callback; pidfile path is httpd's.
            unsafe {
                sys::ap_reclaim_child_processes(1, Some(note_child_killed));
                if !self.child_fatal {
                    sys::ap_remove_pid(pconf, sys::ap_pid_fname);
                    crate::mpm_log!(level::NOTICE, 0, "AH00295: caught SIGTERM, shutting down");
                }
            }
            return sys::DONE;
        }
        // SAFETY: parent-side listener close and the core's reaping helpers.
        unsafe {
            sys::ap_close_listeners();
            self.signal_children(sys::ap_podx_restart_t_AP_MPM_PODX_GRACEFUL);
            sys::ap_relieve_child_processes(Some(note_child_killed));
            if !self.child_fatal {
                sys::ap_remove_pid(pconf, sys::ap_pid_fname);
                crate::mpm_log!(
                    level::NOTICE,
                    0,
                    "AH00296: caught SIGWINCH, shutting down gracefully"
                );
            }
            let timeout = sys::ap_graceful_shutdown_timeout;
            let cutoff = if timeout > 0 {
                sys::apr_time_now() + timeout as i64 * 1_000_000
            } else {
                0
            };
            // A later SIGTERM cuts the wait short.
            m.shutdown_pending = 0;
            loop {
                sys::apr_sleep(100_000);
                sys::ap_relieve_child_processes(Some(note_child_killed));
                if !self.any_child_alive() {
                    break;
                }
                if ptr::read_volatile(&m.shutdown_pending) != 0 {
                    break;
                }
                if cutoff != 0 && sys::apr_time_now() > cutoff {
                    break;
                }
            }
            self.signal_children(sys::ap_podx_restart_t_AP_MPM_PODX_RESTART);
            sys::ap_reclaim_child_processes(1, Some(note_child_killed));
        }
        sys::DONE
    }
    fn signal_children(&self, how: sys::ap_podx_restart_t) {
        let g = generation();
        let limit = settings().daemons_limit.max(self.r.max_daemons_limit);
        for b in 0..g.num_buckets as usize {
            // SAFETY: pods has num_buckets entries opened in open_logs.
            unsafe { sys::ap_mpm_podx_killpg(*g.pods.add(b), limit, how) };
        }
    }

    fn any_child_alive(&self) -> bool {
        (0..self.r.max_daemons_limit.max(0)).any(|i| {
            let pid = scoreboard::process(i).pid;
            // SAFETY: signal 0 only checks existence (and ap_mpm_safe_kill checks the
            // pid belongs to our process group).
            pid != 0 && unsafe { sys::ap_mpm_safe_kill(pid, 0) } == 0
        })
    }

    fn startup_children(&mut self, number: c_int) {
        let mut left = number;
        let limit = settings().daemons_limit;
        let nb = generation().num_buckets.max(1);
        let mut i = 0;
        while left > 0 && i < limit {
            if scoreboard::process(i).pid == 0 {
                if self.make_child(i, i % nb) < 0 {
                    break;
                }
                left -= 1;
            }
            i += 1;
        }
    }

    /// Forks a child into `slot`, serving `bucket`'s listeners. Returns the pid, or -1
    /// when fork failed (logged; the parent then waits 10 s as the stock MPM does).
    fn make_child(&mut self, slot: c_int, bucket: c_int) -> sys::pid_t {
        if self.r.max_daemons_limit < slot + 1 {
            self.r.max_daemons_limit = slot + 1;
        }
        // SAFETY: the parent runs no MPM threads and holds no Rust locks here; the
        // child immediately re-initialises APR's thread-current state.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            let e = std::io::Error::last_os_error();
            crate::mpm_log!(
                level::ERR,
                e.raw_os_error().unwrap_or(0),
                "AH00283: fork: Unable to fork new process"
            );
            // SAFETY: plain sleep; avoids hammering a system out of processes.
            unsafe { sys::apr_sleep(10 * 1_000_000) };
            return -1;
        }
        if pid == 0 {
            // SAFETY: we are the new child; child::main never returns.
            unsafe {
                sys::ap_thread_current_after_fork();
                child::main(slot, bucket);
            }
        }
        let my_gen = self.r.mpm().my_generation;
        let ps = scoreboard::process(slot);
        // SAFETY: core hooks called from the parent with valid arguments.
        unsafe {
            if ps.pid != 0 {
                // The slot still belongs to a quiescing child of an older generation:
                // keep reaping it as an extra process.
                sys::ap_run_child_status(
                    sys::ap_server_conf,
                    ps.pid,
                    ps.generation,
                    slot,
                    sys::mpm_child_status_MPM_CHILD_LOST_SLOT,
                );
                sys::ap_register_extra_mpm_process(ps.pid, ps.generation);
            }
            ps.quiescing = 0;
            ps.bucket = bucket;
            ps.pid = pid;
            ps.generation = my_gen;
            sys::ap_run_child_status(
                sys::ap_server_conf,
                pid,
                my_gen,
                slot,
                sys::mpm_child_status_MPM_CHILD_STARTED,
            );
        }
        pid
    }

    fn main_loop(&mut self, pconf: *mut sys::apr_pool_t, s: *mut sys::server_rec) {
        loop {
            let (shutdown, restart) = pending(self.r);
            if shutdown || restart {
                return;
            }
            let mut why: sys::apr_exit_why_e = 0;
            let mut code: c_int = 0;
            let mut proc_: sys::apr_proc_t = Default::default();
            // SAFETY: out-pointers are valid locals; waits at most ~1 s.
            unsafe { sys::ap_wait_or_timeout(&mut why, &mut code, &mut proc_, pconf, s) };
            if proc_.pid != -1 {
                self.child_exited(why, code, &mut proc_);
                continue;
            }
            if self.remaining > 0 {
                let n = self.remaining;
                self.startup_children(n);
                self.remaining = 0;
                continue;
            }
            self.r.signal_deaths_in_a_row = 0;
            for b in 0..generation().num_buckets.max(1) {
                self.idle_maintenance(b);
            }
        }
    }

    fn child_exited(&mut self, why: sys::apr_exit_why_e, code: c_int, proc_: &mut sys::apr_proc_t) {
        let m = self.r.mpm();
        // SAFETY: core helpers over a reaped pid.
        let processed = unsafe { sys::ap_process_child_status(proc_, why, code) };
        let slot = unsafe { sys::ap_find_child_by_pid(proc_) };
        if processed == sys::APEXIT_CHILDFATAL as c_int {
            if slot < 0 || scoreboard::process(slot).generation == m.my_generation {
                // A child of this generation cannot run: stop the server.
                m.shutdown_pending = 1;
                self.child_fatal = true;
                return;
            }
            crate::mpm_log!(
                level::WARNING,
                0,
                "AH00290: Ignoring fatal error in child of previous generation (pid {}).",
                proc_.pid
            );
            self.r.sick_child_detected = 1;
        } else if processed == sys::APEXIT_CHILDSICK as c_int {
            self.r.sick_child_detected = 1;
        }

        if slot >= 0 {
            let tpc = settings().thread_limit;
            for t in 0..tpc {
                scoreboard::set_status(slot, t, status::DEAD);
            }
            let bucket = scoreboard::process(slot).bucket;
            // SAFETY: reap callback with the slot the core found.
            unsafe { note_child_killed(slot, 0, 0) };
            let nb = generation().num_buckets.max(1);
            if processed == sys::APEXIT_CHILDSICK as c_int {
                *self.r.spawn_rate((bucket.max(0) % nb) as usize) = 1;
            } else if why == sys::apr_exit_why_e_APR_PROC_SIGNAL
                && slot < settings().daemons_limit
                && self.r.signal_deaths_in_a_row < MAX_SIGNAL_RESPAWNS
                && processed == 0
            {
                // Killed (kill -9, OOM killer, crash): replace it now rather than at the
                // next maintenance cycle, but not in a loop.
                self.r.signal_deaths_in_a_row += 1;
                self.make_child(slot, slot % nb);
            } else if self.remaining > 0 && slot < settings().daemons_limit {
                self.make_child(slot, slot % nb);
                self.remaining -= 1;
            }
            return;
        }
        let mut old_gen: sys::ap_generation_t = 0;
        // SAFETY: core bookkeeping for slot-less children and piped loggers.
        unsafe {
            if sys::ap_unregister_extra_mpm_process(proc_.pid, &mut old_gen) == 1 {
                note_child_killed(-1, proc_.pid, old_gen);
            } else if sys::apr_proc_other_child_alert(
                proc_,
                sys::APR_OC_REASON_DEATH as c_int,
                code,
            ) == 0
            {
                // a piped logger or other registered child: handled by its owner
            } else if m.was_graceful != 0 {
                crate::mpm_log!(
                    level::WARNING,
                    0,
                    "AH00291: long lost child came home! (pid {})",
                    proc_.pid
                );
            }
        }
    }

    /// One maintenance cycle for `bucket` (called about once a second).
    fn idle_maintenance(&mut self, bucket: c_int) {
        let st = *settings();
        let nb = generation().num_buckets.max(1);
        let my_gen = self.r.mpm().my_generation;
        let rate = *self.r.spawn_rate(bucket as usize);
        let mut idle_threads = 0;
        let mut active_threads = 0;
        let mut last_non_dead = -1;
        // Free slots, fully dead ones first.
        let mut free_slots: Vec<c_int> = Vec::new();
        let mut totally_free = 0usize;

        for i in 0..st.daemons_limit {
            if i % nb != bucket {
                continue;
            }
            if i >= self.r.max_daemons_limit && free_slots.len() as c_int >= rate {
                break;
            }
            let ps = scoreboard::process(i);
            let (mut any_dying, mut any_dead, mut all_dead, mut active) = (false, false, true, 0);
            for t in 0..st.threads_per_child {
                let stt = scoreboard::thread_status(i, t);
                any_dying |= stt == status::GRACEFUL;
                any_dead |= stt == status::DEAD;
                all_dead &= stt == status::DEAD || stt == status::GRACEFUL;
                if ps.pid != 0 {
                    if stt <= status::READY && ps.quiescing == 0 && ps.generation == my_gen {
                        idle_threads += 1;
                    }
                    if (status::READY..status::GRACEFUL).contains(&stt) {
                        active += 1;
                    }
                }
            }
            active_threads += active;
            if any_dead && (free_slots.len() as c_int) < rate && (ps.pid == 0 || ps.quiescing != 0)
            {
                if all_dead {
                    free_slots.insert(totally_free, i);
                    totally_free += 1;
                } else {
                    free_slots.push(i);
                }
            }
            if !any_dying {
                last_non_dead = i;
            }
        }

        if self.r.sick_child_detected != 0 {
            if active_threads > 0 {
                self.r.sick_child_detected = 0;
            } else if bucket == nb - 1 {
                crate::mpm_log!(
                    level::ALERT,
                    0,
                    "AH02325: A resource shortage or other unrecoverable failure was encountered before any child process initialized successfully... httpd is exiting!"
                );
                self.r.mpm().shutdown_pending = 1;
                self.child_fatal = true;
                return;
            }
        }

        // Never shrink: the core scans this many slots when reaping, and a quiescing
        // child may still sit above the last busy slot.
        self.r.max_daemons_limit = self.r.max_daemons_limit.max(last_non_dead + 1);

        let max_idle = st.max_spare_threads / nb;
        if idle_threads > max_idle {
            // Debug level, as shedding is routine; it also explains the keep-alive connections
            // the shed child closes after their current request (the core's keep-alive loop
            // stops once the MPM state is STOPPING, as with the stock worker).
            crate::mpm_log!(
                level::DEBUG,
                0,
                "RW00004: {} idle threads > MaxSpareThreads {}: one child exits gracefully",
                idle_threads,
                max_idle
            );
            // One child of this bucket exits gracefully: the first to read the pod.
            // SAFETY: the bucket's pod, opened in open_logs.
            unsafe {
                sys::ap_mpm_podx_signal(
                    *generation().pods.add(bucket as usize),
                    sys::ap_podx_restart_t_AP_MPM_PODX_GRACEFUL,
                )
            };
            *self.r.spawn_rate(bucket as usize) = 1;
        } else if idle_threads < st.min_spare_threads / nb {
            if free_slots.is_empty() {
                let limit = st.daemons_limit * st.threads_per_child / nb;
                if active_threads >= limit {
                    if self.r.maxclients_reported == 0 {
                        crate::mpm_log!(
                            level::ERR,
                            0,
                            "AH00286: server reached MaxRequestWorkers setting, consider raising the MaxRequestWorkers setting"
                        );
                        self.r.maxclients_reported = 1;
                    }
                } else if self.r.near_maxclients_reported == 0
                    && active_threads + st.min_spare_threads / nb > limit
                {
                    crate::mpm_log!(
                        level::ERR,
                        0,
                        "AH00287: server is within MinSpareThreads of MaxRequestWorkers, consider raising the MaxRequestWorkers setting"
                    );
                    self.r.near_maxclients_reported = 1;
                } else if active_threads + st.min_spare_threads / nb <= limit {
                    // Slots held by exiting children free up within moments (a child retiring
                    // after MaxConnectionsPerChild, or shed by maintenance): that is routine,
                    // so say it at debug level and raise it to an error only when it persists.
                    self.r.scoreboard_full_cycles += 1;
                    let persistent = self.r.scoreboard_full_cycles % SCOREBOARD_FULL_CYCLES == 0;
                    crate::mpm_log!(
                        if persistent { level::ERR } else { level::DEBUG },
                        0,
                        "AH00288: scoreboard is full, not at MaxRequestWorkers{}",
                        if persistent {
                            " (slots are held by exiting children; consider raising ServerLimit)"
                        } else {
                            ""
                        }
                    );
                }
                *self.r.spawn_rate(bucket as usize) = 1;
            } else {
                self.r.scoreboard_full_cycles = 0;
                let n = (free_slots.len() as c_int).min(rate);
                if rate >= 8 {
                    crate::mpm_log!(
                        level::INFO,
                        0,
                        "AH00289: server seems busy, (you may need to increase StartServers, ThreadsPerChild or Min/MaxSpareThreads), spawning {} children, there are around {} idle threads, {} active threads, and {} total children",
                        n,
                        idle_threads,
                        active_threads,
                        last_non_dead + 1
                    );
                }
                for &slot in &free_slots[..n as usize] {
                    self.make_child(slot, bucket);
                }
                if self.r.hold_off_on_exponential_spawning > 0 {
                    self.r.hold_off_on_exponential_spawning -= 1;
                } else if rate < MAX_SPAWN_RATE / nb {
                    *self.r.spawn_rate(bucket as usize) = rate * 2;
                }
            }
        } else {
            *self.r.spawn_rate(bucket as usize) = 1;
            self.r.scoreboard_full_cycles = 0;
            // Load dropped below the limit again: report a new saturation next time.
            let limit = st.daemons_limit * st.threads_per_child / nb;
            if active_threads + st.min_spare_threads / nb <= limit {
                self.r.maxclients_reported = 0;
                self.r.near_maxclients_reported = 0;
            }
        }
    }
}
