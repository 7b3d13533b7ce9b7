//! [`Drain`]: how a parking child's workers learn that the child is done. They wait on one
//! event set; nothing tells a thread blocked there to leave except an event. So the set holds
//! a level-triggered *bell* (an eventfd): rung, it wakes the waiters one after another (each
//! wake of a level-triggered registration wakes the next waiter while it stays readable).
//!
//! - A graceful stop drains: the child takes no new connection, finishes what it holds, and
//!   once its open count reaches 0 every worker must leave. Whoever makes that happen (the
//!   close of the last connection, or the stop itself when nothing is open) sets `exiting`
//!   and rings. `stopping` and the open count are a Dekker pair: the closer decrements, then
//!   reads `stopping`; the stopper sets `stopping`, then reads the count, each through
//!   `publish_then_check`, so at least one of them sees the drain done.
//! - The bell is also rung for other reasons (the stop itself, so that the main thread's
//!   request is seen). A woken worker clears it, and only then reads `exiting`: if set, it
//!   rings again before it leaves, for the next waiter. A worker that cleared a ring meant
//!   for the exit therefore always sees `exiting` (the ring was made after `exiting` was set,
//!   and the clear reads that ring) and passes it on. So no waiter is left behind.

use crate::handshake::publish_then_check;
use crate::sync::{AtomicBool, AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;

/// The bell in the workers' event set: level-triggered, readable from `ring` until `clear`.
pub trait Bell {
    /// Makes the bell readable (wakes waiters).
    fn ring(&self);
    /// Makes it unreadable again.
    fn clear(&self);
}

/// A child's open connections and its way out (see the module doc).
#[derive(Debug, Default)]
pub struct Drain {
    open: CachePadded<AtomicUsize>,
    stopping: AtomicBool,
    exiting: AtomicBool,
}

impl Drain {
    /// No connection open, not stopping.
    pub fn new() -> Drain {
        Drain::default()
    }

    /// A connection was opened.
    pub fn opened(&self) {
        // Relaxed: a new connection cannot end a drain; only closes and the stop race.
        self.open.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection was closed; rings the bell for the exit when it was the last one
    /// during a stop. Then runs `after` (the caller's own check of a flag that pairs with the
    /// close: it comes after the same fence).
    pub fn closed<R>(&self, bell: &impl Bell, after: impl FnOnce() -> R) -> R {
        // Relaxed decrement: the closer's half of the Dekker pair with `begin_stop`; the
        // handshake's fence orders it before the read of `stopping`.
        publish_then_check(
            || self.open.fetch_sub(1, Ordering::Relaxed),
            |was| {
                debug_assert!(was > 0, "closed more connections than were opened");
                if was == 1 && self.stopping.load(Ordering::Relaxed) {
                    self.exit(bell);
                }
                after()
            },
        )
    }

    /// Open connections now.
    pub fn open(&self) -> usize {
        // Relaxed: a gauge (the decisions above use their own SeqCst accesses).
        self.open.load(Ordering::Relaxed)
    }

    /// A graceful stop begins: the child will leave once nothing is open. `scan` runs
    /// after the stop is visible (the caller looks at its parked connections there, the
    /// other side of each parker's handshake), then the child leaves now if nothing is
    /// open.
    pub fn begin_stop(&self, bell: &impl Bell, scan: impl FnOnce()) {
        // Relaxed store: the stopper's half of the Dekker pair with `closed`; the
        // handshake's fence orders it before the scan and the read of the count.
        publish_then_check(
            || self.stopping.store(true, Ordering::Relaxed),
            |()| {
                scan();
                if self.open.load(Ordering::Relaxed) == 0 {
                    self.exit(bell);
                }
            },
        )
    }

    /// Every worker leaves now, whatever is open (an immediate stop, or the drain done).
    pub fn exit(&self, bell: &impl Bell) {
        // Release: ordered before the ring (a system call, which the clearer's read of the
        // bell follows); the waiters' Acquire load after their clear pairs with it.
        self.exiting.store(true, Ordering::Release);
        bell.ring();
    }

    /// Whether a stop began.
    pub fn is_stopping(&self) -> bool {
        // Relaxed: a caller that pairs this with a write of its own (a parker after it
        // published a connection, against the stop's scan of the parked ones) reads it in
        // `publish_then_check`, as the stop writes it.
        self.stopping.load(Ordering::Relaxed)
    }

    /// Whether every worker must leave.
    pub fn is_exiting(&self) -> bool {
        // Acquire: pairs with `exit`.
        self.exiting.load(Ordering::Acquire)
    }

    /// A worker woken by the bell: clears it, and says whether it must leave (then it has
    /// rung the bell again, for the next waiter).
    pub fn woken(&self, bell: &impl Bell) -> bool {
        bell.clear();
        if self.is_exiting() {
            bell.ring();
            return true;
        }
        false
    }
}
