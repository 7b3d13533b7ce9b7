//! A child process: set-up after fork (scoreboard, privileges, signals, child_init),
//! the starter that creates ThreadsPerChild worker threads plus the listener, the
//! main thread's wait on the pipe of death, and graceful or immediate shutdown
//! (worker.c `child_main`, `start_threads`, `signal_threads`, `join_workers`).
//!
//! Thread roles and signal masks: every thread starts with all asynchronous signals
//! blocked (`apr_setup_signal_thread`); the main thread unblocks SIGTERM (the parent's
//! reaper and the listener's "please stop" nudge), the listener unblocks SIGHUP (to
//! break a blocking accept or poll), workers unblock SIGUSR1 (to break a keep-alive
//! read on an immediate stop). The handlers do nothing but interrupt: no SA_RESTART.

use std::ffi::c_void;
use std::os::raw::c_int;
use std::ptr;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

use crate::apr::log::level;
use crate::apr::pool::Pool;
use crate::apr::thread;
use crate::mpm::config::settings;
use crate::mpm::handoff::Handoff;
use crate::mpm::module::generation;
use crate::mpm::scoreboard::{self, status};
use crate::mpm::{listener, retained, worker};
use crate::sys;

/// The signal that interrupts the listener's accept/poll.
pub const LISTENER_SIGNAL: c_int = libc::SIGHUP;
/// The signal that interrupts a worker's blocking read on an immediate stop.
pub const WORKER_SIGNAL: c_int = libc::SIGUSR1;

/// How the child is asked to stop (`terminate_mode` in worker.c).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum StopMode {
    /// Keep serving.
    None = 0,
    /// Stop accepting, finish queued and in-flight connections, then exit.
    Graceful = 1,
    /// Stop now: in-flight connections are cut.
    Ungraceful = 2,
}

/// An accepted connection on its way from the listener to a worker: the client socket
/// and the transaction pool it was accepted into (both owned by whoever holds this).
pub struct Accepted {
    /// The client socket, allocated in `ptrans`.
    pub sock: *mut sys::apr_socket_t,
    /// The connection's transaction pool.
    pub ptrans: Pool,
}

// SAFETY: an accepted socket and its pool are used by one thread at a time; the
// fdqueue's release/acquire hand-off orders the listener's writes before the worker's use.
unsafe impl Send for Accepted {}

/// One worker thread's entry in the child (not shared memory).
pub struct WorkerEntry {
    /// The APR thread, set by the starter once created (null until then).
    pub thread: std::sync::atomic::AtomicPtr<sys::apr_thread_t>,
    /// Its pthread, for WORKER_SIGNAL (0 until the thread runs).
    pub os_thread: AtomicUsize,
    /// The client socket's descriptor while a connection is served, else -1: an
    /// immediate stop shuts it down from the main thread.
    pub fd: AtomicI32,
}

/// Everything the threads of one child share. Created once per child before any
/// thread starts and never freed (the child ends with `exit`).
pub struct ChildRuntime {
    /// Scoreboard process slot.
    pub slot: c_int,
    /// Listener bucket this child serves.
    pub bucket: c_int,
    /// MPM generation this child belongs to.
    pub generation: sys::ap_generation_t,
    /// Listener → worker hand-off: fdqueue (capacity ThreadsPerChild) and queue_info
    /// (idle workers, recycled ptrans), as chosen by RWorkerQueue.
    pub handoff: Handoff,
    /// This bucket's listening sockets.
    pub listeners: Vec<*mut sys::ap_listen_rec>,
    /// Cross-process accept mutex, null when this bucket has one listener.
    pub accept_mutex: *mut sys::apr_proc_mutex_t,
    /// The generation's config pool; transaction pools are created under it.
    pub pconf: *mut sys::apr_pool_t,
    /// Child-lifetime pool (cleanups run at exit).
    pub pchild: Pool,
    /// Pool for thread structures.
    pub pruntime: Pool,
    /// Thread attributes (joinable, ThreadStackSize).
    pub thread_attr: *mut sys::apr_threadattr_t,
    /// Set once the listener must leave its loop.
    pub listener_may_exit: AtomicBool,
    /// Set on an immediate stop: workers drop queued connections and exit.
    pub workers_may_exit: AtomicBool,
    /// Set by the starter thread's owner: stop creating threads.
    pub start_thread_may_exit: AtomicBool,
    /// Set by the listener when it has left its loop (worker.c `dying`).
    pub dying: AtomicBool,
    /// The strongest StopMode requested so far.
    pub terminate_mode: AtomicU8,
    /// Connections this child may still accept (MaxConnectionsPerChild); i64::MAX if unlimited.
    pub connections_left: AtomicI64,
    /// A thread could not be created or accept failed hard: exit with APEXIT_CHILDSICK.
    pub resource_shortage: AtomicBool,
    /// The listener's pthread (0 until it runs).
    pub listener_os_thread: AtomicUsize,
    /// The listener's APR thread, set by the starter.
    pub listener_thread: std::sync::atomic::AtomicPtr<sys::apr_thread_t>,
    /// One entry per worker thread (ThreadsPerChild).
    pub workers: Vec<WorkerEntry>,
    /// Worker threads running now.
    pub live_workers: AtomicUsize,
    /// Transaction pools created (the recycled stack was empty).
    pub ptrans_created: AtomicU64,
    /// Transaction pools taken from the recycled stack.
    pub ptrans_reused: AtomicU64,
    /// Connections handed to workers.
    pub connections: AtomicU64,
    /// child_stopping hook already ran.
    stopping_ran: AtomicBool,
}

