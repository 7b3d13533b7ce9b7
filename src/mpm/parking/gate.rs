//! One listening socket in a parking child's event set, and the rules for touching it.
//!
//! The socket is registered level-triggered and exclusive (`Interest::ReadLevelExclusive`):
//! a new connection wakes one waiter, in one child's set that has a waiter, and a woken
//! worker accepts one connection. The set reports the socket again to the next waiter
//! while connections are queued, so a burst is spread over the waiters without anybody
//! polling the queue; the cost is that once the queue is empty, one more waiter may be
//! woken for nothing. If no worker waits when a connection comes, the event stays in the
//! set's ready list for the next one that waits.
//!
//! Children take turns: deleting the registration and adding it again ([`Gate::apply`])
//! puts this child at the back of the socket's queue of sets, so the next connection goes
//! to a sibling that waits, and polls the socket anew. The kernel gives a new connection to
//! the first set in that queue that has a waiter; without turns, busy keep-alive
//! connections pile up in the child at the front (whenever one of its workers has just
//! parked one) and wait there for each other's requests, and a child with as many busy
//! connections as workers has nobody waiting, so nobody holds (`worker::HOLD_ON_WORKER`).
//! The turn is taken when a new connection stays open after its first response
//! (`Parking::take_turn`), not at every accept: a connection that closes after one
//! response leaves nothing to spread, and two `epoll_ctl` calls per connection are a
//! measurable share of a short request's CPU. The measurements behind these choices, and the
//! edge-triggered design before, are in docs/history.md ("The listening socket in the event
//! set").
//!
//! # When the socket is in the set
//!
//! Once the last requested change is applied, the socket is in its child's set exactly
//! when the child accepts (`Parking::accepting`: not stopping, not broken,
//! MaxConnectionsPerChild not spent, not held back by its open-file budget or a shortage,
//! `shortage`) and the set took it. Two rules keep that without a lock:
//! - Whoever changes what `accepting` reads settles the gates afterwards
//!   (`Parking::settle`: [`Gate::request`], then [`Gate::apply`] under the child's
//!   `rworker_queue::Serial`): the accept that reaches a limit or breaks, the stop, a turn,
//!   a ring of the relay, the start.
//! - A close puts them back: the holder that takes them out while the child is held back
//!   marks that (`files_blocked`), then re-reads the open count; a close lowers the count,
//!   then clears its shortage mark and reads `files_blocked` (a Dekker pair through
//!   `publish_then_check`), so one of the two settles again.
//!
//! A set that refuses the socket (EPOLL_CTL_ADD fails: `fs.epoll.max_user_watches`, memory;
//! RW00049) leaves it out and holds the child back until its next close, which tries again
//! (`shortage::Want::Watch`); a child that holds nothing has no close to wait for, and
//! retires sick. The relay (`relay`) is in the set on the same condition, and out while a
//! gate is closing.
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
