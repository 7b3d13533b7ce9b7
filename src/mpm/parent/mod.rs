//! The parent process: the `mpm` hook runs one generation — forks the children, loops
//! reaping them and running idle maintenance about once a second, and ends on a stop,
//! restart, graceful restart or graceful stop (worker.c `worker_run`,
//! `server_main_loop`). Forking and reaping are in `spawn`, the scoreboard census in
//! `census`, the spawn-or-shed decision in `maintenance`, the hand-over from one
//! generation to the next at a graceful restart in `takeover`.
//!
//! The parent is single-threaded on the MPM's side; unixd's signal handlers only set
//! flags in the retained block, which this loop reads within a second.

mod census;
mod maintenance;
mod spawn;
mod takeover;

use std::os::raw::c_int;
use std::time::{Duration, Instant};

use crate::ffi::epoll::WakeFd;
use crate::ffi::httpd::{self, ServerRec, SingleThreaded};
use crate::ffi::listen::{self, PodMessage};
use crate::ffi::log::level;
use crate::ffi::pool::ConfigPool;
use crate::ffi::process;
use crate::ffi::retained::Retained;
use crate::ffi::{scoreboard, signal, thread};
use crate::mpm::parent::census::{Census, Scope};
use crate::mpm::parent::maintenance::{Action, Limits, Line, Memory};
use crate::mpm::{child, listen as mpm_listen, open_files, settings, status};
use crate::sys;

/// Idle maintenance runs once a second (worker.c's cadence: its spawn rate doubles and
/// it sheds one child per cycle).
const MAINTENANCE_EVERY: Duration = Duration::from_secs(1);

/// The monitor hooks run every this many maintenance cycles (the core's wait runs them
/// every tenth call, which is every tenth second while no child exits).
const MONITOR_EVERY_CYCLES: u32 = 10;

/// The parent's state for one generation.
struct Parent {
    token: SingleThreaded,
    r: Retained,
    pconf: ConfigPool,
    s: ServerRec,
    /// After a graceful restart: the children the new generation takes over with (the
    /// old generation's, at least StartServers), until it has them; 0 otherwise.
    takeover: c_int,
    /// A child reported APEXIT_CHILDFATAL: the server is going down.
    child_fatal: bool,
}

