//! A child's threads as the main thread sees them: the join handles the starter
//! records, the OS thread of the listener and of each worker (to interrupt a blocking
//! call with a signal), the descriptor each worker serves (for an immediate stop to cut
//! it), and how many workers still run.

use std::os::raw::c_int;
use std::os::unix::io::RawFd;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::ffi::signal::OsThread;
use crate::ffi::thread::AprThread;

/// The signal that interrupts the listener's accept or poll.
pub const LISTENER_SIGNAL: c_int = libc::SIGHUP;
/// The signal that interrupts a worker's blocking read on an immediate stop, and its
/// accept when the child stops (`RWorkerAccept workers`).
pub const WORKER_SIGNAL: c_int = libc::SIGUSR1;

/// One worker's entry.
#[derive(Debug)]
struct WorkerEntry {
    /// Its pthread (0 until the thread runs).
    os_thread: AtomicUsize,
    /// The client socket's descriptor while a connection is served, else -1.
    fd: AtomicI32,
}

/// Join handles, written by the starter, taken by the main thread after it joined the
/// starter; the lock is never contended.
#[derive(Debug, Default)]
struct Handles {
    workers: Vec<Option<AprThread>>,
    listener: Option<AprThread>,
}

/// The child's threads (see the module doc).
#[derive(Debug)]
pub struct Threads {
    workers: Vec<WorkerEntry>,
    handles: Mutex<Handles>,
    listener_os_thread: AtomicUsize,
    live_workers: AtomicUsize,
}

impl Threads {
    /// Room for `workers` worker threads.
    pub fn new(workers: usize) -> Threads {
        Threads {
            workers: (0..workers)
                .map(|_| WorkerEntry {
                    os_thread: AtomicUsize::new(0),
                    fd: AtomicI32::new(-1),
                })
                .collect(),
            handles: Mutex::new(Handles {
                workers: (0..workers).map(|_| None).collect(),
                listener: None,
            }),
            listener_os_thread: AtomicUsize::new(0),
            live_workers: AtomicUsize::new(0),
        }
    }

    /// Number of worker threads (ThreadsPerChild).
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    fn handles(&self) -> std::sync::MutexGuard<'_, Handles> {
        // A poisoned lock still holds valid handles (panics abort the process anyway).
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether worker `t` was created.
    pub fn worker_created(&self, t: usize) -> bool {
        self.handles().workers[t].is_some()
    }

    /// Records worker `t`'s join handle.
    pub fn set_worker(&self, t: usize, h: AprThread) {
        self.handles().workers[t] = Some(h);
    }

    /// Records the listener's join handle.
    pub fn set_listener(&self, h: AprThread) {
        self.handles().listener = Some(h);
    }

    /// Takes the listener's join handle (the main thread, once the starter is joined).
    pub fn take_listener(&self) -> Option<AprThread> {
        self.handles().listener.take()
    }

    /// Takes every worker's join handle (likewise).
    pub fn take_workers(&self) -> Vec<AprThread> {
        self.handles()
            .workers
            .iter_mut()
            .filter_map(Option::take)
            .collect()
    }

    /// Called by the listener as it starts.
    pub fn listener_started(&self) {
        // Relaxed: the value is a thread id, read by the main thread only after it joined
        // the starter that created this thread (which orders the thread's creation first);
        // 0 read early just means "not running yet".
        self.listener_os_thread
            .store(OsThread::current().to_raw(), Ordering::Relaxed);
    }

    /// Called by worker `t` as it starts.
    pub fn worker_started(&self, t: usize) {
        // Relaxed: as in listener_started.
        self.workers[t]
            .os_thread
            .store(OsThread::current().to_raw(), Ordering::Relaxed);
    }

    /// Counts a worker about to be created (undone by [`Threads::worker_exiting`], or by
    /// [`Threads::worker_not_created`] when creation fails).
    pub fn worker_starting(&self) {
        // Relaxed: a counter; its readers only wait for it to reach 0 (worker_exiting).
        self.live_workers.fetch_add(1, Ordering::Relaxed);
    }

    /// Undoes [`Threads::worker_starting`] for a thread that could not be created.
    pub fn worker_not_created(&self) {
        // Release: pairs with live_workers's Acquire, as in worker_exiting.
        self.live_workers.fetch_sub(1, Ordering::Release);
    }

    /// Called by a worker as it exits, after its last scoreboard write; true for the last
    /// worker running.
    pub fn worker_exiting(&self) -> bool {
        // Release: the main thread that reads 0 (Acquire) sees every worker's last writes
        // before it goes on to exit the child.
        self.live_workers.fetch_sub(1, Ordering::Release) == 1
    }

    /// Worker threads running now.
    pub fn live_workers(&self) -> usize {
        // Acquire: pairs with worker_exiting.
        self.live_workers.load(Ordering::Acquire)
    }

    /// Worker `t` serves the connection on `fd` (-1: none), so that an immediate stop can
    /// cut it with shutdown(2).
    pub fn set_worker_fd(&self, t: usize, fd: RawFd) {
        // Relaxed: a descriptor number publishes no memory; the race with the worker's own
        // close is described at the main thread's use (signal_threads).
        self.workers[t].fd.store(fd, Ordering::Relaxed);
    }

    /// The descriptors the workers serve now.
    pub fn worker_fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        // Relaxed: see set_worker_fd.
        self.workers
            .iter()
            .map(|w| w.fd.load(Ordering::Relaxed))
            .filter(|&fd| fd >= 0)
    }

    /// The listener's OS thread, once it runs.
    pub fn listener_os_thread(&self) -> Option<OsThread> {
        // Relaxed: see listener_started.
        match self.listener_os_thread.load(Ordering::Relaxed) {
            0 => None,
            raw => Some(OsThread::from_raw(raw)),
        }
    }

    /// Worker `t`'s OS thread, once it runs.
    pub fn worker_os_thread(&self, t: usize) -> Option<OsThread> {
        // Relaxed: see listener_started.
        match self.workers[t].os_thread.load(Ordering::Relaxed) {
            0 => None,
            raw => Some(OsThread::from_raw(raw)),
        }
    }

    /// The OS threads of the workers that run.
    pub fn worker_os_threads(&self) -> impl Iterator<Item = OsThread> + '_ {
        // Relaxed: see listener_started.
        self.workers
            .iter()
            .map(|w| w.os_thread.load(Ordering::Relaxed))
            .filter(|&raw| raw != 0)
            .map(OsThread::from_raw)
    }
}
