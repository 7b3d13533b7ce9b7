//! The way back from workers to the listener when connections are parked
//! (`RWorkerKeepAlive park`): a worker that finished a request hands the connection to
//! the listener as a [`Park`] record through a lock-free inbox (`rworker_queue::Inbox`),
//! and writes the listener's eventfd only when the listener sleeps. Once the record is
//! pushed the worker has nothing left of the connection: the value moved.

use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicUsize, Ordering};

use rworker_queue::{Inbox, Wake};

use crate::ffi::async_conn::AsyncConn;
use crate::ffi::epoll::WakeFd;
use crate::ffi::log::level;
use crate::ffi::scoreboard;
use crate::mpm::idle_split::IdleSplit;

/// Why a connection is parked, and so what the listener waits for and how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParkState {
    /// Between requests: readable within KeepAliveTimeout, else closed.
    KeepAlive,
    /// A module waits for the socket (h2 flow control): readable (`read`) or writable
    /// within Timeout, then its protocol runs again.
    WaitIo { read: bool },
    /// Lingering close: reading what the client still sends until it closes, for up to
    /// 2 s (`short`) or 30 s.
    Linger { short: bool },
}

/// A connection on its way from a worker to the listener's poll set.
#[derive(Debug)]
pub struct Park {
    /// The connection.
    pub conn: AsyncConn,
    /// What to wait for.
    pub state: ParkState,
}

/// What workers and the listener of a parking child share.
pub struct Parking {
    /// Park records, workers → listener.
    pub inbox: Inbox<Park>,
    /// The listener's eventfd, in its epoll set.
    pub wake: WakeFd,
    /// The listener has work for a worker but none is idle: the next worker to go idle
    /// wakes it.
    wants_idler: AtomicBool,
    /// Where idle workers wait when they accept for themselves.
    pub split: IdleSplit,
    /// The child's open connections (accepted and not yet closed), for `ConnsTotal`.
    open: AtomicU32,
    /// Connections a module suspended (`CONN_STATE_SUSPENDED`).
    suspended: AtomicU32,
    /// The most connections the child may hold for its open-file limit
    /// (`crate::mpm::open_files`).
    max_open: AtomicUsize,
    /// The child met EMFILE in accept (logged once).
    out_of_files: AtomicBool,
    /// The child's scoreboard slot, where `open` is published for its siblings.
    slot: std::os::raw::c_int,
}

impl Parking {
    /// For the child in scoreboard `slot`, of `threads_per_child` workers among `children`
    /// slots, that may hold `max_open` connections. Errors: errno (no eventfd).
    pub fn new(
        slot: std::os::raw::c_int,
        threads_per_child: usize,
        children: usize,
        max_open: usize,
    ) -> Result<Parking, i32> {
        Ok(Parking {
            // A worker parks at most one connection at a time, and the listener drains
            // continuously; four per worker absorbs bursts without a pusher ever waiting.
            inbox: Inbox::new((4 * threads_per_child).max(64)),
            wake: WakeFd::new()?,
            wants_idler: AtomicBool::new(false),
            split: IdleSplit::new(threads_per_child, children),
            open: AtomicU32::new(0),
            suspended: AtomicU32::new(0),
            max_open: AtomicUsize::new(max_open),
            out_of_files: AtomicBool::new(false),
            slot,
        })
    }

    /// A worker parks a connection; gives it back when the inbox is closed (the child
    /// is stopping: the worker closes the connection itself).
    pub fn park(&self, p: Park) -> Result<(), Park> {
        match self.inbox.push(p)? {
            Wake::Needed => self.wake.signal(),
            Wake::NotNeeded => {}
        }
        Ok(())
    }