// SAFETY: the raw pointers are to APR objects that live for the child's lifetime and
// are used under APR's own rules (listeners only by the listener thread, the mutex by
// the listener, pools as documented); everything mutable is atomic.
unsafe impl Sync for ChildRuntime {}
// SAFETY: see Sync; the runtime is created before threads and only shared by reference.
unsafe impl Send for ChildRuntime {}

static GOT_SIGTERM: AtomicBool = AtomicBool::new(false);

extern "C" fn interrupt_only(_sig: c_int) {}

extern "C" fn note_sigterm(_sig: c_int) {
    // Async-signal-safe: one atomic store.
    GOT_SIGTERM.store(true, Ordering::SeqCst);
}

extern "C" fn die_now(_sig: c_int) {
    // Before threads exist there is nothing to wind down.
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(0) }
}

fn set_signal(sig: c_int, handler: extern "C" fn(c_int)) {
    // SAFETY: apr_signal installs a handler without SA_RESTART (so blocking calls see
    // EINTR); our handlers are async-signal-safe.
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

impl ChildRuntime {
    /// The current stop mode.
    pub fn stop_mode(&self) -> StopMode {
        match self.terminate_mode.load(Ordering::SeqCst) {
            0 => StopMode::None,
            1 => StopMode::Graceful,
            _ => StopMode::Ungraceful,
        }
    }

    /// Asks the main thread to stop the child (from the listener or starter, e.g. on
    /// MaxConnectionsPerChild or a fatal accept error): records the mode and nudges the
    /// main thread out of its pipe-of-death read with SIGTERM.
    pub fn request_stop(&self, mode: StopMode) {
        self.terminate_mode.fetch_max(mode as u8, Ordering::SeqCst);
        // SAFETY: only the main thread has SIGTERM unblocked; note_sigterm runs there.
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    }

    /// Wakes the listener wherever it blocks: waiting for an idle worker (queue_info
    /// term), in accept or poll (LISTENER_SIGNAL).
    fn wake_listener(&self) {
        self.listener_may_exit.store(true, Ordering::SeqCst);
        self.handoff.term_idlers();
        let t = self.listener_os_thread.load(Ordering::SeqCst);
        if t != 0 && !self.dying.load(Ordering::SeqCst) {
            // SAFETY: the listener thread is joinable and not yet joined, so its pthread_t is valid.
            unsafe { libc::pthread_kill(t as libc::pthread_t, LISTENER_SIGNAL) };
        }
    }

    /// Moves the child towards `mode` (worker.c `signal_threads`); idempotent per mode.
    fn signal_threads(&self, mode: StopMode) {
        let before = self.terminate_mode.fetch_max(mode as u8, Ordering::SeqCst);
        if let Some(r) = retained::get() {
            r.mpm().mpm_state = sys::AP_MPMQ_STOPPING as c_int;
        }
        self.wake_listener();
        if mode == StopMode::Ungraceful {
            self.workers_may_exit.store(true, Ordering::SeqCst);
            self.handoff.interrupt_all();
            for w in &self.workers {
                let fd = w.fd.load(Ordering::SeqCst);
                if fd >= 0 {
                    // Cut the connection under the worker: its read/write returns at once.
                    // SAFETY: shutdown(2) only; the worker clears `fd` before its lingering
                    // close releases the descriptor, so at worst this races that close by a
                    // few instructions and hits a reused number with ENOTSOCK or a socket
                    // that an immediate stop cuts anyway.
                    unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
                }
                let t = w.os_thread.load(Ordering::SeqCst);
                if t != 0 {
                    // SAFETY: worker threads are joinable and joined only after this.
                    unsafe { libc::pthread_kill(t as libc::pthread_t, WORKER_SIGNAL) };
                }
            }
        }
        if before < StopMode::Graceful as u8 || mode == StopMode::Ungraceful {
            self.run_child_stopping(mode == StopMode::Graceful);
        }
    }

    fn run_child_stopping(&self, graceful: bool) {
        if !self.stopping_ran.swap(true, Ordering::SeqCst) {
            // SAFETY: pchild is live; hook callers are modules' own code.
            unsafe { sys::ap_run_child_stopping(self.pchild.as_ptr(), graceful as c_int) };
        }
    }
}

/// Ends the child: child_stopping (if not yet), pchild's cleanups, `exit(code)`.
fn clean_exit(rt: Option<&ChildRuntime>, pchild: Option<Pool>, code: c_int) -> ! {
    if let Some(rt) = rt {
        rt.run_child_stopping(code == 0);
    }
    // SAFETY: all MPM threads were joined (or never started); exit runs C atexit
    // handlers as the stock MPM does.
    unsafe {
        if let Some(p) = pchild {
            p.destroy();
        }
        if settings().one_process {
            // -X: the slot was never registered with a pid; free it as the reaper would.
            // (The pidfile stays: privileges are dropped, as with the stock MPM.)
            let ps = scoreboard::process(0);
            ps.pid = 0;
            ps.quiescing = 0;
        }
        libc::exit(code)
    }
}

/// The child's entry point after fork (or the parent itself with `-X`). Never returns.
///
/// # Safety
/// Called once per process, in the freshly forked child (or the one-process parent),
/// before any MPM thread exists.
pub unsafe fn main(slot: c_int, bucket: c_int) -> ! {
    let st = *settings();
    let g = generation();
    // SAFETY: single-threaded here; the parent created the block before forking (in -X
    // mode this is the parent).
    let r = unsafe { retained::get_or_create() };
    let m = r.mpm();
    m.mpm_state = sys::AP_MPMQ_STARTING as c_int;
    if !st.one_process {
        set_signal(libc::SIGTERM, die_now);
    }

    // SAFETY (whole block): fresh child, single-threaded; all pointers come from the
    // generation set up by open_logs, inherited across fork.
    let (pchild, accept_mutex) = unsafe {
        sys::ap_fatal_signal_child_setup(sys::ap_server_conf);
        let pchild = match Pool::create_sub(g.pconf, c"pchild") {
            Ok(p) => p,
            Err(rv) => {
                crate::mpm_log!(level::EMERG, rv, "RW00002: could not create the child pool");
                clean_exit(None, None, sys::APEXIT_CHILDFATAL as c_int)
            }
        };
        if !st.one_process {
            let mut thd = ptr::null_mut();
            sys::ap_thread_main_create(&mut thd, pchild.as_ptr());
        }
        // Keep only this bucket's listeners and pipe of death.
        for b in 0..g.num_buckets {
            if b != bucket {
                sys::ap_close_listeners_ex(*g.listen_buckets.add(b as usize));
                sys::ap_mpm_podx_close(*g.pods.add(b as usize));
            }
        }
        sys::ap_reopen_scoreboard(pchild.as_ptr(), ptr::null_mut(), 0);

        let mut mutex = *g.accept_mutexes.add(bucket as usize);
        if !mutex.is_null() {
            let rv = sys::apr_proc_mutex_child_init(
                &mut mutex,
                sys::apr_proc_mutex_lockfile(mutex),
                pchild.as_ptr(),
            );
            if rv != 0 {
                crate::mpm_log!(
                    level::EMERG,
                    rv,
                    "AH00280: Couldn't initialize cross-process lock in child"
                );
                clean_exit(None, Some(pchild), sys::APEXIT_CHILDFATAL as c_int);
            }
        }
        // Lose root before any thread exists, then block async signals so every
        // thread created later (ours and modules') inherits the blocked mask.
        if sys::ap_run_drop_privileges(pchild.as_ptr(), sys::ap_server_conf) != 0 {
            clean_exit(None, Some(pchild), sys::APEXIT_CHILDFATAL as c_int);
        }
        sys::apr_setup_signal_thread();
        sys::ap_run_child_init(pchild.as_ptr(), sys::ap_server_conf);
        (pchild, mutex)
    };

    let rt = match build_runtime(slot, bucket, pchild, accept_mutex) {
        Ok(rt) => rt,
        Err(rv) => {
            crate::mpm_log!(
                level::ALERT,
                rv,
                "RW00003: could not set up the child's threads runtime"
            );
            clean_exit(None, Some(pchild), sys::APEXIT_CHILDFATAL as c_int)
        }
    };

    set_signal(LISTENER_SIGNAL, interrupt_only);
    set_signal(WORKER_SIGNAL, interrupt_only);

    // SAFETY: attr and pruntime live until exit; rt is leaked ('static).
    let starter = match thread::spawn(
        rt.thread_attr,
        rt.pruntime.as_ptr(),
        start_threads,
        rt as *const ChildRuntime as *mut c_void,
    ) {
        Ok(t) => t,
        Err(rv) => {
            crate::mpm_log!(
                level::ALERT,
                rv,
                "AH00282: ap_thread_create: unable to create worker thread"
            );
            // SAFETY: no thread of ours runs; pchild is ours to destroy.
            clean_exit(Some(rt), Some(pchild), sys::APEXIT_CHILDSICK as c_int)
        }
    };
    m.mpm_state = sys::AP_MPMQ_RUNNING as c_int;

    let mode = if st.one_process {
        wait_one_process()
    } else {
        wait_for_stop(rt, bucket)
    };

    // Stop creating threads first, so the set of threads to join is final.
    rt.start_thread_may_exit.store(true, Ordering::SeqCst);
    // SAFETY: the starter was created joinable above and is joined once.
    unsafe { thread::join(starter) };
    rt.signal_threads(mode);
    join_threads(rt, mode);

    crate::mpm_log!(
        level::DEBUG,
        0,
        "RW00010: child {} (slot {}) exiting: {} connections, ptrans created {}, reused from the recycled stack {}",
        std::process::id(),
        slot,
        rt.connections.load(Ordering::Relaxed),
        rt.ptrans_created.load(Ordering::Relaxed),
        rt.ptrans_reused.load(Ordering::Relaxed)
    );
    let code = if rt.resource_shortage.load(Ordering::SeqCst) {
        sys::APEXIT_CHILDSICK as c_int
    } else {
        0
    };
    clean_exit(Some(rt), Some(pchild), code)
}

fn build_runtime(
    slot: c_int,
    bucket: c_int,
    pchild: Pool,
    accept_mutex: *mut sys::apr_proc_mutex_t,
) -> Result<&'static ChildRuntime, i32> {
    let st = *settings();
    let g = generation();
    let tpc = st.threads_per_child.max(1) as usize;
    // SAFETY: pconf is the generation's live config pool, inherited across fork.
    let pruntime = unsafe { Pool::create_sub(g.pconf, c"mpm_runtime")? };
    // SAFETY: reading ap_thread_stacksize, set by core's ThreadStackSize directive.
    let stack = unsafe { sys::ap_thread_stacksize };
    // SAFETY: pruntime lives until the child exits, after every thread was joined.
    let thread_attr = unsafe { thread::joinable_attr(pruntime.as_ptr(), stack)? };

    let mut listeners = Vec::new();
    // SAFETY: the bucket's listener list was built by ap_duplicate_listeners in pconf.
    unsafe {
        let mut lr = *g.listen_buckets.add(bucket as usize);
        while !lr.is_null() {
            (*lr).accept_func = Some(sys::ap_unixd_accept);
            listeners.push(lr);
            lr = (*lr).next;
        }
    }
    // SAFETY: reading core's MaxConnectionsPerChild.
    let max_conns = unsafe { sys::ap_max_requests_per_child };
    let generation = retained::get().map_or(0, |r| r.mpm().my_generation);
    let rt = Box::new(ChildRuntime {
        slot,
        bucket,
        generation,
        handoff: Handoff::new(st.queue, tpc, pruntime)?,
        listeners,
        accept_mutex,
        pconf: g.pconf,
        pchild,
        pruntime,
        thread_attr,
        listener_may_exit: AtomicBool::new(false),
        workers_may_exit: AtomicBool::new(false),
        start_thread_may_exit: AtomicBool::new(false),
        dying: AtomicBool::new(false),
        terminate_mode: AtomicU8::new(StopMode::None as u8),
        connections_left: AtomicI64::new(if max_conns > 0 {
            max_conns as i64
        } else {
            i64::MAX
        }),
        resource_shortage: AtomicBool::new(false),
        listener_os_thread: AtomicUsize::new(0),
        listener_thread: std::sync::atomic::AtomicPtr::new(ptr::null_mut()),
        workers: (0..tpc)
            .map(|_| WorkerEntry {
                thread: std::sync::atomic::AtomicPtr::new(ptr::null_mut()),
                os_thread: AtomicUsize::new(0),
                fd: AtomicI32::new(-1),
            })
            .collect(),
        live_workers: AtomicUsize::new(0),
        ptrans_created: AtomicU64::new(0),
        ptrans_reused: AtomicU64::new(0),
        connections: AtomicU64::new(0),
        stopping_ran: AtomicBool::new(false),
    });
    Ok(Box::leak(rt))
}

