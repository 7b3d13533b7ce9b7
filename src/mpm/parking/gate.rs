//! One listening socket in a parking child's event set, and the rules for touching it.
//!
//! The socket is registered level-triggered and exclusive (`Interest::ReadLevelExclusive`):
//! a new connection wakes one waiter, in one child's set that has a waiter, and a woken
//! worker accepts one connection. Level-triggered, the set reports the socket again to the
//! next waiter while connections are queued, so a burst is spread over the waiters without
//! anybody polling the queue. Deleting the registration and adding it again (`apply`) puts
//! this child at the back of the socket's queue of sets, so the next connection goes to a
//! sibling that waits (children take turns), and polls the socket anew. Deleting it (and
//! not adding it back) is how a child stops accepting: at its open-file limit, at
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
//! Why level-triggered: until 2026-12-07 the socket was edge-triggered. The kernel wakes a
//! waiter for every new connection, but an edge-triggered socket whose event is already
//! pending reports one event for all the connections that came meanwhile: the waiter woken
//! for the second finds nothing and sleeps again. So a worker that had accepted one
//! polled the queue (a `poll` per connection) and, finding more, deleted and added the
//! socket again (two `epoll_ctl` calls and a wake). Level-triggered, the event stays in
//! the set's ready list while connections are queued, and the waiter woken for the second
//! connection gets it. The cost: once the queue is empty, one more waiter may be woken for
//! nothing (the kernel wakes a waiter when it puts the socket back on the ready list, and
//! that waiter finds it not ready). Measured (rworker-ab, Debian's sizing, 1 B, 5 reps,
//! edge- against level-triggered in one interleaved run, 2026-12-07): `Connection: close`
//! 50 / 100 / 400 clients 1.11x / 1.07x / 1.04x the requests at 0.87x / 0.91x / 0.94x the
//! CPU per request, keep-alive 50 / 100 / 400 within the spread; at four clients (`--percon`,
//! ab -c 4, 5 reps) 87.5 against 87.1 µs CPU per connection. If no worker waits in the set
//! when a connection comes, the event stays in its ready list for the next one that waits.
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
//!   after our close, and could not be deleted any more). `inside`
//!   (`rworker_queue::Occupancy`) counts the workers in accept and keeps new ones out once
//!   a close began; the close happens in `apply`, by the holder, once the socket is out of
//!   the set and nobody is inside. Whoever sees the last worker leave a closing gate asks
//!   for that apply: the stop's own apply if nobody was inside, else the last worker
//!   leaving ([`Inside::leave`] says so), so the socket closes as soon as it can, not at the
//!   child's exit.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::ffi::epoll::{Epoll, Interest};
use crate::ffi::listen::{Accepted, PolledListener};
use crate::ffi::log::level;
use crate::ffi::pool::Pool;
use crate::mpm::parking::relay::Relay;
use rworker_queue::{Holder, Occupancy};