    /// The listener is about to sleep with work waiting for an idle worker. Call, then
    /// try to reserve an idler once more, before sleeping.
    pub fn want_idler(&self) {
        // SeqCst store, then a SeqCst fence before the listener's re-check of the idle
        // count: with the worker's SeqCst increment (inside `set_idle`) followed by its
        // SeqCst swap in `worker_idle`, either the listener's re-check sees the new idler
        // or the worker's swap sees this flag (Dekker). The listener also caps its sleep
        // while it waits for an idler, so a missed wake costs latency, never a hang.
        self.wants_idler.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// The listener got an idler: no wake needed.
    pub fn idler_found(&self) {
        // Relaxed: only saves workers a wake; a stale `true` costs one eventfd write.
        self.wants_idler.store(false, Ordering::Relaxed);
    }

    /// Whether the listener waits for an idle worker now (a hint for `idle_split`).
    pub fn listener_waits(&self) -> bool {
        // Relaxed: a hint; the wake protocol is want_idler / worker_idle.
        self.wants_idler.load(Ordering::Relaxed)
    }

    /// A worker went idle: wakes the listener if it waits for one.
    pub fn worker_idle(&self) {
        // SeqCst fence after the idle count's increment, then the flag: the worker's half
        // of the Dekker pair described in want_idler. The load may then be Relaxed, so the
        // common case (nobody waiting) costs no RMW.
        fence(Ordering::SeqCst);
        if self.wants_idler.load(Ordering::Relaxed)
            // SeqCst swap: exactly one worker takes the flag and pays for the wake.
            && self.wants_idler.swap(false, Ordering::SeqCst)
        {
            self.wake.signal();
        }
    }

    /// A connection was accepted. The count goes to the scoreboard at once: siblings
    /// balance new connections by it (`idle_split::accept_cap`) and workers decide by the
    /// server's total whether to hold a connection (`idle_split::hold_keep_alive`); a
    /// listener whose connections are all held sleeps, so it would publish late.
    pub fn opened(&self) {
        // Relaxed: a statistic for server-status and the listener's exit condition, which
        // re-reads it on every loop.
        let n = self.open.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        scoreboard::set_connections(self.slot, n);
    }

    /// Stores the current count in the scoreboard again: opens and closes publish it
    /// themselves, but two of them on different threads may store out of order, so the
    /// listener puts the current value back now and then.
    pub fn republish_open(&self) {
        scoreboard::set_connections(self.slot, self.open());
    }

    /// A connection was closed.
    pub fn closed(&self) {
        // Release: the listener that reads 0 (Acquire) to decide it may exit sees every
        // close's effects (the worker's last use of the connection).
        let n = self.open.fetch_sub(1, Ordering::Release).wrapping_sub(1);
        scoreboard::set_connections(self.slot, n);
    }

    /// The open connections of this child's siblings (the current generation's, in its
    /// listener bucket, not quiescing), as they last published them.
    pub fn siblings_open(&self) -> impl Iterator<Item = usize> {
        let slot = self.slot;
        let me = scoreboard::process(slot);
        let slots = (self.split.children() as i32).min(scoreboard::slots());
        (0..slots)
            .filter(move |&s| s != slot)
            .filter(move |&s| {
                let p = scoreboard::process(s);
                p.pid != 0 && !p.quiescing && p.generation == me.generation && p.bucket == me.bucket
            })
            .map(|s| scoreboard::connections(s) as usize)
    }

    /// Open connections now.
    pub fn open(&self) -> u32 {
        // Acquire: pairs with closed.
        self.open.load(Ordering::Acquire)
    }

    /// A module suspended a connection (it owns it now).
    pub fn suspended(&self) {
        // Relaxed: a statistic.
        self.suspended.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections suspended by modules.
    pub fn suspended_count(&self) -> u32 {
        // Relaxed: a statistic.
        self.suspended.load(Ordering::Relaxed)
    }

    /// The child holds as many connections as its open-file limit allows: it accepts no
    /// more until some close.
    pub fn at_file_limit(&self) -> bool {
        // Relaxed: max_open only shrinks, and a stale read costs one connection more or
        // less (the reserve in `open_files` covers it).
        self.open() as usize >= self.max_open.load(Ordering::Relaxed)
    }

    /// Accept met EMFILE or ENFILE: what the child holds now is its budget from now on
    /// (modules hold more descriptors than `open_files` reserved); logged once.
    pub fn out_of_files(&self) {
        let open = (self.open() as usize).max(1);
        // Relaxed: as in at_file_limit.
        self.max_open.fetch_min(open, Ordering::Relaxed);
        if !self.out_of_files.swap(true, Ordering::Relaxed) {
            crate::mpm_log!(
                level::WARNING,
                0,
                "RW00042: accept found no free descriptor with {open} connections open: this child holds at most that many from now on (modules hold more descriptors than rworker keeps free; raise the open-file limit)"
            );
        }
    }
}
