//! MaxConnectionsPerChild where several threads of a child accept at once (idle workers
//! blocked in accept, or a parking child's workers woken by its event set): a connection
//! is reserved before the accept and given back if none came, so a child never accepts
//! more than the limit, and the child retires when the limit is *accepted*, not when it is
//! merely reserved (workers waiting to accept must not retire an idle child).

use std::sync::atomic::{AtomicU64, Ordering};

/// One child's MaxConnectionsPerChild (see the module doc).
#[derive(Debug)]
pub struct ConnectionBudget {
    /// Connections neither accepted nor reserved (`u64::MAX`: no limit).
    left: AtomicU64,
    /// Connections accepted.
    accepted: AtomicU64,
    /// MaxConnectionsPerChild (`u64::MAX`: none).
    limit: u64,
}

impl ConnectionBudget {
    /// A budget of `max` connections (0: unlimited, as MaxConnectionsPerChild 0).
    pub fn new(max: u64) -> ConnectionBudget {
        let limit = if max == 0 { u64::MAX } else { max };
        ConnectionBudget {
            left: AtomicU64::new(limit),
            accepted: AtomicU64::new(0),
            limit,
        }
    }

    /// Reserves a connection for an accept; false when every one left is reserved.
    pub fn reserve(&self) -> bool {
        // Relaxed: counters that guard no other memory.
        self.limit == u64::MAX
            || self
                .left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
    }

    /// Whether the limit is accepted in full (a child with no limit never is).
    pub fn spent(&self) -> bool {
        // Relaxed: as in reserve.
        self.limit != u64::MAX && self.accepted.load(Ordering::Relaxed) >= self.limit
    }

    /// Gives back a reservation whose accept gave nothing.
    pub fn release(&self) {
        if self.limit != u64::MAX {
            // Relaxed: as in reserve.
            self.left.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a reserved connection as accepted; true exactly once, for the one that
    /// reaches the limit.
    pub fn accepted(&self) -> bool {
        // Relaxed: as in reserve.
        self.limit != u64::MAX && self.accepted.fetch_add(1, Ordering::Relaxed) + 1 == self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::ConnectionBudget;

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
    }
}
