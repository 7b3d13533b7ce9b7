//! One listening socket in a parking child's event set, and the rules for touching it.
//!
//! The socket is registered edge-triggered and exclusive (`Interest::ReadEdgeExclusive`): a
//! new connection wakes one waiter, in one child's set that has a waiter. A woken worker
//! accepts one connection. Deleting the registration and adding it again (`apply`) does
//! two things: the add polls the socket, so connections still queued wake a waiter of this
//! set, and it puts this child at the back of the socket's queue of sets, so the next
//! connection goes to a sibling that waits (children take turns). Deleting it (and not
//! adding it back) is how a child stops accepting: at its open-file limit, at
//! MaxConnectionsPerChild, when it stops.
//!
//! The turn is taken when a new connection stays open after its first response
//! (`Parking::take_turn`), not at every accept. Why turns at all: the kernel gives a new
//! connection to the first set in the socket's queue that has a waiter, so without them
//! the child at the front takes every connection whenever one of its workers has just
//! parked a busy one, and busy keep-alive connections pile up there (one child held 37 of
//! `wrk -c50`'s connections on 25 workers, its siblings 1-3) while siblings' workers idle.
//! Those connections then wait for each other's requests (p99 6-8 ms against the stock
//! worker's 3), and a child with as many busy connections as workers has nobody waiting,
//! so nobody holds (see `worker::HOLD_ON_WORKER`) and every request parks. Taking turns
//! keeps them spread (17/16/17, as `wrk -c50` without reconnects lands). Measured
//! (rworker-ab, Debian's sizing, MaxKeepAliveRequests 100, 5 reps paired against the build
//! without turns, 2026-12-05): keep-alive 50 clients 1.12x / 1.06x the requests (1 B / 4
//! KiB) at 0.88x / 0.96x the CPU per request, p99 2.9 against 7.7 ms. Why not at every
//! accept (as until 2026-12-06): a connection that closes after one response leaves
//! nothing to spread, and the two `epoll_ctl` calls cost a `Connection: close` request
//! about 5 % of the server's CPU (perf, `wrk -c100`, Debian's sizing); paired against
//! turns at every accept (3 reps, 1 B): close 100 clients 1.10x the requests at 0.90x the
//! CPU, keep-alive 50 within the spread (1.02x / 0.96x).
//!
//! The add's poll is also what tells a waiter about connections left in the queue, so
//! nothing else has to: a worker that accepted one re-adds the socket if connections are
//! still queued (they came before its wake's event was collected, and their own wakes
//! found that event pending), and one whose accept failed (a broken accept, no free
//! descriptor) re-adds it too unless it found the queue empty. A connection that comes
//! after the event was collected wakes a waiter by itself (edge-triggered). If no worker
//! waits in the set at that moment, the event stays in the set's ready list for the next
//! one that waits.
//!
//! Taking the socket out of the set (and not adding it back) drops a new connection's
//! event that the set took and no worker collected yet: the kernel told no other set of
//! it. So if connections are queued right after that delete, the bucket's relay is rung
//! (see `relay`), and a sibling's add polls them.
//!
//! Two things to keep straight without a lock:
//! - Registration changes come from any worker and from the main thread: they are made
//!   under the child's `rworker_queue::Serial` ([`Gate::apply`] takes its [`Holder`]); a thread
//!   asks for one with [`Gate::request`] first, so that the holder re-adds only the gates
//!   that asked.
//! - Closing the socket (a stop) must wait until no worker is in accept on it, and until it
//!   is out of the set (an open description that other processes share stays registered
//!   after our close, and could not be deleted any more). `inside` counts the workers in
//!   accept with a CLOSING bit that keeps new ones out; the close happens in `apply`, by the
//!   holder, once the socket is out of the set and nobody is inside.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::ffi::epoll::{Epoll, Interest};
use crate::ffi::listen::{Accepted, PolledListener};
use crate::ffi::pool::Pool;
use crate::mpm::parking::relay::Relay;
use rworker_queue::Holder;

/// `inside`: no worker may enter any more; the socket closes once the last one left.
const CLOSING: u32 = 1 << 31;

/// One listening socket of the child (see the module doc).
#[derive(Debug)]
pub struct Gate {
    sock: PolledListener,
    /// Its key in the event set.
    key: u64,
    /// Workers in accept now, and CLOSING.
    inside: AtomicU32,
    /// A change was asked for since the holder last applied one.
    requested: AtomicBool,
    /// Whether the socket is in the set (read and written only under [`Holder`]).
    registered: AtomicBool,
    /// Whether the child's copy is closed (read and written only under [`Holder`]).
    closed: AtomicBool,
}

/// A worker in accept on a gate (from [`Gate::enter`] to [`Inside::leave`]).
pub struct Inside<'a> {
    gate: &'a Gate,
}

