//! [`ConnectionBudget`]: MaxConnectionsPerChild where several threads of a child accept at
//! once (idle workers blocked in accept, or a parking child's workers woken by its event
//! set). A connection is reserved before the accept and given back if none came, so a child
//! never accepts more than the limit, and the child retires when the limit is *accepted*,
//! not when it is merely reserved (workers waiting to accept must not retire an idle child).
//!
//! In a child's last ThreadsPerChild connections more workers are idle than connections are
//! left. Those that find nothing to reserve sleep on the budget
//! ([`ConnectionBudget::reserve_or_wait`]) until a reservation comes back
//! ([`ConnectionBudget::release`]) or the child stops ([`ConnectionBudget::close`]): the
//! eventcount protocol of `parker` (a waiter reads the sequence word, re-checks, and sleeps
//! only while the word still holds what it read; a waker changes the condition, then bumps,
//! then wakes every sleeper, with no system call when none sleeps). So such a worker costs
//! nothing while its child is quiet (a 10 ms poll cost an idle child about 100 wake-ups a
//! second per worker, measured: 496 a second with MaxConnectionsPerChild 30 after 10
//! connections, 25 workers).

use crate::parker::SeqWord;
use crate::sync::{AtomicBool, AtomicU64, Ordering};

/// One child's MaxConnectionsPerChild (see the module doc).
#[derive(Debug)]
pub struct ConnectionBudget {
    /// Connections neither accepted nor reserved (`u64::MAX`: no limit).
    left: AtomicU64,
    /// Connections accepted.
    accepted: AtomicU64,
    /// MaxConnectionsPerChild (`u64::MAX`: none).
    limit: u64,
    /// The child stops: waiting workers leave.
    closed: AtomicBool,
    /// Where workers that found nothing to reserve sleep; bumped after each change that may
    /// end their wait (a reservation given back, the close).
    word: SeqWord,
}

impl ConnectionBudget {
    /// A budget of `max` connections (0: unlimited, as MaxConnectionsPerChild 0).
    pub fn new(max: u64) -> ConnectionBudget {
        let limit = if max == 0 { u64::MAX } else { max };
        ConnectionBudget {
            left: AtomicU64::new(limit),
            accepted: AtomicU64::new(0),
            limit,
            closed: AtomicBool::new(false),
            word: SeqWord::new(),
        }
    }

    /// Reserves a connection for an accept; false when every one left is reserved.
    pub fn reserve(&self) -> bool {
        // Relaxed: a counter that guards no other memory. A waiter that must see a
        // reservation given back reads it after its Acquire load of the word, which a
        // bump after that release made (see reserve_or_wait).
        self.limit == u64::MAX
            || self
                .left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
    }

    /// Reserves a connection, sleeping while every one left is reserved. False once the
    /// budget is closed (the child stops) and nothing was reserved.
    pub fn reserve_or_wait(&self) -> bool {
        loop {
            // Read the word before the re-check: a release or close after this read bumps
            // it, so the sleep below returns at once (parker's contract). Acquire (in
            // load): a bumped value read here makes what came before that bump (the count
            // given back, the close) visible to the re-check.
            let seen = self.word.load();
            if self.reserve() {
                return true;
            }
            if self.is_closed() {
                return false;
            }
            self.word.wait(seen);
        }
    }

    /// Whether the limit is accepted in full (a child with no limit never is).
    pub fn spent(&self) -> bool {
        // Relaxed: as in reserve.
        self.limit != u64::MAX && self.accepted.load(Ordering::Relaxed) >= self.limit
    }

    /// Gives back a reservation whose accept gave nothing, and wakes the workers that wait
    /// for one.
    pub fn release(&self) {
        if self.limit != u64::MAX {
            // Relaxed: published by the bump (SeqCst, so also Release) that follows.
            self.left.fetch_add(1, Ordering::Relaxed);
            self.word.bump();
            self.word.wake_all();
        }
    }

    /// The child stops: every worker waiting in [`ConnectionBudget::reserve_or_wait`]
    /// returns false, now and from now on unless a connection is left to reserve.
    pub fn close(&self) {
        // Relaxed: published by the bump that follows, as in release.
        self.closed.store(true, Ordering::Relaxed);
        self.word.bump();
        self.word.wake_all();
    }

    fn is_closed(&self) -> bool {
        // Relaxed: read after the Acquire load of the word in reserve_or_wait (see there).
        self.closed.load(Ordering::Relaxed)
    }

    /// Counts a reserved connection as accepted; true exactly once, for the one that
    /// reaches the limit.
    pub fn accepted(&self) -> bool {
        // Relaxed: as in reserve.
        self.limit != u64::MAX && self.accepted.fetch_add(1, Ordering::Relaxed) + 1 == self.limit
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::ConnectionBudget;
    use std::sync::Arc;
    use std::thread;

    #[test]
    fn reservations_never_exceed_the_limit_and_only_accepts_spend_it() {
        let b = ConnectionBudget::new(3);
        // Three workers wait in accept; a fourth finds nothing left to reserve.
        assert!(b.reserve() && b.reserve() && b.reserve());
        assert!(!b.reserve());
        // One is interrupted (a signal): its reservation comes back.
        b.release();
        assert!(b.reserve());
        // Waiting reserved nothing away for good: the child stops only on the third accept.
        assert!(!b.accepted() && !b.accepted());
        assert!(
            b.accepted(),
            "the third accepted connection reaches the limit"
        );
        assert!(!b.reserve(), "spent");
    }

    #[test]
    fn zero_means_no_limit() {
        let b = ConnectionBudget::new(0);
        assert!((0..10_000).all(|_| b.reserve() && !b.accepted()));
        assert!(b.reserve_or_wait());
    }

    #[test]
    fn waiting_workers_take_what_comes_back_and_leave_on_close() {
        let b = Arc::new(ConnectionBudget::new(2));
        assert!(b.reserve() && b.reserve());
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let b = b.clone();
                thread::spawn(move || b.reserve_or_wait())
            })
            .collect();
        // Most likely asleep by now (whether they are changes no outcome below).
        thread::sleep(std::time::Duration::from_millis(20));
        // One reservation comes back: exactly one waiter gets it, in any order of events;
        // the close sends the other two away empty-handed.
        b.release();
        b.close();
        let got: usize = waiters
            .into_iter()
            .map(|w| usize::from(w.join().unwrap()))
            .sum();
        assert_eq!(got, 1);
        assert!(!b.reserve_or_wait(), "closed and nothing left");
    }
}
