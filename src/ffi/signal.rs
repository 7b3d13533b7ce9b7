//! Signals as the MPM uses them: handlers that only interrupt a blocking call (no
//! SA_RESTART, through `apr_signal`), per-thread masks, one latch for SIGTERM, and
//! signalling one thread of the process.
//!
//! Every handler installed here is async-signal-safe: it does nothing, stores one
//! atomic, writes to an eventfd (saving errno), or calls `_exit`.

use std::os::raw::c_int;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::ffi::epoll::WakeFd;
use crate::sys;

/// Set by the SIGTERM handler that [`latch_parents_sigterm`] installs.
static SIGTERM_SEEN: AtomicBool = AtomicBool::new(false);

extern "C" fn do_nothing(_sig: c_int) {}

extern "C" fn note_parents_sigterm(
    _sig: c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler; si_pid is
    // defined for a signal sent by kill(2), and getppid is async-signal-safe.
    let from_parent = !info.is_null() && unsafe { (*info).si_pid() == libc::getppid() };
    if from_parent {
        // Relaxed: the flag carries no data; the thread that tests it re-reads everything
        // it acts on through its own synchronisation.
        SIGTERM_SEEN.store(true, Ordering::Relaxed);
    }
}

extern "C" fn exit_now(_sig: c_int) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(0) }
}

fn install(sig: c_int, handler: extern "C" fn(c_int)) {
    // SAFETY: apr_signal installs a handler without SA_RESTART (so blocking calls see
    // EINTR); every handler of this module is async-signal-safe. The transmute only adds
    // `unsafe` to the function pointer's type.
    unsafe {
        sys::apr_signal(
            sig,
            Some(std::mem::transmute::<
                extern "C" fn(c_int),
                unsafe extern "C" fn(c_int),
            >(handler)),
        );
    }
}

/// `sig` interrupts blocking calls in the threads that have it unblocked, and does
/// nothing else.
pub fn interrupt_only(sig: c_int) {
    install(sig, do_nothing);
}

/// `sig` ends the process at once with status 0 (a child before its threads exist).
pub fn exit_on(sig: c_int) {
    install(sig, exit_now);
}

/// SIGTERM from the parent process sets a latch that [`take_sigterm`] reads and clears;
/// from anyone else it only interrupts (a stray `kill` of a child, which the stock worker
/// ignores, must not cut the connections a retiring child still serves).
pub fn latch_parents_sigterm() {
    // SAFETY: a zeroed sigaction is valid once its fields are set; the handler is
    // async-signal-safe; no SA_RESTART, so blocking calls see EINTR.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = note_parents_sigterm
            as extern "C" fn(c_int, *mut libc::siginfo_t, *mut libc::c_void)
            as libc::sighandler_t;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGTERM, &sa, ptr::null_mut());
    }
}

/// Whether SIGTERM arrived since the last call (clears the latch).
pub fn take_sigterm() -> bool {
    // Relaxed: see note_sigterm.
    SIGTERM_SEEN.swap(false, Ordering::Relaxed)
}

/// The parent's child-exit eventfd, made by the first [`ChildExits::watch`] and open for
/// the rest of the process (a thread that a module runs in the parent may be inside the
/// handler at any moment, so the descriptor is never closed). Forked children inherit it
/// and never use it.
static CHILD_EXIT_BELL: OnceLock<Result<WakeFd, i32>> = OnceLock::new();

extern "C" fn ring_child_exit_bell(_sig: c_int) {
    // OnceLock::get is one atomic load, no lock: async-signal-safe. The bell is made
    // before the handler is first installed.
    if let Some(Ok(bell)) = CHILD_EXIT_BELL.get() {
        // SAFETY: errno's location is async-signal-safe to read and write; errno is put
        // back around the write(2), so the interrupted code sees its own.
        let errno = unsafe { *libc::__errno_location() };
        bell.signal();
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
    }
}

/// The parent, while it waits for its children: SIGCHLD rings an eventfd (the self-pipe
/// way) and interrupts a blocking call, so an exit that lands between a reap and the wait
/// that follows ends the wait too. The zombie stays for the parent to reap, unlike with
/// SIG_IGN. SIGCHLD's default action comes back when this is dropped.
#[derive(Debug)]
pub struct ChildExits {
    bell: &'static Result<WakeFd, i32>,
}

