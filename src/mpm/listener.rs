//! The listener thread (worker.c `listener_thread`): reserve an idle worker, accept one
//! connection into a transaction pool (recycled when possible), push it on the fdqueue.
//! It never accepts more connections than there are idle workers, so when every worker
//! is busy new connections wait in the kernel's backlog (or go to another child) while
//! the parent forks more children.

use crate::ffi::httpd;
use crate::ffi::listen::{AcceptMutex, Accepted, Listener as ListenSocket, PollSet};
use crate::ffi::log::level;
use crate::ffi::pool::{ConfigPool, Pool};
use crate::ffi::{panic, signal};
use crate::mpm::conn::Conn;
use crate::mpm::runtime::{ChildRuntime, StopMode, LISTENER_SIGNAL};
use crate::mpm::status::Counter;

/// What the listener thread owns: this bucket's listening sockets, the accept mutex
/// when the bucket has several, and where transaction pools come from.
pub struct Listener {
    pub(crate) sockets: Vec<ListenSocket>,
    pub(crate) accept_mutex: Option<AcceptMutex>,
    pconf: ConfigPool,
}

impl Listener {
    /// The listener of a child serving `sockets` (one bucket's), serialising accept with
    /// `accept_mutex` when given, creating transaction pools under `pconf`.
    pub fn new(
        sockets: Vec<ListenSocket>,
        accept_mutex: Option<AcceptMutex>,
        pconf: ConfigPool,
    ) -> Listener {
        Listener {
            sockets,
            accept_mutex,
            pconf,
        }
    }

    /// A transaction pool for the next accept: recycled from a worker if one is waiting,
    /// else a new one (with its own allocator capped at MaxMemFree); and which of the two
    /// it was, counted once a connection is accepted into it.
    pub(crate) fn ptrans(&self, rt: &ChildRuntime, max_mem_free: usize) -> Option<(Pool, Counter)> {
        if let Some(p) = rt.handoff.pop_pool() {
            return Some((p, Counter::PoolsReused));
        }
        match self.pconf.create_ptrans(max_mem_free) {
            Ok(p) => Some((p, Counter::PoolsCreated)),
            Err(e) => {
                crate::mpm_log!(
                    level::ALERT,
                    e,
                    "AH03137: Failed to create transaction pool"
                );
                None
            }
        }
    }

    /// The thread's body: accept until a stop, then close the listeners, let the workers
    /// drain the fdqueue, and report the listener gone.
    pub fn run(mut self, rt: &'static ChildRuntime) {
        let _place = panic::enter("listener thread");
        rt.threads.listener_started();
        signal::unblock_for_this_thread(LISTENER_SIGNAL);

        let max_mem_free = httpd::max_mem_free();
        // MaxConnectionsPerChild: connections this child may still accept.
        let mut connections_left = match httpd::max_connections_per_child() {
            n if n > 0 => n as u64,
            _ => u64::MAX,
        };
        let mut poll = PollSet::new(&self.sockets);
        // The pool the next connection is accepted into, and where it came from.
        let mut ptrans: Option<(Pool, Counter)> = None;
        let mut have_idle_worker = false;
        let mut self_stop = StopMode::None;
        // Futex wakes already added to the counters (the queues count their own).
        let mut wakes_counted = 0;

        while !rt.shutdown.is_stopping() {
            if connections_left == 0 {
                // MaxConnectionsPerChild reached: this child retires gracefully.
                self_stop = StopMode::Graceful;
                break;
            }
            if !have_idle_worker {
                if !rt.handoff.wait_for_idler() {
                    break;
                }
                have_idle_worker = true;
            }
            if rt.shutdown.is_stopping() {
                break;
            }
            if let Some(m) = self.accept_mutex.as_mut() {
                if let Err(rv) = m.lock() {
                    if rv == libc::EINTR {
                        continue;
                    }
                    crate::mpm_log!(level::EMERG, rv, "AH00272: apr_proc_mutex_lock failed. Attempting to shutdown process gracefully.");
                    rt.shutdown.mark_sick();
                    self_stop = StopMode::Graceful;
                    break;
                }
            }
            let ready = if self.sockets.len() == 1 {
                Some(0)
            } else {
                poll.wait()
            };
            let mut accepted = Accepted::Nothing;
            if let Some(i) = ready {
                if ptrans.is_none() {
                    ptrans = self.ptrans(rt, max_mem_free);
                }
                match ptrans.as_mut() {
                    Some((p, _)) => accepted = self.sockets[i].accept(p),
                    None => {
                        rt.shutdown.mark_sick();
                        self_stop = StopMode::Graceful;
                    }
                }
            }
            if let Some(m) = self.accept_mutex.as_mut() {
                if let Err(rv) = m.unlock() {
                    crate::mpm_log!(level::EMERG, rv, "AH00273: apr_proc_mutex_unlock failed. Attempting to shutdown process gracefully.");
                    rt.shutdown.mark_sick();
                    self_stop = StopMode::Graceful;
                }
            }
            if self_stop != StopMode::None {
                break;
            }
            let sock = match accepted {
                Accepted::Socket(s) => s,
                // Interrupted, or a benign accept error (reset, aborted…).
                Accepted::Nothing | Accepted::Empty => continue,
                // Without parking a child holds no more connections than it has threads:
                // out of descriptors there is the shortage the stock worker retires for.
                Accepted::Broken | Accepted::OutOfFiles => {
                    // ap_unixd_accept logged the cause; a broken listener is a resource
                    // shortage.
                    rt.shutdown.mark_sick();
                    self_stop = StopMode::Graceful;
                    break;
                }
            };
            let Some((pool, source)) = ptrans.take() else {
                continue;
            };
            rt.counters.add(source, 1);
            // Counted before the push: the worker may serve the connection (a server-status
            // request, say) before this thread runs again.
            rt.counters.add(Counter::Connections, 1);
            rt.counters.add(Counter::Handoffs, 1);
            match rt.handoff.push(Conn { sock, ptrans: pool }) {
                Ok(()) => {
                    have_idle_worker = false;
                    wakes_counted = publish_wakes(rt, wakes_counted);
                    connections_left = connections_left.saturating_sub(1);
                }
                Err(c) => {
                    rt.counters.remove(Counter::Handoffs, 1);
                    crate::mpm_log!(level::CRIT, 0, "AH03138: ap_queue_push_socket failed");
                    ptrans = Some((c.drop_unserved(), Counter::PoolsReused));
                }
            }
        }

        // Leave: stop listening, let workers drain the queue and exit.
        if let Some(first) = self.sockets.first() {
            first.close_from_here();
        }
        drop(ptrans);
        rt.handoff.free_idle_pools();
        rt.handoff.term_queue();
        publish_wakes(rt, wakes_counted);
        rt.rows.set_quiescing();
        rt.listener_left();
        if self_stop != StopMode::None {
            rt.ask_main_thread_to_stop(self_stop);
        }
    }
}

/// Adds the futex wakes the hand-off made since `counted` to the counters; returns the
/// new total.
pub(crate) fn publish_wakes(rt: &ChildRuntime, counted: u64) -> u64 {
    let now = rt.handoff.futex_wakes();
    rt.counters
        .add(Counter::FutexWakes, now.saturating_sub(counted));
    now
}
