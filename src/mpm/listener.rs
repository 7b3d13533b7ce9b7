//! The listener thread (worker.c `listener_thread`): reserve an idle worker, accept one
//! connection into a transaction pool (recycled when possible), push it on the fdqueue.
//! It never accepts more connections than there are idle workers, so when every worker
//! is busy new connections wait in the kernel's backlog (or go to another child) while
//! the parent forks more children.

use crate::ffi::httpd;
use crate::ffi::listen::{AcceptMutex, Accepted, Listener as ListenSocket, PollSet};
use crate::ffi::log::level;
use crate::ffi::pool::{ConfigPool, Pool};
use crate::ffi::{panic, scoreboard, signal};
use crate::mpm::conn::Conn;
use crate::mpm::runtime::{ChildRuntime, ChildStats, StopMode, LISTENER_SIGNAL};

/// What the listener thread owns: this bucket's listening sockets, the accept mutex
/// when the bucket has several, and where transaction pools come from.
pub struct Listener {
    sockets: Vec<ListenSocket>,
    accept_mutex: Option<AcceptMutex>,
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
    /// else a new one (with its own allocator capped at MaxMemFree).
    fn ptrans(&self, rt: &ChildRuntime, max_mem_free: usize) -> Option<Pool> {
        if let Some(p) = rt.handoff.pop_pool() {
            ChildStats::count(&rt.stats.ptrans_reused);
            return Some(p);
        }
        match self.pconf.create_ptrans(max_mem_free) {
            Ok(p) => {
                ChildStats::count(&rt.stats.ptrans_created);
                Some(p)
            }
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
        panic::enter("listener thread");
        rt.threads.listener_started();
        signal::unblock_for_this_thread(LISTENER_SIGNAL);

        let max_mem_free = httpd::max_mem_free();
        // MaxConnectionsPerChild: connections this child may still accept.
        let mut connections_left = match httpd::max_connections_per_child() {
            n if n > 0 => n as u64,
            _ => u64::MAX,
        };
        let mut poll = PollSet::new(&self.sockets);
        let mut ptrans: Option<Pool> = None;
        let mut have_idle_worker = false;
        let mut self_stop = StopMode::None;

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
                    Some(p) => accepted = self.sockets[i].accept(p),
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
                Accepted::Nothing => continue,
                Accepted::Broken => {
                    // ap_unixd_accept logged the cause; a broken listener is a resource
                    // shortage.
                    rt.shutdown.mark_sick();
                    self_stop = StopMode::Graceful;
                    break;
                }
            };
            let Some(pool) = ptrans.take() else { continue };
            match rt.handoff.push(Conn { sock, ptrans: pool }) {
                Ok(()) => {
                    have_idle_worker = false;
                    ChildStats::count(&rt.stats.connections);
                    connections_left = connections_left.saturating_sub(1);
                }
                Err(c) => {
                    crate::mpm_log!(level::CRIT, 0, "AH03138: ap_queue_push_socket failed");
                    ptrans = Some(c.drop_unserved());
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
        scoreboard::set_quiescing(rt.slot);
        rt.shutdown.mark_listener_gone();
        if self_stop != StopMode::None {
            rt.ask_main_thread_to_stop(self_stop);
        }
    }
}