/// The `mpm` hook: runs one generation. Returns OK to have httpd re-read the
/// configuration and call again (restart), DONE to exit, anything else is fatal.
pub fn run(token: SingleThreaded, pconf: ConfigPool, s: ServerRec) -> c_int {
    let r = Retained::get_or_create(token);
    let one_process = settings::get().one_process;
    let was_graceful = r.was_graceful() != 0;

    // Handlers first: `apachectl -k …` finds our pid in the pidfile, so a signal can only
    // arrive after the pidfile is written, and must find unixd's handlers there.
    httpd::install_signals_and_pidfile(token, pconf, one_process);
    if !was_graceful {
        if httpd::run_pre_mpm(token, s).is_err() {
            r.set_mpm_state(sys::AP_MPMQ_STOPPING as c_int);
            return sys::DONE;
        }
        // Fresh scoreboard: nobody holds a slot yet.
        r.set_max_daemons_limit(-1);
    }
    scoreboard::set_running_generation(r.my_generation());
    // Before any fork: children inherit the limit (a no-op once raised).
    open_files::raise_soft_limit();

    let nb = mpm_listen::buckets().num_buckets() as c_int;
    settings::update(token, |st| settings::fit_buckets(st, nb));
    r.ensure_spawn_rates(token, nb);
    let st = settings::get();
    // Before any fork: every child inherits the mapping.
    status::ensure_rows(token, r, st.server_limit);
    // And the bell a child rings as it begins to retire (a failure leaves replacements
    // to the next maintenance cycle, as in the stock worker).
    if !one_process {
        if let Err(e) = r.ensure_parent_bell(token) {
            crate::mpm_log!(
                level::WARNING,
                e,
                "RW00046: could not make the parent's bell (an eventfd): a child that retires at MaxConnectionsPerChild is replaced only once it exits or at the next maintenance cycle"
            );
        }
    }

    if one_process {
        // -X: this process serves from slot 0; record it there so that mod_status counts
        // its workers (the child's exit frees the slot again).
        scoreboard::claim_slot(0, std::process::id() as sys::pid_t, r.my_generation(), 0);
        r.set_mpm_state(sys::AP_MPMQ_RUNNING as c_int);
        child::main(token, pconf, 0, 0);
    }

    // A new generation must show again that its children can start (AH02325).
    r.set_healthy_child_seen(0);
    if was_graceful {
        // Old children still drain: grow slowly until they are gone.
        r.set_hold_off_on_exponential_spawning(10);
    }
    let mut parent = Parent {
        token,
        r,
        pconf,
        s,
        takeover: 0,
        child_fatal: false,
    };
    let to_start = st.daemons_to_start.min(st.daemons_limit);
    if was_graceful {
        parent.begin_takeover(to_start);
    } else {
        parent.startup_children(to_start);
    }

    httpd::log_startup_lines(pconf, s);
    crate::mpm_log!(
        level::DEBUG,
        0,
        "AH00294: Accept mutex: {} (rworker: {:?} queue, {} listener bucket(s), ThreadsPerChild {}, MaxRequestWorkers {})",
        if mpm_listen::buckets().use_accept_mutex() { "mpm-accept" } else { "none" },
        st.queue,
        nb,
        st.threads_per_child,
        st.max_workers
    );
    r.set_mpm_state(sys::AP_MPMQ_RUNNING as c_int);

    if was_graceful {
        parent.release_old_generation_once_new_accepts();
    }
    parent.main_loop();
    r.set_mpm_state(sys::AP_MPMQ_STOPPING as c_int);

    if r.shutdown_pending() != 0 {
        return parent.stop();
    }

    // Restart (graceful or not).
    parent.note_size_for_takeover();
    r.set_my_generation(r.my_generation() + 1);
    scoreboard::set_running_generation(r.my_generation());
    if r.is_ungraceful() != 0 {
        parent.signal_children(PodMessage::Restart);
        process::reclaim_children(token, true);
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
        parent.keep_old_generation_accepting();
    }
    // A stop that arrived while we reaped would be wiped with pconf (unixd clears the
    // flags when the generation's pool goes): honour it now instead of losing it.
    if r.shutdown_pending() != 0 {
        return parent.stop();
    }
    sys::OK as c_int
}

/// When a graceful stop stops waiting for in-flight requests (µs since the epoch, as
/// `now`): GracefulShutdownTimeout seconds after `now`; never for 0. A negative value cuts
/// at once, as in the stock MPMs (check_config warns about it: RW00043).
fn graceful_cutoff(now: i64, timeout_s: c_int) -> Option<i64> {
    (timeout_s != 0).then(|| now + i64::from(timeout_s.max(0)) * 1_000_000)
}

impl Parent {
    /// `-k stop` (SIGTERM) or `-k graceful-stop` (SIGWINCH): wind the children down and
    /// return DONE. Graceful: stop listening, let in-flight requests finish for up to
    /// GracefulShutdownTimeout (0 = no limit), then stop whatever is left.
    fn stop(&mut self) -> c_int {
        self.release_old_generation();
        let r = self.r;
        if r.is_ungraceful() != 0 {
            self.signal_children(PodMessage::Restart);
            process::reclaim_children(self.token, true);
            if !self.child_fatal {
                httpd::remove_pidfile(self.token, self.pconf);
                crate::mpm_log!(level::NOTICE, 0, "AH00295: caught SIGTERM, shutting down");
            }
            return sys::DONE;
        }
        listen::close_all_listeners();
        self.signal_children(PodMessage::Graceful);
        process::relieve_children(self.token);
        if !self.child_fatal {
            httpd::remove_pidfile(self.token, self.pconf);
            crate::mpm_log!(
                level::NOTICE,
                0,
                "AH00296: caught SIGWINCH, shutting down gracefully"
            );
        }
        let cutoff = graceful_cutoff(httpd::time_now(), httpd::graceful_shutdown_timeout());
        // A later SIGTERM cuts the wait short.
        r.set_shutdown_pending(0);
        loop {
            thread::sleep(Duration::from_millis(100));
            process::relieve_children(self.token);
            if !self.any_child_alive()
                || r.shutdown_pending() != 0
                || cutoff.is_some_and(|c| httpd::time_now() > c)
            {
                break;
            }
        }
        self.signal_children(PodMessage::Restart);
        process::reclaim_children(self.token, true);
        sys::DONE
    }

