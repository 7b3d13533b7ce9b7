//! The parent's side of child processes: fork, wait, the monitor hooks, the core's
//! exit-status processing, and reaping through the core's helpers, whose callback frees
//! the child's scoreboard slot and runs the child_status hooks.

use std::os::raw::c_int;
use std::time::Duration;

use crate::ffi::epoll::WakeFd;
use crate::ffi::httpd::{self, ChildStatus, ServerRec, SingleThreaded};
use crate::ffi::pool::ConfigPool;
use crate::ffi::scoreboard;
use crate::ffi::signal::ChildExits;
use crate::ffi::thread;
use crate::sys;

/// What `fork` gave the caller.
#[derive(Debug)]
pub enum Forked {
    /// We are the new child (APR's thread-current state already re-initialised, from
    /// httpd 2.4.53 on: older releases have none).
    Child,
    /// We are the parent of `pid`.
    Parent(sys::pid_t),
    /// fork failed with this errno.
    Failed(i32),
}

/// Forks. The parent runs no MPM threads and holds no Rust locks, so the child starts
/// from a consistent state.
pub fn fork(_: SingleThreaded) -> Forked {
    // Looked up here, so that the child only reads them.
    thread::httpd_thread_fns();
    // SAFETY: single-threaded parent (token), so no lock is held by a thread that would
    // be missing in the child.
    match unsafe { libc::fork() } {
        0 => {
            // The new child, before anything else uses APR's thread state.
            thread::current_after_fork();
            Forked::Child
        }
        pid if pid > 0 => Forked::Parent(pid),
        _ => Forked::Failed(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)),
    }
}

/// A child process that `wait_for_child` reaped.
#[derive(Debug)]
pub struct Exited {
    proc_: sys::apr_proc_t,
    why: sys::apr_exit_why_e,
    code: c_int,
}