/// `-X`: the parent serves; wait for SIGTERM or SIGINT (Ctrl-C) and stop immediately.
fn wait_one_process() -> StopMode {
    unsafe extern "C" fn check_signal(signum: c_int) -> c_int {
        (signum == libc::SIGTERM || signum == libc::SIGINT) as c_int
    }
    // SAFETY: all signals are blocked in this thread (apr_setup_signal_thread), so
    // apr_signal_thread's sigwait sees them.
    unsafe { sys::apr_signal_thread(Some(check_signal)) };
    StopMode::Ungraceful
}

/// The main thread's wait: read the pipe of death; SIGTERM (the parent's reaper, or
/// the listener's nudge) interrupts the read.
fn wait_for_stop(rt: &ChildRuntime, bucket: c_int) -> StopMode {
    set_signal(libc::SIGTERM, note_sigterm);
    unblock_for_this_thread(libc::SIGTERM);
    let pod = generation().pods;
    loop {
        // SAFETY: this bucket's pod, kept open in the child.
        let rv = unsafe { sys::ap_mpm_podx_check(*pod.add(bucket as usize)) } as u32;
        let asked = rt.stop_mode();
        if asked != StopMode::None {
            // Our own nudge: not a request from the parent.
            GOT_SIGTERM.store(false, Ordering::SeqCst);
            return asked;
        }
        // A bare SIGTERM (someone signalling the child directly) changes nothing, as with
        // the stock worker: the parent stops children through the pipe of death. Once a stop
        // is under way, though, the parent's SIGTERM means "now" (see join_threads).
        GOT_SIGTERM.store(false, Ordering::SeqCst);
        match rv {
            sys::ap_podx_restart_t_AP_MPM_PODX_GRACEFUL => return StopMode::Graceful,
            sys::ap_podx_restart_t_AP_MPM_PODX_RESTART => return StopMode::Ungraceful,
            _ => {}
        }
    }
}