    fn signal_children(&self, how: PodMessage) {
        let slots = settings::get()
            .daemons_limit
            .max(self.r.max_daemons_limit());
        mpm_listen::buckets().signal_all(slots, how);
    }

    fn any_child_alive(&self) -> bool {
        (0..self.r.max_daemons_limit().max(0))
            .any(|i| process::is_alive(scoreboard::process(i).pid))
    }

    fn main_loop(&mut self) {
        let r = self.r;
        // A child's exit ends the wait at once (SIGCHLD), so its slot is free for a
        // replacement within milliseconds: after a graceful restart without room in the
        // scoreboard, each old child that leaves makes way for a new one.
        let exits = signal::ChildExits::watch();
        if let Some(errno) = exits.error() {
            crate::mpm_log!(
                level::WARNING,
                errno,
                "RW00048: could not create the parent's child-exit eventfd; an exit may be noticed up to a second late"
            );
        }
        // So does a child that begins to retire, ringing the parent's bell.
        let bell = r.parent_bell().and_then(|fd| {
            // SAFETY: ensure_parent_bell made `fd`, an eventfd open until exit.
            unsafe { WakeFd::duplicate(fd) }.ok()
        });
        // Maintenance keeps its cadence however often the wait is cut short.
        let mut next_maintenance = Instant::now() + MAINTENANCE_EVERY;
        let mut cycles: u32 = 0;
        while r.shutdown_pending() == 0 && r.restart_pending() == 0 {
            let left = next_maintenance.saturating_duration_since(Instant::now());
            if let Some(exited) =
                process::wait_for_child(self.token, self.pconf, bell.as_ref(), &exits, left)
            {
                self.child_exited(exited);
                continue;
            }
            let retiring = bell.as_ref().map_or(0, WakeFd::take);
            if retiring > 0 {
                self.replace_retiring(retiring);
            }
            if Instant::now() < next_maintenance {
                continue;
            }
            next_maintenance = Instant::now() + MAINTENANCE_EVERY;
            // The monitor hooks about every 10 s, the core wait's pace in a quiet server.
            cycles = cycles.wrapping_add(1);
            if cycles % MONITOR_EVERY_CYCLES == 0 {
                process::run_monitor(self.token, self.pconf, self.s);
            }
            if self.takeover > 0 {
                self.start_owed_children();
            }
            r.set_signal_deaths_in_a_row(0);
            let nb = mpm_listen::buckets().num_buckets() as c_int;
            for b in 0..nb {
                if !self.idle_maintenance(b, nb) {
                    break;
                }
            }
        }
        // SIGCHLD's default action is back.
        drop(exits);
    }

    /// `bucket`'s census, looking for at most `spawn_rate` free slots, and the limits it is
    /// judged by.
    fn census(&self, bucket: c_int, nb: c_int, spawn_rate: c_int) -> (Census, Limits) {
        let st = settings::get();
        let scope = Scope {
            bucket,
            num_buckets: nb,
            daemons_limit: st.daemons_limit,
            max_daemons_limit: self.r.max_daemons_limit(),
            server_limit: scoreboard::slots(),
            spawn_rate,
            generation: self.r.my_generation(),
        };
        let limits = Limits {
            daemons_limit: st.daemons_limit,
            threads_per_child: st.threads_per_child,
            min_spare_threads: st.min_spare_threads,
            max_spare_threads: st.max_spare_threads,
            num_buckets: nb,
        };
        (census::take(&scope, st.threads_per_child), limits)
    }

