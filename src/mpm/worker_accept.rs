//! Idle workers that accept for themselves (`RWorkerAccept workers`, the default where a
//! child has one listening socket).
//!
//! Every idle worker blocks in accept(2) on the listening socket and the kernel gives each
//! new connection to exactly one of them, so a connection costs no listener wake-up, no
//! fdqueue push and no futex wake: the hand-off that the listener design makes in user
//! space happens in the kernel's accept queue (measured with `Connection: close`: one
//! voluntary context switch and about two futex calls fewer per connection). A worker
//! keeps its transaction pool from one connection to the next, and it accepts only while
//! it is idle, so a child never holds more connections than it has workers, as with the
//! listener. The listener thread is not started; what it otherwise does is here:
//! MaxConnectionsPerChild, getting workers out of accept when the child stops (a signal:
//! a blocked accept has no other way out), and the count of idle workers. (A parking child,
//! `RWorkerKeepAlive park`, accepts through its event set instead: `crate::mpm::parking`.)

use std::sync::atomic::{fence, AtomicBool, Ordering};

use rworker_queue::ConnectionBudget;

use crate::ffi::listen::{Accepted, SharedListener};
use crate::ffi::log::level;
use crate::ffi::pool::{ConfigPool, Pool};
use crate::mpm::conn::Conn;
use crate::mpm::row_counts::Count;
use crate::mpm::runtime::{ChildRuntime, StopMode, Threads, WORKER_SIGNAL};
use crate::mpm::status::Counter;

/// The child's shared accept state (see the module doc).
#[derive(Debug)]
pub struct WorkerAccept {
    socket: SharedListener,
    pconf: ConfigPool,
    /// MaxMemFree for the workers' transaction pools.
    max_mem_free: usize,
    /// MaxConnectionsPerChild: a worker reserves a connection before it accepts.
    budget: ConnectionBudget,
    /// Per worker: announced in accept (set before its stop check, cleared after accept
    /// returns), so a stop signals exactly the workers that may be blocked there.
    in_accept: Box<[AtomicBool]>,
    /// A worker already asked the main thread to stop the child (asked once).
    stop_asked: AtomicBool,
}

/// What a worker's [`WorkerAccept::next`] gave.
pub enum WorkerAccepted {
    /// A connection to serve.
    Conn(Conn),
    /// Nothing this time (interrupted, a benign accept error): the worker's pool back.
    Again(Pool),
    /// The child stops accepting: the worker leaves its loop.
    Stop,
}

impl WorkerAccept {
    /// Accept state for `workers` workers on `socket`, with pools created under `pconf`
    /// (capped at `max_mem_free` bytes) and at most `max_connections` connections (0: no
    /// limit, as MaxConnectionsPerChild 0).
    pub fn new(
        socket: SharedListener,
        pconf: ConfigPool,
        max_mem_free: usize,
        max_connections: u64,
        workers: usize,
    ) -> WorkerAccept {
        WorkerAccept {
            socket,
            pconf,
            max_mem_free,
            budget: ConnectionBudget::new(max_connections),
            in_accept: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            stop_asked: AtomicBool::new(false),
        }
    }