/// Joins the listener and the workers. A graceful stop waits for in-flight
/// connections; a SIGTERM from the parent while waiting (GracefulShutdownTimeout
/// expired, or `-k stop`) turns it into an immediate stop.
fn join_threads(rt: &ChildRuntime, mut mode: StopMode) {
    // The listener may be between its may-exit check and a blocking call when the
    // signal lands: nudge it again until it reports that it left its loop.
    let listener = rt.listener_thread.load(Ordering::SeqCst);
    if !listener.is_null() {
        let mut tries = 0;
        while !rt.dying.load(Ordering::SeqCst) {
            // SAFETY: plain sleep (EINTR just shortens it).
            unsafe { sys::apr_sleep(50_000) };
            tries += 1;
            if tries % 10 == 0 {
                rt.wake_listener();
            }
            if tries == 200 {
                crate::mpm_log!(level::DEBUG, 0, "AH00276: the listener thread didn't exit");
            }
            if GOT_SIGTERM.swap(false, Ordering::SeqCst) && mode != StopMode::Ungraceful {
                mode = StopMode::Ungraceful;
                rt.signal_threads(mode);
            }
        }
        // SAFETY: created joinable by the starter (already joined), joined once here.
        unsafe { thread::join(listener) };
    } else {
        rt.handoff.term_queue();
    }
    if mode == StopMode::Graceful {
        while rt.live_workers.load(Ordering::SeqCst) > 0 {
            // SAFETY: plain sleep; SIGTERM interrupts it.
            unsafe { sys::apr_sleep(100_000) };
            if GOT_SIGTERM.swap(false, Ordering::SeqCst) {
                mode = StopMode::Ungraceful;
                rt.signal_threads(mode);
                break;
            }
        }
    }
    for w in &rt.workers {
        let t = w.thread.load(Ordering::SeqCst);
        if !t.is_null() {
            // SAFETY: created joinable by the starter (already joined), joined once here.
            unsafe { thread::join(t) };
        }
    }
}