    /// A child of this generation left `bucket` on its own (reaped just now): fork its
    /// replacement at once where the bucket is short of idle threads without it
    /// (`maintenance::replacement`). The stock worker waits for the next cycle, up to a
    /// second in which the child's share of new clients waits in the backlog; under
    /// MaxConnectionsPerChild that is every child's end.
    fn replace_retired(&mut self, pid: sys::pid_t, bucket: c_int) {
        let nb = mpm_listen::buckets().num_buckets() as c_int;
        if let Some((new, slot, census, limits)) =
            self.replace_if(bucket.max(0) % nb, maintenance::replacement)
        {
            crate::mpm_log!(
                level::DEBUG,
                0,
                "RW00045: child {pid} retired and left {} idle threads in its bucket, fewer than MinSpareThreads {} / {nb} bucket(s): child {new} replaces it in slot {slot} now",
                census.idle_threads,
                limits.min_spare_threads
            );
        }
    }

    /// `retiring` children rang the parent's bell: each stopped accepting to retire
    /// (MaxConnectionsPerChild) and may serve its last connections for long yet (downloads,
    /// keep-alive), its threads no longer counted as idle. A bucket left with no idle
    /// thread gets a replacement now rather than at the child's exit or the next cycle
    /// (`maintenance::replacement_at_retirement`); one fork per ring at most, so forks
    /// follow retirements (the bell does not say whose bucket). One fork per bucket does:
    /// the new child's threads count as idle from the fork on.
    fn replace_retiring(&mut self, retiring: u64) {
        let nb = mpm_listen::buckets().num_buckets() as c_int;
        let mut forks_left = retiring;
        for bucket in 0..nb {
            if forks_left == 0 {
                break;
            }
            if let Some((new, slot, _, limits)) =
                self.replace_if(bucket, maintenance::replacement_at_retirement)
            {
                forks_left -= 1;
                crate::mpm_log!(
                    level::DEBUG,
                    0,
                    "RW00047: a child retires and leaves no idle thread in bucket {bucket} (MinSpareThreads {} / {nb} bucket(s)): child {new} starts in slot {slot} now",
                    limits.min_spare_threads
                );
            }
        }
    }

    /// Forks one child into `bucket` where `decide` gives a slot: the new pid, its slot,
    /// and the census and limits that decided.
    fn replace_if(
        &mut self,
        bucket: c_int,
        decide: fn(&Census, &Limits) -> Option<c_int>,
    ) -> Option<(sys::pid_t, c_int, Census, Limits)> {
        let r = self.r;
        if r.shutdown_pending() != 0 || r.restart_pending() != 0 {
            return None;
        }
        let nb = mpm_listen::buckets().num_buckets() as c_int;
        let (census, limits) = self.census(bucket, nb, 1);
        let slot = decide(&census, &limits)?;
        let new = self.make_child(slot, bucket)?;
        Some((new, slot, census, limits))
    }