    /// Worker `t`, idle, waits in accept for its next connection, accepted into `ptrans`
    /// (its pool from the last connection, cleared) or a new pool.
    pub fn next(&self, rt: &ChildRuntime, t: usize, ptrans: Option<Pool>) -> WorkerAccepted {
        // MaxConnectionsPerChild: only as many workers wait in accept as connections are
        // left. The others (only in a child's last ThreadsPerChild connections) sleep until
        // a reservation comes back or the child stops (`leave` closes the budget).
        if !self.budget.reserve_or_wait() {
            return WorkerAccepted::Stop;
        }
        let (mut pool, source) = match ptrans {
            Some(p) => (p, Counter::PoolsReused),
            None => match self.pconf.create_ptrans(self.max_mem_free) {
                Ok(p) => (p, Counter::PoolsCreated),
                Err(e) => {
                    crate::mpm_log!(
                        level::ALERT,
                        e,
                        "AH03137: Failed to create transaction pool"
                    );
                    self.budget.release();
                    self.retire_sick(rt);
                    return WorkerAccepted::Stop;
                }
            },
        };

        // Announce, then check for a stop: the SeqCst fences here and in
        // `signal_accepting` (after the stop request) make sure that either this check
        // sees the stop or the main thread sees us announced and signals us. (A signal
        // that lands between the check and the accept call is lost; the main thread
        // repeats it until no worker is announced.) Relaxed stores and loads: the fences
        // order them.
        self.in_accept[t].store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let got = if rt.shutdown.is_stopping() {
            Accepted::Nothing
        } else {
            rt.rows.add(Count::IdleWorkers, 1);
            let got = self.socket.accept(&mut pool);
            rt.rows.add(Count::IdleWorkers, -1);
            got
        };
        // Relaxed: a late clear only costs this worker a spurious signal, which the
        // blocking calls of a connection being served retry (EINTR).
        self.in_accept[t].store(false, Ordering::Relaxed);

        match got {
            Accepted::Socket(sock) => {
                rt.counters.add(source, 1);
                rt.counters.add(Counter::Connections, 1);
                if self.budget.accepted() {
                    // MaxConnectionsPerChild reached: this connection is served, then the
                    // child retires gracefully.
                    self.ask_stop(rt, StopMode::Graceful);
                }
                WorkerAccepted::Conn(Conn { sock, ptrans: pool })
            }
            Accepted::Nothing | Accepted::Empty => {
                self.budget.release();
                if rt.shutdown.is_stopping() {
                    WorkerAccepted::Stop
                } else {
                    WorkerAccepted::Again(pool)
                }
            }
            Accepted::Broken | Accepted::OutOfFiles => {
                // ap_unixd_accept logged the cause; a broken listener is a resource
                // shortage, as with the listener thread (such a child holds no more
                // connections than it has threads).
                self.budget.release();
                self.retire_sick(rt);
                WorkerAccepted::Stop
            }
        }
    }

    /// The main thread, once the child stops (a stop at least graceful is requested here
    /// if none was): gets every worker out of accept, then closes the child's copy of the
    /// listening socket (as the listener thread does when it leaves). A signal may land
    /// just before a worker enters accept, so it is repeated until no worker is announced;
    /// each leaves at once (no wait for clients).
    pub fn leave(&self, rt: &ChildRuntime) {
        rt.shutdown.request(StopMode::Graceful);
        // Workers waiting for a connection to reserve leave too (after the request: one
        // that then reserves sees the stop after announcing itself, below).
        self.budget.close();
        let mut tries = 0u32;
        while self.signal_accepting(&rt.threads) > 0 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            tries += 1;
            if tries == 500 {
                crate::mpm_log!(
                    level::DEBUG,
                    0,
                    "RW00012: workers still in accept after 5 s"
                );
            }
        }
        // SAFETY: the stop is requested (above), after which no worker enters accept (each
        // checks for the stop after announcing itself), and signal_accepting, run after the
        // request, saw none announced.
        unsafe { self.socket.close() };
    }

    /// Interrupts every worker that may be blocked in accept (after a stop request).
    /// Returns how many were signalled (0: none is in accept any more, and none will enter
    /// it, since each checks for the stop after announcing itself).
    fn signal_accepting(&self, threads: &Threads) -> usize {
        // SeqCst: pairs with the fence in `next` (see there).
        fence(Ordering::SeqCst);
        let mut signalled = 0;
        for (t, flag) in self.in_accept.iter().enumerate() {
            if flag.load(Ordering::Relaxed) {
                if let Some(os) = threads.worker_os_thread(t) {
                    // SAFETY: the main thread (our caller) joins the workers only after it
                    // saw none in accept, so the thread id is valid here.
                    unsafe { os.signal(WORKER_SIGNAL) };
                    signalled += 1;
                }
            }
        }
        signalled
    }

    /// A resource shortage: the child exits sick after a graceful stop.
    fn retire_sick(&self, rt: &ChildRuntime) {
        rt.shutdown.mark_sick();
        self.ask_stop(rt, StopMode::Graceful);
    }

    /// Asks the main thread to stop the child, once for all workers.
    fn ask_stop(&self, rt: &ChildRuntime, mode: StopMode) {
        // Relaxed: only makes the request once; the request itself is ordered (Shutdown).
        if !self.stop_asked.swap(true, Ordering::Relaxed) {
            rt.ask_main_thread_to_stop(mode);
        } else {
            rt.shutdown.request(mode);
        }
    }
}