/// Entry data of a worker thread: the runtime and its thread number.
pub struct WorkerArgs {
    /// The child's shared runtime.
    pub rt: &'static ChildRuntime,
    /// Thread number (scoreboard column), < ThreadsPerChild.
    pub thread_num: c_int,
}

/// The starter thread: creates worker threads in scoreboard columns that are free
/// (DEAD or GRACEFUL — a quiescing child of an older generation may still hold some
/// after a graceful restart; retry each second), and the listener with the first worker.
unsafe extern "C" fn start_threads(_thd: *mut sys::apr_thread_t, data: *mut c_void) -> *mut c_void {
    // SAFETY: data is the leaked &'static ChildRuntime passed by main.
    let rt: &'static ChildRuntime = unsafe { &*(data as *const ChildRuntime) };
    let tpc = rt.workers.len();
    let mut created = 0usize;
    let mut loops = 0u32;
    loop {
        for t in 0..tpc {
            if rt.start_thread_may_exit.load(Ordering::SeqCst) {
                return ptr::null_mut();
            }
            if !rt.workers[t].thread.load(Ordering::SeqCst).is_null() {
                continue;
            }
            let st = scoreboard::thread_status(rt.slot, t as c_int);
            if st != status::DEAD && st != status::GRACEFUL {
                continue;
            }
            scoreboard::set_status(rt.slot, t as c_int, status::STARTING);
            let args = Box::into_raw(Box::new(WorkerArgs {
                rt,
                thread_num: t as c_int,
            }));
            rt.live_workers.fetch_add(1, Ordering::SeqCst);
            // SAFETY: attr and pruntime live until exit; the worker takes ownership of args.
            match thread::spawn(
                rt.thread_attr,
                rt.pruntime.as_ptr(),
                worker::main,
                args as *mut c_void,
            ) {
                Ok(thd) => rt.workers[t].thread.store(thd, Ordering::SeqCst),
                Err(rv) => {
                    rt.live_workers.fetch_sub(1, Ordering::SeqCst);
                    // SAFETY: the thread did not start, so args is still ours.
                    drop(unsafe { Box::from_raw(args) });
                    scoreboard::set_status(rt.slot, t as c_int, status::DEAD);
                    crate::mpm_log!(
                        level::ALERT,
                        rv,
                        "AH03142: ap_thread_create: unable to create worker thread"
                    );
                    rt.resource_shortage.store(true, Ordering::SeqCst);
                    rt.request_stop(StopMode::Graceful);
                    return ptr::null_mut();
                }
            }
            created += 1;
            if rt.listener_thread.load(Ordering::SeqCst).is_null() {
                // SAFETY: attr and pruntime live until exit; rt is 'static.
                match thread::spawn(
                    rt.thread_attr,
                    rt.pruntime.as_ptr(),
                    listener::main,
                    rt as *const ChildRuntime as *mut c_void,
                ) {
                    Ok(thd) => rt.listener_thread.store(thd, Ordering::SeqCst),
                    Err(rv) => {
                        crate::mpm_log!(
                            level::ALERT,
                            rv,
                            "AH00275: ap_thread_create: unable to create listener thread"
                        );
                        rt.resource_shortage.store(true, Ordering::SeqCst);
                        rt.request_stop(StopMode::Graceful);
                        return ptr::null_mut();
                    }
                }
            }
        }
        if created == tpc {
            return ptr::null_mut();
        }
        loops += 1;
        if loops % 120 == 0 {
            crate::mpm_log!(
                level::DEBUG,
                0,
                "AH00277: child {} isn't taking over slots very quickly ({} of {})",
                std::process::id(),
                created,
                tpc
            );
        }
        for _ in 0..10 {
            if rt.start_thread_may_exit.load(Ordering::SeqCst) {
                return ptr::null_mut();
            }
            // SAFETY: plain sleep.
            unsafe { sys::apr_sleep(100_000) };
        }
    }
}