/// One listening socket of the child (see the module doc).
#[derive(Debug)]
pub struct Gate {
    sock: PolledListener,
    /// Its key in the event set.
    key: u64,
    /// Workers in accept now, and whether a close began.
    inside: Occupancy,
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
            inside: Occupancy::new(),
            requested: AtomicBool::new(false),
            registered: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }
    }

    /// Enters accept, unless the gate is closing (or, for an accept function that is not
    /// httpd's own, another worker is inside).
    pub fn enter(&self) -> Option<Inside<'_>> {
        let limit = if self.sock.accepts_concurrently() {
            u32::MAX
        } else {
            1
        };
        // `then`, not `then_some`: an `Inside` built for a refused enter would leave on its
        // drop. Until 2026-12-07 it did: a worker woken for the socket after a graceful
        // stop began took one off the count of the workers inside, so the real last one
        // out saw no close pending and nobody closed the socket until the child exited.
        self.inside.enter(limit).then(|| Inside { gate: self })
    }

    /// No worker enters from now on; the socket closes once it is out of the set and the
    /// last worker inside has left (the caller then asks for a change and runs the serial;
    /// should a worker still be inside, its leave asks again).
    pub fn begin_close(&self) {
        // Whether nobody was inside does not matter here: the caller's apply looks.
        let _ = self.inside.begin_close();
    }

    /// Whether [`Gate::begin_close`] was called.
    pub fn is_closing(&self) -> bool {
        self.inside.is_closing()
    }

    /// Asks for this gate's registration to be brought in line by the next [`Gate::apply`]
    /// (the caller then runs the serial).
    pub fn request(&self) {
        // Release: a holder whose swap reads this store (it may, before the serial's
        // request that follows reaches it) sees what this thread wrote before asking (a
        // close's lower count, say), not an older state to apply.
        self.requested.store(true, Ordering::Release);
    }

    /// If a change was requested: brings the registration in line with `wanted` (the
    /// child accepts): in the set (deleted and added again, which polls the socket anew)
    /// or out of it, ringing `relay` if connections are queued once it is out; and closes
    /// the socket once it is closing, out of the set and nobody is inside. False when the
    /// set refused to take the socket (it is out: the caller stops the child accepting
    /// until a close, `shortage`).
    #[must_use]
    pub fn apply(&self, _: &Holder, set: &Epoll, wanted: bool, relay: Option<&Relay>) -> bool {
        // Acquire: pairs with `request`'s Release (see there).
        if !self.requested.swap(false, Ordering::Acquire) || self.closed.load(Ordering::Relaxed) {
            return true;
        }
        let mut taken = true;
        let closing = self.inside.is_closing();
        let fd = self.sock.os_fd();
        let was = self.registered.load(Ordering::Relaxed);
        // Out of the set (a delete drops an event the set took and no worker collected
        // yet): connections still queued go to a sibling, through the relay.
        let pass_on = || {
            if let Some(relay) = relay {
                // SAFETY: not closed (checked above; only the holder closes, below).
                if unsafe { self.sock.has_queued() } {
                    relay.ring();
                }
            }
        };
        if !closing && wanted {
            if was {
                let _ = set.delete(fd);
            }
            match set.add(fd, Interest::ReadLevelExclusive, self.key) {
                Ok(()) => self.registered.store(true, Ordering::Relaxed),
                Err(errno) => {
                    self.registered.store(false, Ordering::Relaxed);
                    taken = false;
                    crate::mpm_log!(
                        level::ERR,
                        errno,
                        "RW00049: child {} could not put listening socket {fd} in its event set (fs.epoll.max_user_watches, which every process of the user shares, or memory): it takes no new connections until one of its own closes, and retires, sick, if it holds none; its queued connections go to sibling children",
                        std::process::id()
                    );
                    pass_on();
                }
            }
        } else if was {
            let _ = set.delete(fd);
            self.registered.store(false, Ordering::Relaxed);
            pass_on();
        }
        let vacated = self.inside.is_vacated();
        let registered = self.registered.load(Ordering::Relaxed);
        if vacated && !registered {
            // SAFETY: a close began and nobody is inside (read with Acquire, after the
            // leavers' Release, so no accept is running or will run), and the socket is
            // out of the set.
            unsafe { self.sock.close() };
            self.closed.store(true, Ordering::Relaxed);
        }
        if closing {
            crate::mpm_log!(
                level::DEBUG,
                0,
                "RW00051: closing listening socket {fd}: was in the set {was}, in it now {registered}, nobody in accept {vacated}, closed {}",
                vacated && !registered
            );
        }
        taken
    }
}

impl Inside<'_> {
    /// Accepts one connection into `ptrans`, without blocking.
    pub fn accept(&self, ptrans: &mut Pool) -> Accepted {
        // SAFETY: we are inside the gate: it is not closed (closing waits for us), and a
        // serial accept function has only us inside (`enter`'s limit).
        unsafe { self.gate.sock.accept(ptrans) }
    }

    /// Leaves accept; true when this was the last worker inside a gate that is closing:
    /// the caller then asks for a change (and runs the serial), which closes the socket.
    #[must_use]
    pub fn leave(self) -> bool {
        let gate = self.gate;
        std::mem::forget(self);
        gate.inside.leave()
    }
}

impl Drop for Inside<'_> {
    /// Leaves without [`Inside::leave`] (an unwinding panic, which aborts anyway): the
    /// socket then closes at the child's end.
    fn drop(&mut self) {
        let _ = self.gate.inside.leave();
    }
}
