//! How many connections a parking child may hold when accept meets EMFILE or ENFILE
//! (modules hold more descriptors than `crate::mpm::open_files` reserved, or the system is
//! out). Pure: the caller passes the count of connections it holds; unit-tested.
//!
//! - At a failure at full budget the child holds what it has and takes no more until some
//!   close, then tries its full budget again. Each such failure in a row waits for twice as
//!   many closes as the last before its retry, so a shortage that lasts costs one failed
//!   accept (and the core's AH02179 line) per 1, 2, 4, ... closes, not one per close; an
//!   accept that goes through at full budget ends the episode.
//! - A failure while already lowered is the same shortage seen again, not a retry that
//!   failed: the set wakes more than one waiter for a new connection, and Linux takes the
//!   new descriptor before it looks at the queue, so every accept tried at a shortage fails,
//!   whether or not it would have had a connection. It lowers the bound to what the child
//!   holds now and leaves the wait as it was. (Until 2026-12-07 it doubled the wait: two
//!   workers that met one shortage together made the child wait for two closes, and a child
//!   given back its descriptors with one close took nothing more until a second one came.)
//!
//! Every access is Relaxed: these steer when a retry comes, and a stale value moves one
//! retry by a close; the close that re-settles the child's sockets reads the bound after
//! its own decrement.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};

/// The most closes a lowering waits for.
const MAX_WAIT: u32 = 1 << 20;

pub struct Shortage {
    /// The most connections the child may hold for its open-file limit.
    budget: usize,
    /// The most it holds now: `budget`, or fewer after a failure.
    bound: AtomicUsize,
    /// Closes to wait for before trying `budget` again (0: not lowered).
    closes_left: AtomicU32,
    /// How many closes the last lowering waited for (0: none in this episode).
    last_wait: AtomicU32,
}

/// What a failed accept did.
#[derive(Debug, PartialEq, Eq)]
pub enum Lowered {
    /// The first lowering of an episode, to this many connections: worth a warning.
    First(usize),
    /// A lowering in a row (a retry at full budget failed again), or the same shortage seen
    /// by another accept: nothing to say again.
    Again,
}

impl Shortage {
    pub fn new(budget: usize) -> Shortage {
        Shortage {
            budget,
            bound: AtomicUsize::new(budget),
            closes_left: AtomicU32::new(0),
            last_wait: AtomicU32::new(0),
        }
    }

    /// Whether a child holding `open` connections takes no more.
    pub fn at_limit(&self, open: usize) -> bool {
        open >= self.bound.load(Relaxed)
    }

    /// An accept failed for want of a descriptor while the child holds `open` (at least 1;
    /// holding none, the child retires instead).
    pub fn failed(&self, open: usize) -> Lowered {
        let open = open.max(1);
        // Only the failure that finds the full budget lowers anew; one that finds the bound
        // lowered already met the same shortage (module doc).
        if self
            .bound
            .compare_exchange(self.budget, open, Relaxed, Relaxed)
            .is_err()
        {
            self.bound.fetch_min(open, Relaxed);
            return Lowered::Again;
        }
        let wait = self.last_wait.load(Relaxed).saturating_mul(2).clamp(1, MAX_WAIT);
        self.last_wait.store(wait, Relaxed);
        self.closes_left.store(wait, Relaxed);
        if wait == 1 {
            Lowered::First(open)
        } else {
            Lowered::Again
        }
    }

    /// A connection of the child closed: after as many closes as the lowering asked for,
    /// the full budget again.
    pub fn closed(&self) {
        let left = self.closes_left.load(Relaxed);
        if left == 1 && self.closes_left.swap(0, Relaxed) == 1 {
            self.bound.store(self.budget, Relaxed);
        } else if left > 1 {
            let _ = self
                .closes_left
                .compare_exchange(left, left - 1, Relaxed, Relaxed);
        }
    }

    /// An accept went through: at full budget, a later failure starts a new episode.
    pub fn accepted(&self) {
        if self.closes_left.load(Relaxed) == 0 {
            self.last_wait.store(0, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_holds_the_child_at_what_it_has_until_one_close() {
        let s = Shortage::new(100);
        assert!(!s.at_limit(10));
        assert_eq!(s.failed(10), Lowered::First(10));
        assert!(s.at_limit(10), "takes no more");
        s.closed();
        assert!(!s.at_limit(10) && !s.at_limit(99), "the full budget after one close");
        assert!(s.at_limit(100));
    }

    #[test]
    fn the_same_shortage_seen_by_more_accepts_waits_for_one_close_only() {
        let s = Shortage::new(100);
        assert_eq!(s.failed(10), Lowered::First(10));
        assert_eq!(s.failed(10), Lowered::Again, "no second warning");
        assert_eq!(s.failed(10), Lowered::Again);
        s.closed();
        assert!(!s.at_limit(10), "one close gives the budget back");
    }

    #[test]
    fn a_failure_while_lowered_lowers_to_what_the_child_holds_now() {
        let s = Shortage::new(100);
        s.failed(10);
        assert_eq!(s.failed(7), Lowered::Again);
        assert!(s.at_limit(7));
        assert_eq!(s.failed(9), Lowered::Again);
        assert!(s.at_limit(7), "never raised by a failure");
    }

    #[test]
    fn retries_that_fail_in_a_row_wait_for_twice_as_many_closes() {
        let s = Shortage::new(100);
        let mut waits = Vec::new();
        for _ in 0..4 {
            s.failed(10);
            let mut closes = 0;
            while s.at_limit(10) {
                s.closed();
                closes += 1;
            }
            waits.push(closes);
            // The retry at full budget fails again (no accept went through).
        }
        assert_eq!(waits, [1, 2, 4, 8]);
    }

    #[test]
    fn an_accept_at_full_budget_ends_the_episode() {
        let s = Shortage::new(100);
        s.failed(10);
        s.closed();
        s.failed(10);
        s.accepted();
        // Still lowered (two closes asked): the episode goes on.
        s.closed();
        s.closed();
        s.accepted();
        assert_eq!(s.failed(10), Lowered::First(10), "a new episode warns again");
        s.closed();
        assert!(!s.at_limit(10));
    }

    #[test]
    fn the_wait_stops_doubling_at_its_ceiling() {
        let s = Shortage::new(100);
        s.last_wait.store(MAX_WAIT, Relaxed);
        s.failed(10);
        assert_eq!(s.closes_left.load(Relaxed), MAX_WAIT);
    }
}
