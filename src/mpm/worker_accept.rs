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
//! listener. The listener thread is not started (with `RWorkerKeepAlive park` it is, for
//! parked connections only, and it interrupts a worker in accept when it needs one on the
//! fdqueue: `nudge_one`, `crate::mpm::idle_split`); what it otherwise does is here:
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
    /// MaxConnectionsPerChild: a worker reserves a connection before it accepts.
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
        // MaxConnectionsPerChild: only as many workers wait in accept as connections are
        // left. The others (only in a child's last ThreadsPerChild connections) look again
        // shortly: a connection comes, or a stop.
        while !self.budget.reserve() {
            if rt.shutdown.is_stopping() {
                return Next::Stop;
            }
            std::thread::sleep(BUDGET_RETRY);
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
            // (A parking child's idle workers on the fdqueue count too.)
            let idle = self.idle.fetch_add(1, Ordering::Relaxed) + 1;
            rt.counters
                .set(Counter::IdleWorkers, idle as u64 + rt.handoff.idlers());
            let got = self.socket.accept(&mut pool);
            let idle = self.idle.fetch_sub(1, Ordering::Relaxed) - 1;
            rt.counters
                .set(Counter::IdleWorkers, idle as u64 + rt.handoff.idlers());
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
                Next::Conn(Conn { sock, ptrans: pool })
            }
            Accepted::Nothing => {
                self.budget.release();
                if rt.shutdown.is_stopping() {
                    Next::Stop
                } else {
                    Next::Again(pool)
                }
            }
            Accepted::OutOfFiles if rt.parking.is_some() => {
                // A parking child keeps what it holds: it accepts no more until some
                // close, and its workers wait on the fdqueue meanwhile.
                self.budget.release();
                if let Some(p) = &rt.parking {
                    p.out_of_files();
                }
                Next::Again(pool)
            }
            Accepted::Broken | Accepted::OutOfFiles => {
                // ap_unixd_accept logged the cause; a broken listener is a resource
                // shortage, as with the listener thread (without parking a child holds no
                // more connections than it has threads).
                self.budget.release();
                self.retire_sick(rt);
                Next::Stop
            }
        }
    }

    /// Workers waiting in accept now.
    pub fn waiting(&self) -> usize {
        // Relaxed: a gauge (and a hint for `idle_split`).
        self.idle.load(Ordering::Relaxed)
    }

    /// A parking child's listener needs a worker on the fdqueue and none is there:
    /// interrupts one worker waiting in accept, which then looks at the fdqueue. False
    /// when none is in accept.
    pub fn nudge_one(&self, threads: &Threads) -> bool {
        // Relaxed: a flag read late costs a nudge that lands on a worker that has just
        // left accept (its blocking calls retry EINTR) or none at all; the listener tries
        // again shortly while it still waits.
        let Some(t) = self
            .in_accept
            .iter()
            .position(|f| f.load(Ordering::Relaxed))
        else {
            return false;
        };
        match threads.worker_os_thread(t) {
            Some(os) => {
                // SAFETY: the caller is the child's listener thread, and the main thread
                // joins the workers only after the listener has left, so worker `t`'s
                // thread exists.
                unsafe { os.signal(WORKER_SIGNAL) };
                true
            }
            None => false,
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

/// How long a worker that found no connection left to reserve waits before it looks again.
const BUDGET_RETRY: std::time::Duration = std::time::Duration::from_millis(10);

/// MaxConnectionsPerChild for workers that accept concurrently. A worker reserves one
/// connection before it waits in accept and gives it back if it got none, so a child never
/// accepts more than the limit; the child stops when the limit is *accepted*, not when it
/// is merely reserved (workers waiting in accept must not retire an idle child).
#[derive(Debug)]
struct ConnectionBudget {
    /// Connections neither accepted nor reserved (`u64::MAX`: no limit).
    left: AtomicU64,
    /// Connections accepted.
    accepted: AtomicU64,
    /// MaxConnectionsPerChild (`u64::MAX`: none).
    limit: u64,
}

impl ConnectionBudget {
    /// A budget of `max` connections (0: unlimited, as MaxConnectionsPerChild 0).
    fn new(max: u64) -> ConnectionBudget {
        let limit = if max == 0 { u64::MAX } else { max };
        ConnectionBudget {
            left: AtomicU64::new(limit),
            accepted: AtomicU64::new(0),
            limit,
        }
    }

    /// Reserves a connection for an accept; false when every one left is reserved.
    fn reserve(&self) -> bool {
        // Relaxed: counters that guard no other memory.
        self.limit == u64::MAX
            || self
                .left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
    }

    /// Gives back a reservation whose accept gave nothing.
    fn release(&self) {
        if self.limit != u64::MAX {
            // Relaxed: as in reserve.
            self.left.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a reserved connection as accepted; true exactly once, for the one that
    /// reaches the limit.
    fn accepted(&self) -> bool {
        // Relaxed: as in reserve.
        self.limit != u64::MAX && self.accepted.fetch_add(1, Ordering::Relaxed) + 1 == self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::ConnectionBudget;

    #[test]
    fn reservations_never_exceed_the_limit_and_only_accepts_spend_it() {
        let b = ConnectionBudget::new(3);
        // Three workers wait in accept; a fourth finds nothing left to reserve.
        assert!(b.reserve() && b.reserve() && b.reserve());
        assert!(!b.reserve());
        // One is interrupted (a signal): its reservation comes back.
        b.release();
        assert!(b.reserve());
        // Waiting reserved nothing away for good: the child stops only on the third accept.
        assert!(!b.accepted() && !b.accepted());
        assert!(
            b.accepted(),
            "the third accepted connection reaches the limit"
        );
        assert!(!b.reserve(), "spent");
    }

    #[test]
    fn zero_means_no_limit() {
        let b = ConnectionBudget::new(0);
        assert!((0..10_000).all(|_| b.reserve() && !b.accepted()));
    }
}
