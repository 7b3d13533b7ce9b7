//! The bucket's relay: how a child that took the wake for a new connection, and will not
//! accept it, tells a sibling in another process.
//!
//! The kernel tells one set per new connection (`EPOLLEXCLUSIVE`): the first in the
//! listening socket's queue of sets that has a waiter. If that child then takes its socket
//! out of its set (it stops, reaches MaxConnectionsPerChild or its open-file limit) before
//! a worker collected the event, the event goes with the registration, and the connection
//! waits in the socket's queue until the next one arrives: after a graceful restart of an
//! idle server, 3-10 ms after the signal, in 2-4 of 160 tries
//! (`tests/graceful.rs`, `a_lone_connection_right_after_a_graceful_restart_is_answered`).
//!
//! So every child of a bucket that accepts also holds the bucket's relay in its set, an
//! eventfd that the parent made once and every child inherits, registered the same way (one
//! set with a waiter is told per ring). A child whose listening socket leaves its set while
//! connections are queued rings it; the child told re-adds its own listening sockets, and
//! the add polls them, so a waiter there accepts what is queued. A child that stops
//! accepting takes the relay out of its set too, and rings it once as it does: it may have
//! taken a ring meant for a child that accepts.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::ffi::epoll::{Epoll, Interest, WakeFd};
use rworker_queue::Holder;

/// The relay's registration in one child's set.
#[derive(Debug)]
pub struct Relay {
    bell: WakeFd,
    /// Its key in the set.
    key: u64,
    /// Whether it is in the set (read and written only under [`Holder`]).
    registered: AtomicBool,
}

impl Relay {
    /// The child's copy `bell` of its bucket's relay, reported in the set with `key`; not
    /// registered yet.
    pub fn new(bell: WakeFd, key: u64) -> Relay {
        Relay {
            bell,
            key,
            registered: AtomicBool::new(false),
        }
    }

    /// Tells one sibling that accepts (or the next child to register) to look at the
    /// listening sockets.
    pub fn ring(&self) {
        self.bell.signal();
    }

    /// A worker woken by the relay: consumes the rings (the caller then re-adds its
    /// listening sockets).
    pub fn answer(&self) {
        self.bell.clear();
    }

    /// Puts the relay in the set or takes it out, as `accepting` says; rings it as it
    /// leaves (see the module doc).
    pub fn apply(&self, _: &Holder, set: &Epoll, accepting: bool) {
        // Relaxed: only the holder reads and writes it, and holders are ordered by the
        // serial's word (its Acquire on taking BUSY, Release on letting go).
        let was = self.registered.load(Ordering::Relaxed);
        if accepting && !was {
            let ok = set
                .add(self.bell.fd(), Interest::ReadEdgeExclusive, self.key)
                .is_ok();
            self.registered.store(ok, Ordering::Relaxed);
        } else if !accepting && was {
            let _ = set.delete(self.bell.fd());
            self.registered.store(false, Ordering::Relaxed);
            self.ring();
        }
    }
}