impl ChildExits {
    /// Installs the handler (the parent's thread only, which forks no children meanwhile).
    pub fn watch() -> ChildExits {
        let bell = CHILD_EXIT_BELL.get_or_init(WakeFd::new);
        // SAFETY: the handler is async-signal-safe (see ring_child_exit_bell). The flags
        // are apr_signal's for SIGCHLD (no SA_RESTART, so a blocking call sees EINTR;
        // SA_NOCLDSTOP), set here rather than through `install` so that the unit test
        // runs without APR.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = ring_child_exit_bell as extern "C" fn(c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_NOCLDSTOP;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGCHLD, &sa, ptr::null_mut());
        }
        ChildExits { bell }
    }

    /// Why there is no eventfd (errno): an exit that lands between a reap and the wait
    /// is then noticed when the wait times out.
    pub fn error(&self) -> Option<i32> {
        self.bell.as_ref().err().copied()
    }

    /// Readable since the last [`ChildExits::clear`] if a child exited (poll it); -1 if
    /// there is no eventfd.
    pub fn fd(&self) -> c_int {
        self.bell.as_ref().map_or(-1, WakeFd::fd)
    }

    /// Forgets the exits rung so far: call it before looking for exited children.
    pub fn clear(&self) {
        if let Ok(b) = self.bell {
            b.clear();
        }
    }
}

impl Drop for ChildExits {
    fn drop(&mut self) {
        default_action(libc::SIGCHLD);
    }
}

/// Puts `sig`'s default action back (a forked child drops the parent's handlers).
pub fn default_action(sig: c_int) {
    // SAFETY: SIG_DFL is a valid disposition for any catchable signal.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
    }
}

/// Unblocks `sig` for the calling thread only.
pub fn unblock_for_this_thread(sig: c_int) {
    // SAFETY: plain signal-mask manipulation on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, ptr::null_mut());
    }
}

/// Waits until one of `fds` is readable or hung up, `timeout` passes (None: no limit), or
/// a signal interrupts, with `sig` unblocked for the wait only (ppoll(2)); fills each
/// `revents` and returns how many are set (0: time is up, or interrupted). A thread that
/// keeps `sig` blocked outside such waits misses none: a `sig` sent while it ran is
/// pending and interrupts the next wait as it begins, where with `sig` unblocked it would
/// have run its handler just before the wait, and the wait would not see it.
pub fn poll_unblocking(
    sig: c_int,
    fds: &mut [libc::pollfd],
    timeout: Option<std::time::Duration>,
) -> usize {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    // SAFETY: the sets are locals; fds is an exclusively borrowed pollfd array of this
    // length; the timespec, if any, is a local.
    let n = unsafe {
        let mut during: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_SETMASK, ptr::null(), &mut during);
        libc::sigdelset(&mut during, sig);
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            ts.as_ref()
                .map_or(ptr::null(), |t| t as *const libc::timespec),
            &during,
        )
    };
    if n < 0 {
        for p in fds.iter_mut() {
            p.revents = 0;
        }
    }
    n.max(0) as usize
}

/// Blocks every asynchronous signal in the calling thread, so threads created from now
/// on inherit the blocked mask (`apr_setup_signal_thread`).
pub fn block_all_in_this_thread() {
    // SAFETY: plain APR call, made before the child creates threads.
    unsafe { sys::apr_setup_signal_thread() };
}

/// Waits until SIGTERM or SIGINT arrives (all signals must be blocked in this thread).
pub fn wait_for_sigterm_or_sigint() {
    unsafe extern "C" fn check(signum: c_int) -> c_int {
        (signum == libc::SIGTERM || signum == libc::SIGINT) as c_int
    }
    // SAFETY: apr_signal_thread sigwaits in this thread with our pure callback.
    unsafe { sys::apr_signal_thread(Some(check)) };
}

/// A thread of this process, as the kernel knows it, for [`OsThread::signal`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OsThread(libc::pthread_t);

impl OsThread {
    /// The calling thread.
    pub fn current() -> OsThread {
        // SAFETY: trivially safe libc call.
        OsThread(unsafe { libc::pthread_self() })
    }

    /// The raw value, to keep in an atomic.
    pub fn to_raw(self) -> usize {
        self.0 as usize
    }

    /// Rebuilds a value that [`OsThread::to_raw`] gave.
    pub fn from_raw(raw: usize) -> OsThread {
        OsThread(raw as libc::pthread_t)
    }

    /// Sends `sig` to the thread.
    ///
    /// # Safety
    /// The thread is a joinable thread of this process that has not been joined yet (its
    /// id is valid until then, even after it returned).
    pub unsafe fn signal(self, sig: c_int) {
        // SAFETY: the id is valid (caller).
        unsafe { libc::pthread_kill(self.0, sig) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_exit_rings_the_watch_before_any_reap() {
        let exits = ChildExits::watch();
        assert_eq!(exits.error(), None);
        exits.clear();
        // SAFETY: the child only calls _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: async-signal-safe, right after fork.
            unsafe { libc::_exit(0) }
        }
        assert!(pid > 0, "fork failed");
        let mut fd = libc::pollfd {
            fd: exits.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // Whichever thread the handler ran on, the eventfd is readable (poll may see EINTR
        // first, on this thread).
        let ready = loop {
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut fd, 1, 10_000) };
            if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break n == 1;
            }
        };
        let mut status = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        drop(exits);
        assert!(ready, "no ring within 10 s of the child's exit");
    }
}
