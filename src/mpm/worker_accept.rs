//! Idle workers that accept for themselves (`RWorkerAccept workers`, the default where a
//! child has one listening socket and `RWorkerKeepAlive thread`).
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
//! a blocked accept has no other way out), and the count of idle workers.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crate::ffi::listen::{Accepted, SharedListener};
use crate::ffi::log::level;
use crate::ffi::pool::{ConfigPool, Pool};
use crate::mpm::conn::Conn;
use crate::mpm::runtime::{ChildRuntime, StopMode, Threads, WORKER_SIGNAL};
use crate::mpm::status::Counter;

/// The child's shared accept state (see the module doc).
#[derive(Debug)]
pub struct WorkerAccept {
    socket: SharedListener,
    pconf: ConfigPool,
    /// MaxMemFree for the workers' transaction pools.
    max_mem_free: usize,
    /// MaxConnectionsPerChild: a worker takes one connection before it accepts and gives
    /// it back if it got nothing.
    budget: ConnectionBudget,
    /// Per worker: announced in accept (set before its stop check, cleared after accept
    /// returns), so a stop signals exactly the workers that may be blocked there.
    in_accept: Box<[AtomicBool]>,
    /// Workers in accept now: the idle workers (`RWorkerIdleWorkers`).
    idle: AtomicUsize,
    /// A worker already asked the main thread to stop the child (asked once).
    stop_asked: AtomicBool,
}

/// What a worker's [`WorkerAccept::next`] gave.
pub enum Next {
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
            idle: AtomicUsize::new(0),
            stop_asked: AtomicBool::new(false),
        }
    }

    /// Worker `t`, idle, waits in accept for its next connection, accepted into `ptrans`
    /// (its pool from the last connection, cleared) or a new pool.
    pub fn next(&self, rt: &ChildRuntime, t: usize, ptrans: Option<Pool>) -> Next {
        if !self.budget.take() {
            // MaxConnectionsPerChild reached: the child retires gracefully.
            self.ask_stop(rt, StopMode::Graceful);
            return Next::Stop;
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
                    self.budget.give_back();
                    rt.shutdown.mark_sick();
                    self.ask_stop(rt, StopMode::Graceful);
                    return Next::Stop;
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
            // Relaxed: a gauge for server-status.
            let idle = self.idle.fetch_add(1, Ordering::Relaxed) + 1;
            rt.counters.set(Counter::IdleWorkers, idle as u64);
            let got = self.socket.accept(&mut pool);
            let idle = self.idle.fetch_sub(1, Ordering::Relaxed) - 1;
            rt.counters.set(Counter::IdleWorkers, idle as u64);
            got
        };
        // Relaxed: a late clear only costs this worker a spurious signal, which the
        // blocking calls of a connection being served retry (EINTR).
        self.in_accept[t].store(false, Ordering::Relaxed);

        match got {
            Accepted::Socket(sock) => {
                rt.counters.add(source, 1);
                rt.counters.add(Counter::Connections, 1);
                Next::Conn(Conn { sock, ptrans: pool })
            }
            Accepted::Nothing => {
                self.budget.give_back();
                if rt.shutdown.is_stopping() {
                    Next::Stop
                } else {
                    Next::Again(pool)
                }
            }
            Accepted::Broken => {
                // ap_unixd_accept logged the cause; a broken listener is a resource
                // shortage, as with the listener thread.
                self.budget.give_back();
                rt.shutdown.mark_sick();
                self.ask_stop(rt, StopMode::Graceful);
                Next::Stop
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
    pub fn signal_accepting(&self, threads: &Threads) -> usize {
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

/// The connections a child may still accept (MaxConnectionsPerChild; 0 = no limit).
#[derive(Debug)]
struct ConnectionBudget(AtomicU64);

impl ConnectionBudget {
    /// A budget of `max` connections (0: unlimited, as MaxConnectionsPerChild 0).
    fn new(max: u64) -> ConnectionBudget {
        ConnectionBudget(AtomicU64::new(if max == 0 { u64::MAX } else { max }))
    }

    /// Takes one connection; false when the budget is spent.
    fn take(&self) -> bool {
        // Relaxed: a counter that guards no other memory.
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| match n {
                u64::MAX => Some(n),
                0 => None,
                n => Some(n - 1),
            })
            .is_ok()
    }

    /// Returns a connection taken for an accept that gave none.
    fn give_back(&self) {
        // Relaxed: as in take.
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n != u64::MAX).then_some(n + 1)
            });
    }
}

#[cfg(test)]
mod tests {
    use super::ConnectionBudget;

    #[test]
    fn the_budget_allows_exactly_max_connections() {
        let b = ConnectionBudget::new(3);
        assert!(b.take() && b.take());
        b.give_back(); // an accept that gave nothing
        assert!(b.take() && b.take());
        assert!(!b.take(), "3 connections accepted: spent");
        assert!(!b.take(), "stays spent");
    }

    #[test]
    fn zero_means_no_limit() {
        let b = ConnectionBudget::new(0);
        for _ in 0..1000 {
            assert!(b.take());
        }
        b.give_back();
        assert!(b.take());
    }
}
