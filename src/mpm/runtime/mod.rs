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

use crate::ffi::retained::Retained;
use crate::ffi::signal;
use crate::ffi::socket;
use crate::ffi::thread::Spawner;
use crate::mpm::handoff::Handoff;
use crate::mpm::parking::Parking;
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
}

impl ChildRuntime {
    /// From the listener or the starter (MaxConnectionsPerChild reached, a thread could
    /// not be created, accept broke): requests `mode` and nudges the main thread out of
    /// its pipe-of-death read with SIGTERM (only the main thread has it unblocked).
    pub fn ask_main_thread_to_stop(&self, mode: StopMode) {
        self.shutdown.request(mode);
        signal::raise_in_process(libc::SIGTERM);
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
            for fd in self.threads.worker_fds() {
                // Cut the connection under the worker: its read or write returns at once.
                // The worker unpublishes the descriptor before its lingering close frees
                // the number, so at worst this races that close by a few instructions and
                // hits a reused number (ENOTSOCK, or a socket this stop cuts anyway).
                socket::shutdown_fd(fd);
            }
            for t in self.threads.worker_os_threads() {
                // SAFETY: workers are joinable and the main thread (our caller) joins them
                // only after signalling, so their ids are valid here.
                unsafe { t.signal(WORKER_SIGNAL) };
            }
        }
    }
}
