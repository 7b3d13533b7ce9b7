//! How many connections a parking child takes: at most its budget for its open-file limit
//! (`crate::mpm::open_files`), and none more, until one of its connections closes, once it
//! was short of what it needs to take one: a descriptor (accept met EMFILE: modules hold
//! more descriptors than the budget left free), or a place in its event set for a listening
//! socket (the set refused it: `fs.epoll.max_user_watches`, memory; see `gate`).
//!
//! The rule is event's (stop accepting at a shortage) with one difference: a child that
//! holds connections keeps them, since retiring would cut them, and tries again at its next
//! close, which frees a descriptor. A child that holds nothing has no close to wait for: it
//! retires, sick, as the stock MPMs' children do at any EMFILE. (ENFILE, the system's table
//! full, is not this: the child retires sick whatever it holds, `crate::ffi::listen`.)
//!
//! The mark and the close race: a worker marks the child short, then counts what it holds
//! ([`Shortage::failed`]); a close lowers the count, then clears the mark ([`Shortage::closed`]
//! runs after `Drain::closed`'s fence, and before a second fence that orders the clear
//! before the close's look at whether the listening sockets were taken out). Either the close clears this mark, or the marker
//! sees the close: holding nothing then, it retires; holding more, their closes come later
//! and clear it. So a marked child always has a close to wait for.
//!
//! Every access is Relaxed: the two fences of that pair (`publish_then_check`) order what
//! must be ordered, and the other readers only steer when the child accepts (a stale read
//! moves one accept by one close; the close that re-settles the listening sockets reads
//! the mark after its own fence).

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

use rworker_queue::publish_then_check;

/// The child's cap (see the module doc).
pub struct Shortage {
    /// The most connections the child may hold for its open-file limit.
    budget: usize,
    /// What the child was short of (a [`Want`]'s tag; 0: nothing): it takes no more
    /// connections until one closes.
    short: AtomicU8,
}

/// What a child was short of to take a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Want {
    /// A descriptor: accept met EMFILE (its open-file limit, RW00042).
    Descriptor = 1,
    /// A place in its event set for a listening socket (RW00049).
    Watch = 2,
}

/// What a shortage leaves the child to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    /// It takes no more until a close; `first`: this failure marked it (worth a warning;
    /// other waiters that met the same shortage find it marked).
    Short { first: bool },
    /// It holds nothing, so no close will come: it retires, sick.
    Retire,
}

impl Shortage {
    pub fn new(budget: usize) -> Shortage {
        Shortage {
            budget,
            short: AtomicU8::new(0),
        }
    }

    /// Whether a child holding `open` connections takes no more.
    pub fn at_limit(&self, open: usize) -> bool {
        open >= self.budget || self.short.load(Relaxed) != 0
    }

    /// Whether a child holding `open` connections takes no more for its open-file limit
    /// (what the parent is told: RW00041).
    pub fn at_file_limit(&self, open: usize) -> bool {
        open >= self.budget || self.short.load(Relaxed) == Want::Descriptor as u8
    }

    /// The child was short of `want`: marks it, then reads what it holds with `open` (after
    /// the fence: against [`Shortage::closed`]).
    pub fn failed(&self, want: Want, open: impl FnOnce() -> usize) -> Failure {
        let (first, open) = publish_then_check(
            || self.short.swap(want as u8, Relaxed) == 0,
            |first| (first, open()),
        );
        match open {
            0 => Failure::Retire,
            _ => Failure::Short { first },
        }
    }

    /// One of the child's connections closed and its descriptor is free (called after the
    /// close's decrement of the open count and its fence): the child may take connections
    /// again. A connection a module took over (SUSPENDED) frees nothing: not this.
    pub fn closed(&self) {
        self.short.store(0, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_holds_the_child_at_what_it_has_until_one_close() {
        let s = Shortage::new(100);
        assert!(!s.at_limit(10));
        assert_eq!(
            s.failed(Want::Descriptor, || 10),
            Failure::Short { first: true }
        );
        assert!(s.at_limit(10) && s.at_limit(1), "takes no more");
        s.closed();
        assert!(
            !s.at_limit(9) && !s.at_limit(99),
            "the full budget after one close"
        );
        assert!(s.at_limit(100));
    }

    #[test]
    fn the_same_shortage_met_by_more_waiters_warns_once_and_waits_for_one_close() {
        let s = Shortage::new(100);
        assert_eq!(
            s.failed(Want::Descriptor, || 10),
            Failure::Short { first: true }
        );
        assert_eq!(
            s.failed(Want::Descriptor, || 10),
            Failure::Short { first: false }
        );
        assert_eq!(
            s.failed(Want::Descriptor, || 9),
            Failure::Short { first: false }
        );
        s.closed();
        assert!(!s.at_limit(10), "one close gives the budget back");
    }

    #[test]
    fn a_child_that_holds_nothing_retires() {
        let s = Shortage::new(100);
        assert_eq!(s.failed(Want::Descriptor, || 0), Failure::Retire);
        // Also when a close came between the accept and the mark: the close cleared
        // nothing, and the count it lowered says so.
        let s = Shortage::new(100);
        s.closed();
        assert_eq!(s.failed(Want::Descriptor, || 0), Failure::Retire);
    }

    #[test]
    fn a_failure_after_the_close_it_raced_waits_for_the_next_close() {
        // The close came first and found nothing to clear; the child still holds one
        // connection, whose close clears the mark.
        let s = Shortage::new(100);
        s.closed();
        assert_eq!(
            s.failed(Want::Descriptor, || 1),
            Failure::Short { first: true }
        );
        assert!(s.at_limit(1));
        s.closed();
        assert!(!s.at_limit(0));
    }

    #[test]
    fn a_refused_socket_stops_the_child_but_is_not_its_file_limit() {
        let s = Shortage::new(100);
        assert_eq!(s.failed(Want::Watch, || 10), Failure::Short { first: true });
        assert!(s.at_limit(10) && !s.at_file_limit(10));
        assert_eq!(
            s.failed(Want::Descriptor, || 10),
            Failure::Short { first: false }
        );
        assert!(s.at_file_limit(10));
        s.closed();
        assert!(!s.at_limit(10) && !s.at_file_limit(10));
        assert_eq!(s.failed(Want::Watch, || 0), Failure::Retire);
    }

    #[test]
    fn the_budget_holds_without_a_shortage() {
        let s = Shortage::new(3);
        assert!(!s.at_limit(2));
        assert!(s.at_limit(3));
        s.closed();
        assert!(s.at_limit(3), "a close does not raise the budget");
    }
}