impl Gate {
    /// `sock`, reported in the set with `key`; not registered yet (see [`Gate::apply`]).
    pub fn new(sock: PolledListener, key: u64) -> Gate {
        Gate {
            sock,
            key,
            inside: AtomicU32::new(0),
            requested: AtomicBool::new(false),
            registered: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }
    }

    /// Enters accept, unless the gate is closing (or, for an accept function that is not
    /// httpd's own, another worker is inside).
    pub fn enter(&self) -> Option<Inside<'_>> {
        let limit = if self.sock.accepts_concurrently() {
            CLOSING - 1
        } else {
            1
        };
        // Relaxed load, Acquire CAS: pairs with the Release fetch_sub of the last worker to
        // leave, so a serial accept function's calls are ordered.
        let mut w = self.inside.load(Ordering::Relaxed);
        loop {
            if w & CLOSING != 0 || w >= limit {
                return None;
            }
            match self
                .inside
                .compare_exchange_weak(w, w + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Some(Inside { gate: self }),
                Err(now) => w = now,
            }
        }
    }

    /// No worker enters from now on; the socket closes once it is out of the set and the
    /// last worker inside has left (the caller then asks for a change and runs the serial).
    pub fn begin_close(&self) {
        // Relaxed: apply's Acquire load of `inside` pairs with the leavers' Release; this
        // bit only has to be in `inside`'s modification order before the apply that reads
        // it, which the serial's request (Release) and the holder's Acquire order.
        self.inside.fetch_or(CLOSING, Ordering::Relaxed);
    }

    /// Whether [`Gate::begin_close`] was called.
    pub fn is_closing(&self) -> bool {
        // Relaxed: read by the holder after the serial's Acquire (see begin_close).
        self.inside.load(Ordering::Relaxed) & CLOSING != 0
    }

    /// Asks for this gate's registration to be brought in line by the next [`Gate::apply`]
    /// (the caller then runs the serial).
    pub fn request(&self) {
        // Relaxed: published by the serial's Release request that follows.
        self.requested.store(true, Ordering::Relaxed);
    }

    /// If a change was requested: brings the registration in line with `wanted()`
    /// (evaluated now): in the set (deleted and added again, which polls the socket anew)
    /// or out of it, ringing `relay` if connections are queued once it is out; and closes
    /// the socket once it is closing, out of the set and nobody is inside.
    pub fn apply(&self, _: &Holder, set: &Epoll, wanted: &dyn Fn() -> bool, relay: Option<&Relay>) {
        // Relaxed: the serial's Acquire already ordered the request before this.
        if !self.requested.swap(false, Ordering::Relaxed) || self.closed.load(Ordering::Relaxed) {
            return;
        }
        // Acquire: pairs with the leavers' Release, so their accepts are done before a close.
        let inside = self.inside.load(Ordering::Acquire);
        let closing = inside & CLOSING != 0;
        let fd = self.sock.os_fd();
        let was = self.registered.load(Ordering::Relaxed);
        if !closing && wanted() {
            if was {
                let _ = set.delete(fd);
            }
            let ok = set.add(fd, Interest::ReadEdgeExclusive, self.key).is_ok();
            self.registered.store(ok, Ordering::Relaxed);
        } else if was {
            let _ = set.delete(fd);
            self.registered.store(false, Ordering::Relaxed);
            if let Some(relay) = relay {
                // SAFETY: not closed (checked above; only the holder closes, below).
                if unsafe { self.sock.has_queued() } {
                    relay.ring();
                }
            }
        }
        if closing && inside & !CLOSING == 0 && !self.registered.load(Ordering::Relaxed) {
            // SAFETY: closing keeps workers out and none is inside (read with Acquire
            // after CLOSING was set, so no accept is running or will run), and the socket
            // is out of the set.
            unsafe { self.sock.close() };
            self.closed.store(true, Ordering::Relaxed);
        }
    }
}

impl Inside<'_> {
    /// Accepts one connection into `ptrans`, without blocking.
    pub fn accept(&self, ptrans: &mut Pool) -> Accepted {
        // SAFETY: we are inside the gate: it is not closed (closing waits for us), and a
        // serial accept function has only us inside (`enter`'s limit).
        unsafe { self.gate.sock.accept(ptrans) }
    }

    /// Whether connections wait in the socket's queue now.
    pub fn has_queued(&self) -> bool {
        // SAFETY: we are inside the gate: it is not closed (closing waits for us).
        unsafe { self.gate.sock.has_queued() }
    }

    /// Leaves accept.
    pub fn leave(self) {}
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        // Release: pairs with the Acquire of the next serial enter and of apply's load
        // before a close.
        self.gate.inside.fetch_sub(1, Ordering::Release);
    }
}