/// The parent's wait: reaps a child that has exited, if one has; else waits until `bell`
/// is readable, a child exits (`exits`), another signal's handler runs or `timeout`
/// passes, and returns None. In place of `ap_wait_or_timeout`, whose sleep is always a
/// second (and which sleeps on through an exit that lands between its reap and its sleep).
pub fn wait_for_child(
    _: SingleThreaded,
    pconf: ConfigPool,
    bell: Option<&WakeFd>,
    exits: &ChildExits,
    timeout: Duration,
) -> Option<Exited> {
    // Before the reap: an exit from now on either is reaped below or rings again.
    exits.clear();
    let mut e = Exited {
        proc_: Default::default(),
        why: 0,
        code: 0,
    };
    // SAFETY: single-threaded parent (token); out-pointers are valid locals; pconf lives.
    let rv = unsafe {
        sys::apr_proc_wait_all_procs(
            &mut e.proc_,
            &mut e.code,
            &mut e.why,
            sys::apr_wait_how_e_APR_NOWAIT,
            pconf.as_ptr(),
        )
    };
    // SAFETY: plain call; it folds the children's counters into the global scoreboard row.
    unsafe { sys::ap_update_global_status() };
    if rv == sys::APR_CHILD_DONE as sys::apr_status_t {
        return Some(e);
    }
    if rv == libc::EINTR {
        // A signal came (a stop, a restart): the caller looks at once.
        return None;
    }
    let pollfd = |fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let mut fds = [pollfd(bell.map_or(-1, WakeFd::fd)), pollfd(exits.fd())];
    let ms = timeout.as_millis().min(c_int::MAX as u128) as c_int;
    // SAFETY: two valid pollfds (a negative fd is ignored by poll); EINTR is an answer.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if n > 0
        && fds
            .iter()
            .any(|f| f.revents & (libc::POLLNVAL | libc::POLLERR) != 0)
    {
        // A descriptor is gone (something closed ours): sleep, never spin.
        for f in fds.iter_mut() {
            f.fd = -1;
        }
        // SAFETY: as above.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    }
    None
}

/// Runs the monitor hooks (`ap_run_monitor`), as the core's wait does every tenth call.
pub fn run_monitor(_: SingleThreaded, pconf: ConfigPool, s: ServerRec) {
    // SAFETY: single-threaded parent (token); pconf and s live.
    unsafe { sys::ap_run_monitor(pconf.as_ptr(), s.as_ptr()) };
}

impl Exited {
    /// The pid.
    pub fn pid(&self) -> sys::pid_t {
        self.proc_.pid
    }

    /// A signal ended it (kill -9, the OOM killer, a crash).
    pub fn by_signal(&self) -> bool {
        self.why == sys::apr_exit_why_e_APR_PROC_SIGNAL
    }

    /// The core's verdict (`ap_process_child_status`, which logs signals and crashes):
    /// 0, `APEXIT_CHILDSICK` or `APEXIT_CHILDFATAL`.
    pub fn process_status(&mut self) -> c_int {
        // SAFETY: a reaped process record with its exit reason and code.
        unsafe { sys::ap_process_child_status(&mut self.proc_, self.why, self.code) }
    }

    /// The scoreboard slot the child held, if any.
    pub fn slot(&mut self) -> Option<c_int> {
        // SAFETY: a reaped process record; the call scans the scoreboard.
        let slot = unsafe { sys::ap_find_child_by_pid(&mut self.proc_) };
        (slot >= 0).then_some(slot)
    }

    /// Tells APR's other-child registry (piped loggers…); true when one owned it.
    pub fn other_child_alert(&mut self) -> bool {
        // SAFETY: a reaped process record; registered owners handle their own child.
        unsafe {
            sys::apr_proc_other_child_alert(
                &mut self.proc_,
                sys::APR_OC_REASON_DEATH as c_int,
                self.code,
            ) == 0
        }
    }
}

/// A child is gone: free its slot and run the child_status hooks (the core calls this
/// while reaping, and the parent after `wait_for_child`).
pub fn note_child_gone(slot: c_int) {
    let ps = scoreboard::process(slot);
    httpd::run_child_status(ps.pid, ps.generation, slot, ChildStatus::Exited);
    scoreboard::free_slot(slot);
}

unsafe extern "C" fn reaped(slot: c_int, pid: sys::pid_t, generation: sys::ap_generation_t) {
    let _place = crate::ffi::panic::enter("the parent, reaping children");
    if slot >= 0 {
        note_child_gone(slot);
    } else {
        httpd::run_child_status(pid, generation, -1, ChildStatus::Exited);
    }
}

/// Reaps every child: waits, then signals escalating to SIGKILL when `terminate`
/// (`ap_reclaim_child_processes`).
pub fn reclaim_children(_: SingleThreaded, terminate: bool) {
    // SAFETY: single-threaded parent (token); our callback matches the core's type.
    unsafe { sys::ap_reclaim_child_processes(terminate as c_int, Some(reaped)) };
}

/// Reaps the children that have already exited (`ap_relieve_child_processes`).
pub fn relieve_children(_: SingleThreaded) {
    // SAFETY: as above.
    unsafe { sys::ap_relieve_child_processes(Some(reaped)) };
}

/// Keeps reaping `pid` (of `generation`) as an extra process after it lost its slot.
pub fn register_extra_process(
    _: SingleThreaded,
    pid: sys::pid_t,
    generation: sys::ap_generation_t,
) {
    // SAFETY: single-threaded parent (token); plain values.
    unsafe { sys::ap_register_extra_mpm_process(pid, generation) };
}

/// If `pid` was an extra process, forgets it and returns its generation.
pub fn unregister_extra_process(
    _: SingleThreaded,
    pid: sys::pid_t,
) -> Option<sys::ap_generation_t> {
    let mut generation = 0;
    // SAFETY: single-threaded parent (token); valid out-pointer.
    (unsafe { sys::ap_unregister_extra_mpm_process(pid, &mut generation) } == 1)
        .then_some(generation)
}

/// Whether `pid` (a child of ours) still exists.
pub fn is_alive(pid: sys::pid_t) -> bool {
    // SAFETY: signal 0 only checks existence; ap_mpm_safe_kill refuses pids outside our
    // process group.
    pid != 0 && unsafe { sys::ap_mpm_safe_kill(pid, 0) } == 0
}

/// Ends the process with `code`, running C's atexit handlers (APR's pool teardown), as
/// the stock MPM does.
pub fn exit(code: c_int) -> ! {
    // SAFETY: exit(3); the MPM's threads were joined or never started.
    unsafe { libc::exit(code) }
}

/// The soft limit on open descriptors (RLIMIT_NOFILE), `u64::MAX` when unlimited or unknown.
pub fn open_files_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0
        || r.rlim_cur == libc::RLIM_INFINITY
    {
        return u64::MAX;
    }
    r.rlim_cur
}

/// The soft and hard limits on open descriptors (RLIMIT_NOFILE; `u64::MAX` for
/// unlimited), or None when they cannot be read.
pub fn open_files_limits() -> Option<(u64, u64)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return None;
    }
    let unlimited = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            u64::MAX
        } else {
            v
        }
    };
    Some((unlimited(r.rlim_cur), unlimited(r.rlim_max)))
}

/// Sets the soft limit on open descriptors to `soft` (at most the hard limit, which is
/// left as it is). Errors: errno.
pub fn set_open_files_soft_limit(soft: u64) -> Result<(), i32> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        r.rlim_cur = soft as libc::rlim_t;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
    }
    Ok(())
}

/// The kernel's ceiling for any process's open-file limit (`fs.nr_open`), if readable.
pub fn kernel_open_files_ceiling() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Descriptors this process has open now (entries of /proc/self/fd, less the one that
/// reading the directory opens), if readable.
pub fn descriptors_in_use() -> Option<u64> {
    let n = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(n.saturating_sub(1))
}
