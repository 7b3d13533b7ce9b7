//! What the threads of one child share: its scoreboard slot and generation, the
//! listener → worker hand-off, the stop state (`shutdown`), the thread registry
//! (`threads`), the spawner and a few counters. Created once per child before any
//! thread starts and never freed (the child ends with `exit`), so threads hold it as
//! `&'static`.
//!
//! The main thread's side of a stop lives here too: [`ChildRuntime::signal_threads`]
//! turns a requested stop into wake-ups (worker.c `signal_threads`).

mod shutdown;
mod threads;

pub use shutdown::{Shutdown, StopMode};
pub use threads::{Threads, LISTENER_SIGNAL, WORKER_SIGNAL};

use std::os::raw::c_int;

use rworker_queue::publish_then_check;

use crate::ffi::epoll::WakeFd;
use crate::ffi::listen::{Pod, PodMessage};
use crate::ffi::retained::Retained;
use crate::ffi::signal;
use crate::ffi::socket;
use crate::ffi::thread::Spawner;
use crate::mpm::handoff::Handoff;
use crate::mpm::parking::Parking;
use crate::mpm::row_counts::RowCounts;
use crate::mpm::status::ChildCounters;
use crate::sys;

/// Everything the threads of one child share (see the module doc).
pub struct ChildRuntime {
    /// Scoreboard process slot.
    pub slot: c_int,
    /// MPM generation this child belongs to.
    pub generation: sys::ap_generation_t,
    /// ThreadLimit (scoreboard columns per slot), for connection ids.
    pub thread_limit: c_int,
    /// Listener → worker hand-off: fdqueue (capacity ThreadsPerChild) and queue_info
    /// (idle workers, recycled ptrans), as chosen by RWorkerQueue.
    pub handoff: Handoff,
    /// The event set its workers wait on (`RWorkerKeepAlive park`), else None.
    pub parking: Option<Parking>,
    /// The stop state.
    pub shutdown: Shutdown,
    /// The child's threads.
    pub threads: Threads,
    /// Creates the child's threads.
    pub spawner: &'static Spawner,
    /// What the child counts (its exit line, and server-status through shared memory).
    pub counters: ChildCounters,
    /// Its open, parked and idle counts, as its scoreboard and status rows show them.
    pub rows: &'static RowCounts,
    /// Rung when the main thread has something to look at: a stop its own threads asked
    /// for, the listener gone, the last worker gone. Only the main thread waits on it and
    /// clears it, through [`ChildRuntime::wait_pod_or_bell`] and
    /// [`ChildRuntime::wait_main_bell`].
    pub main_bell: WakeFd,
}

impl ChildRuntime {
    /// From the listener, a worker or the starter (MaxConnectionsPerChild reached, a
    /// thread could not be created, accept broke): requests `mode` and rings the main
    /// thread out of its pipe-of-death wait.
    pub fn ask_main_thread_to_stop(&self, mode: StopMode) {
        // The request comes first: the main thread re-reads the mode after each ring.
        self.shutdown.request(mode);
        self.main_bell.signal();
    }

    /// The listener reports that it left its loop, closed its listeners and terminated
    /// the fdqueue; the main thread, which waits to join it, looks at once.
    pub fn listener_left(&self) {
        self.shutdown.mark_listener_gone();
        self.main_bell.signal();
    }

    /// A worker exits (after its last scoreboard write); the last one rings the main
    /// thread, which may wait for them all in a graceful stop.
    pub fn worker_left(&self) {
        if self.threads.worker_exiting() {
            self.main_bell.signal();
        }
    }

    /// The main thread waits for a message on the pipe of death or for its bell, with
    /// SIGTERM unblocked for the wait only (as in [`ChildRuntime::wait_main_bell`]). `None`
    /// when the bell rang, SIGTERM came, or a sibling took the message. Clears the bell.
    pub fn wait_pod_or_bell(&self, pod: Pod) -> Option<PodMessage> {
        let msg = pod.wait(self.main_bell.fd(), libc::SIGTERM);
        self.main_bell.clear();
        msg
    }

    /// The main thread waits for its bell (or up to `timeout`), with SIGTERM unblocked
    /// for the wait only: a SIGTERM from the parent that came before the wait began ends
    /// it at once (see `signal::poll_unblocking`); [`signal::take_sigterm`] says whether
    /// one came. Clears the bell.
    pub fn wait_main_bell(&self, timeout: Option<std::time::Duration>) {
        let mut fds = [libc::pollfd {
            fd: self.main_bell.fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        signal::poll_unblocking(libc::SIGTERM, &mut fds, timeout);
        self.main_bell.clear();
    }

    /// Wakes the listener wherever it blocks: waiting for an idle worker (queue_info
    /// term), in accept or poll (LISTENER_SIGNAL).
    pub fn wake_listener(&self) {
        self.handoff.term_idlers();
        if let Some(t) = self.threads.listener_os_thread() {
            if !self.shutdown.listener_gone() {
                // SAFETY: the listener is joinable and the main thread (our caller) joins
                // it only after it reported itself gone, so its id is valid here.
                unsafe { t.signal(LISTENER_SIGNAL) };
            }
        }
    }

    /// The main thread turns a stop into wake-ups: the listener always (in a parking
    /// child, the event set stops accepting and its idle workers leave once the child is
    /// done, or at once on an immediate stop); on an immediate stop also every worker,
    /// cutting the connections they serve.
    pub fn signal_threads(&'static self, mode: StopMode) {
        self.shutdown.request(mode);
        if let Some(r) = Retained::lookup() {
            r.set_mpm_state(sys::AP_MPMQ_STOPPING as c_int);
        }
        match &self.parking {
            Some(p) => p.stop(mode == StopMode::Graceful),
            None => self.wake_listener(),
        }
        if mode == StopMode::Ungraceful {
            self.handoff.interrupt_all();
            // The stop (requested above), then the served descriptors: against a parking
            // worker that publishes the descriptor it takes, then reads the stop
            // (`Worker::must_drop`). Either this sees the descriptor and cuts it, or the
            // worker sees the stop and closes the connection unserved.
            publish_then_check(
                || (),
                |()| {
                    for fd in self.threads.worker_fds() {
                        // Cut the connection under the worker: its read or write returns
                        // at once, a lingering close's read included. A worker unpublishes
                        // the descriptor right around the close that frees the number, so
                        // at worst this races that close by a few instructions and hits a
                        // reused number (ENOTSOCK, or a socket of this child, which is
                        // stopping at once anyway).
                        socket::shutdown_fd(fd);
                    }
                },
            );
            for t in self.threads.worker_os_threads() {
                // SAFETY: workers are joinable and the main thread (our caller) joins them
                // only after signalling, so their ids are valid here.
                unsafe { t.signal(WORKER_SIGNAL) };
            }
        }
    }
}