    /// One maintenance cycle for `bucket`: census, decision, action. Returns false when
    /// the server gives up (the remaining buckets are not looked at).
    fn idle_maintenance(&mut self, bucket: c_int, nb: c_int) -> bool {
        let r = self.r;
        let spawn_rate = r.spawn_rate(bucket as usize);
        let (census, limits) = self.census(bucket, nb, spawn_rate);
        let mut m = Memory {
            spawn_rate,
            hold_off: r.hold_off_on_exponential_spawning(),
            sick_child_detected: r.sick_child_detected() != 0,
            healthy_child_seen: r.healthy_child_seen() != 0,
            maxclients_reported: r.maxclients_reported() != 0,
            near_maxclients_reported: r.near_maxclients_reported() != 0,
            scoreboard_full_cycles: r.scoreboard_full_cycles(),
            file_limit_reported: r.file_limit_reported() != 0,
        };
        let d = maintenance::decide(&census, &limits, bucket == nb - 1, &mut m);
        r.set_spawn_rate(bucket as usize, m.spawn_rate);
        r.set_hold_off_on_exponential_spawning(m.hold_off);
        r.set_sick_child_detected(m.sick_child_detected as c_int);
        r.set_healthy_child_seen(m.healthy_child_seen as c_int);
        r.set_maxclients_reported(m.maxclients_reported as c_int);
        r.set_near_maxclients_reported(m.near_maxclients_reported as c_int);
        r.set_scoreboard_full_cycles(m.scoreboard_full_cycles);
        r.set_file_limit_reported(m.file_limit_reported as c_int);
        for line in &d.lines {
            log_line(line);
        }
        match d.action {
            Action::GiveUp => {
                r.set_shutdown_pending(1);
                self.child_fatal = true;
                return false;
            }
            Action::ShedOne => mpm_listen::buckets()
                .pod(bucket as usize)
                .signal(PodMessage::Graceful),
            Action::Spawn(slots) => {
                for slot in slots {
                    self.make_child(slot, bucket);
                }
            }
            Action::Wait => {}
        }
        // Never shrink: the core scans this many slots when reaping, and a quiescing
        // child may still sit above the last busy slot.
        r.set_max_daemons_limit(r.max_daemons_limit().max(census.last_non_dead + 1));
        true
    }
}

fn log_line(line: &Line) {
    match *line {
        Line::GiveUp => crate::mpm_log!(
            level::ALERT,
            0,
            "AH02325: A resource shortage or other unrecoverable failure was encountered before any child process initialized successfully... httpd is exiting!"
        ),
        // Debug level, as shedding is routine; it also explains the keep-alive connections
        // the shed child closes after their current request (the core's keep-alive loop
        // stops once the MPM state is STOPPING, as with the stock worker).
        Line::Shed {
            idle,
            parked,
            max_idle,
        } => crate::mpm_log!(
            level::DEBUG,
            0,
            "RW00004: {idle} idle threads, less {parked} parked connections, > MaxSpareThreads {max_idle}: one child exits gracefully"
        ),
        Line::AtFileLimit { children } => crate::mpm_log!(
            level::WARNING,
            0,
            "RW00041: {children} child(ren) hold as many connections as their open-file limit (RLIMIT_NOFILE, {} per process, as the parent set it) allows and accept no more until some close; new clients go to other children or wait; raise the limit (ulimit -n, or LimitNOFILE= under systemd)",
            process::open_files_limit()
        ),
        Line::MaxRequestWorkersReached => crate::mpm_log!(
            level::ERR,
            0,
            "AH00286: server reached MaxRequestWorkers setting, consider raising the MaxRequestWorkers setting"
        ),
        Line::NearMaxRequestWorkers => crate::mpm_log!(
            level::ERR,
            0,
            "AH00287: server is within MinSpareThreads of MaxRequestWorkers, consider raising the MaxRequestWorkers setting"
        ),
        Line::ScoreboardFull { persistent } => crate::mpm_log!(
            if persistent { level::ERR } else { level::DEBUG },
            0,
            "AH00288: scoreboard is full, not at MaxRequestWorkers{}",
            if persistent {
                " (slots are held by exiting children; consider raising ServerLimit)"
            } else {
                ""
            }
        ),
        Line::Busy { spawning, idle, active, children } => crate::mpm_log!(
            level::INFO,
            0,
            "AH00289: server seems busy, (you may need to increase StartServers, ThreadsPerChild or Min/MaxSpareThreads), spawning {spawning} children, there are around {idle} idle threads, {active} active threads, and {children} total children"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::graceful_cutoff;

    #[test]
    fn graceful_stop_cutoff_follows_graceful_shutdown_timeout() {
        let now = 1_000_000_000;
        assert_eq!(graceful_cutoff(now, 0), None, "0: no limit");
        assert_eq!(graceful_cutoff(now, 3), Some(now + 3_000_000));
        // Negative: at once (the stock MPMs' reading), not "no limit".
        assert_eq!(graceful_cutoff(now, -3), Some(now));
        assert_eq!(
            graceful_cutoff(now, i32::MAX),
            Some(now + i64::from(i32::MAX) * 1_000_000)
        );
    }
}
